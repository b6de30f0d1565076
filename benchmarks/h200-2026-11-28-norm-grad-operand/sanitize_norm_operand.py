"""Small training steps through the backward from the GroupNorm's coefficients, for
compute-sanitizer: the forward with TF32 off (our split kernels: no cuDNN, which racecheck
cannot run), the backward in both modes (the TF32 flag is read by the backward). Run from the
repository root with FUSED_OPS_NORM_GRAD_OPERAND=1 (the calls of 2026-11-28 ran it while the
path was the default)."""

import sys

import torch

sys.path.insert(0, "python_tests")
import fused_ops  # noqa: E402, F401
from helpers import conv_transpose_args  # noqa: E402

torch.backends.cudnn.allow_tf32 = False
cases = [
    ((2, 8, 5, 6, 8), 16, 3, 4, {}),
    ((1, 36, 3, 4, 40), 200, 3, 8, dict(padding=1)),
    ((2, 12, 3, 4, 8), 8, (3, 1, 2), 2, dict(padding=(1, 0, 1), dilation=2)),
    ((2, 16, 4, 9, 32), 32, 3, 8, {}),
]
for tf32 in (False, True):
    for shape, c_out, k, g, kw in cases:
        torch.manual_seed(0)
        args = conv_transpose_args(shape, c_out, k, g, device="cuda", **kw)
        torch.backends.cudnn.allow_tf32 = False
        out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
        torch.backends.cudnn.allow_tf32 = tf32
        out.backward(torch.randn_like(out))
        torch.cuda.synchronize()
        print("ok", tf32, shape, float(args[0].grad.abs().sum()), float(args[1].grad.abs().sum()))
