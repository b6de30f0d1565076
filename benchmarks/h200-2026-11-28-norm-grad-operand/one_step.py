"""One training step of the headline ConvTranspose3d -> ReLU -> GroupNorm (for Nsight Compute):
python3 one_step.py on|off (TF32 allowed or not)."""

import sys

import torch

import fused_ops

torch.backends.cudnn.allow_tf32 = sys.argv[1] == "on"
m = fused_ops.ConvTranspose3dReLUGroupNorm(64, 128, 3, 8).cuda()
x = torch.rand(16, 64, 32, 32, 32, device="cuda")
out = m(x)
out.backward(torch.randn_like(out))
torch.cuda.synchronize()
print("ok")
