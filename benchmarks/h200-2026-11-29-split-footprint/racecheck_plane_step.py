"""One small ConvTranspose3d -> ReLU -> GroupNorm training step (case index argv[1], TF32
argv[2]) for compute-sanitizer runs of the plane input-gradient kernel, one case per process:
  compute-sanitizer --tool racecheck --kernel-name kns=plane python3 racecheck_plane_step.py 2 1
"""

import sys

import torch

import fused_ops

cases = [(2, 8, 3, 6, 8), (1, 12, 3, 5, 36), (1, 36, 3, 4, 40)]
shape = cases[int(sys.argv[1])]
tf32 = sys.argv[2] == "1"
torch.backends.cudnn.allow_tf32 = tf32
torch.backends.cuda.matmul.allow_tf32 = tf32
torch.manual_seed(0)
m = fused_ops.ConvTranspose3dReLUGroupNorm(shape[1], 16, 3, 4, bias=True).cuda()
x = torch.rand(shape, device="cuda", requires_grad=True)
c, g = m.conv_transpose, m.group_norm
args = (
    x,
    c.weight,
    c.bias,
    c.stride,
    c.padding,
    c.output_padding,
    c.groups,
    c.dilation,
    g.num_groups,
    g.weight,
    g.bias,
    g.eps,
)
print(
    "backward path:", fused_ops.backward_path("conv_transpose3d_relu_group_norm", *args), flush=True
)
out = m(x)
out.square().sum().backward()
torch.cuda.synchronize()
print(tf32, shape, float(x.grad.abs().sum()), flush=True)
