"""One small ConvTranspose3d -> ReLU -> GroupNorm training step through the backward from the
GroupNorm's coefficients (FUSED_OPS_NORM_GRAD_OPERAND=1), case argv[1], backward TF32 argv[2]:
the forward with TF32 off (split kernels), asserts the backward path is dy_from_norm."""

import os
import sys

import torch

sys.path.insert(0, "python_tests")
import fused_ops  # noqa: E402
from helpers import conv_transpose_args  # noqa: E402

assert os.environ.get("FUSED_OPS_NORM_GRAD_OPERAND") == "1"
cases = [
    ((2, 8, 5, 6, 8), 16, 3, 4, {}),
    ((1, 36, 3, 4, 40), 200, 3, 8, dict(padding=1)),
    ((2, 12, 3, 4, 8), 8, (3, 1, 2), 2, dict(padding=(1, 0, 1), dilation=2)),
    ((2, 16, 4, 9, 32), 32, 3, 8, {}),
]
shape, c_out, k, g, kw = cases[int(sys.argv[1])]
tf32 = sys.argv[2] == "1"
torch.manual_seed(0)
args = conv_transpose_args(shape, c_out, k, g, device="cuda", **kw)
torch.backends.cudnn.allow_tf32 = tf32
path = fused_ops.backward_path("conv_transpose3d_relu_group_norm", *args)
print("backward path:", path, flush=True)
assert "dy_from_norm" in path, path
torch.backends.cudnn.allow_tf32 = False
out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
torch.backends.cudnn.allow_tf32 = tf32
out.backward(torch.randn_like(out))
torch.cuda.synchronize()
print("ok", tf32, shape, float(args[0].grad.abs().sum()), float(args[1].grad.abs().sum()))
