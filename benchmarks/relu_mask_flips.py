"""ConvTranspose3dReLUGroupNorm's gradients against float64, with ReLU's mask told apart.

A float32 convolution output within its rounding error of zero can land on the other side of
zero than the float64 one. ReLU then passes the gradient at that element in one run and
blocks it in the other, so the input and weight gradients differ by that element's whole
contribution: a relative error of ~1e-4 at the headline size from a handful of elements,
whichever float32 convolution ran (no float32 computation can know the float64 sign). This
measures, for eager PyTorch and for fused-ops on the same input and parameters (the headline
model: C_out = 2 C_in, k3, no conv bias, GroupNorm(8) with a random affine, as
benchmarks/numerics.py randomises it):

* how many conv outputs have the other sign than in float64 (the "flips");
* each gradient's relative L2 error against two float64 references: the plain one (float64
  forward and its own mask: what numerics.py reports) and one that takes the run's own ReLU
  mask (float64 arithmetic on the float32 run's decisions: the backward's own accuracy).

    python3 benchmarks/relu_mask_flips.py                 # headline size, TF32 off, CUDA
    python3 benchmarks/relu_mask_flips.py --shape 2 64 12 12 12 --input randn
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F
from workloads import load_fused


def conv_output_of_fused(model, x):
    """The fused forward's float32 convolution output (the tensor its autograd saves)."""
    conv, gn = model.conv_transpose, model.group_norm
    outputs = torch.ops.fused._conv_transpose3d_relu_group_norm_forward(
        x,
        conv.weight,
        conv.bias,
        conv.stride,
        conv.padding,
        conv.output_padding,
        conv.groups,
        conv.dilation,
        gn.num_groups,
        gn.weight,
        gn.bias,
        gn.eps,
    )
    return outputs[1]


def gradients(model, x, g):
    """(input gradient, parameter gradients by name) of sum(model(x) * g)."""
    x = x.detach().clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    model(x).backward(g.to(x.dtype))
    grads = {"input": x.grad}
    grads.update({name: p.grad for name, p in model.named_parameters()})
    return grads


def float64_gradients(original, x, g, mask=None):
    """The float64 gradients; with `mask` (float32 conv output > 0), ReLU takes it instead of
    the float64 conv output's sign."""
    model = copy.deepcopy(original).double()
    conv, gn = model.conv_transpose, model.group_norm

    def forward(inp):
        c = conv(inp)
        a = F.relu(c) if mask is None else c * mask.to(c.dtype)
        return F.group_norm(a, gn.num_groups, gn.weight, gn.bias, gn.eps)

    x = x.detach().double().requires_grad_(True)
    forward(x).backward(g)
    grads = {"input": x.grad}
    grads.update({name: p.grad for name, p in model.named_parameters()})
    return grads


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--shape",
        type=int,
        nargs=5,
        default=[16, 64, 32, 32, 32],
        help="input (N, C_in, D, H, W); C_out = 2 C_in, which GroupNorm(8) must divide",
    )
    parser.add_argument("--input", choices=["rand", "randn"], default="rand")
    parser.add_argument("--tf32", action="store_true", help="TF32 allowed (default: off)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--lib", help="libfused_ops.so (default: FUSED_OPS_LIBRARY, the build)")
    args = parser.parse_args()
    _, fused_ops = load_fused(args.lib)
    from fused_ops import reference, testing

    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    cin = args.shape[1]
    init = dict(in_channels=cin, out_channels=2 * cin, kernel_size=3, groups=8, bias=False)
    torch.manual_seed(0)
    original = testing.randomise_(reference.ConvTranspose3dReLUGroupNorm(**init)).to(args.device)
    fused = fused_ops.ConvTranspose3dReLUGroupNorm(**init).to(args.device)
    fused.load_state_dict(original.state_dict())
    x = (torch.rand if args.input == "rand" else torch.randn)(args.shape, device=args.device)

    with torch.no_grad():
        c64 = copy.deepcopy(original.conv_transpose).double()(x.double())
        positive64 = c64 > 0
        c_eager = original.conv_transpose(x)
        c_fused = conv_output_of_fused(fused, x)
    out_shape = c64.shape
    gen = torch.Generator(device=args.device).manual_seed(1)
    g = torch.randn(out_shape, generator=gen, device=args.device, dtype=torch.float64)

    plain = float64_gradients(original, x, g)
    print(
        f"ConvTranspose3dReLUGroupNorm{tuple(init.values())[:3]} on {tuple(args.shape)}, "
        f"torch.{args.input}, TF32 {'on' if args.tf32 else 'off'}, "
        f"{torch.cuda.get_device_name() if x.is_cuda else 'CPU'}, split-TF32 kernel: "
        f"{fused_ops.split_tf32_conv_kernel() if x.is_cuda else '-'}"
    )
    print(f"conv outputs: {c64.numel()}")
    rows = {}
    for name, model, c32 in (("eager", original, c_eager), ("fused", fused, c_fused)):
        flips = int(((c32 > 0) != positive64).sum())
        own = float64_gradients(original, x, g, mask=c32 > 0)
        grads = gradients(model, x, g)
        rows[name] = (flips, {k: (rel(v, plain[k]), rel(v, own[k])) for k, v in grads.items()})
        print(f"{name}: {flips} conv outputs with the other sign than float64")
    print(
        f"{'gradient':26s} {'eager plain':>12s} {'eager own':>12s} {'fused plain':>12s} "
        f"{'fused own':>12s}"
    )
    for k in rows["eager"][1]:
        e, f = rows["eager"][1][k], rows["fused"][1][k]
        print(f"{k:26s} {e[0]:12.2e} {e[1]:12.2e} {f[0]:12.2e} {f[1]:12.2e}")
    print(
        "plain: against the float64 forward's own ReLU mask; own: against float64 "
        "arithmetic with the run's float32 mask"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
