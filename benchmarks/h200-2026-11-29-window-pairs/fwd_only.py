"""Inference forwards of the Conv3d headline only (for ncu of the finalize kernel)."""

import sys

import torch

sys.path.insert(0, "python_tests")
import fused_ops  # noqa: E402,F401
from helpers import conv3d_args  # noqa: E402

args = conv3d_args((128, 3, 24, 32, 32), 24, 3, 8, device="cuda", requires_grad=False)
args[0] = torch.rand_like(args[0])
with torch.no_grad():
    for _ in range(4):
        torch.ops.fused.conv3d_group_norm_mean(*args)
torch.cuda.synchronize()
print("done")
