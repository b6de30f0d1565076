# The pipelined TF32 forward (FUSED_OPS_TF32_WGMMA=1) alone, for compute-sanitizer: no reference.
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
import fused_ops

torch.backends.cudnn.allow_tf32 = True
torch.manual_seed(0)
for shape, co, g in [
    ((2, 8, 5, 6, 7), 16, 4),
    ((5, 16, 32, 32, 32), 32, 8),
    ((2, 36, 4, 5, 6), 68, 4),
]:
    m = fused_ops.ConvTranspose3dReLUGroupNorm(shape[1], co, 3, g, bias=True).cuda()
    with torch.no_grad():
        m.group_norm.weight.normal_()
        m.group_norm.bias.normal_()
        x = torch.rand(*shape, device="cuda")
        print(shape, m(x).float().abs().sum().item())
torch.cuda.synchronize()
