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

import torch
from workloads import load_fused


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

    masks = testing.compare_relu_gradients_on_own_masks(original, fused, x)
    print(
        f"ConvTranspose3dReLUGroupNorm{tuple(init.values())[:3]} on {tuple(args.shape)}, "
        f"torch.{args.input}, TF32 {'on' if args.tf32 else 'off'}, "
        f"{torch.cuda.get_device_name() if x.is_cuda else 'CPU'}, split-TF32 kernel: "
        f"{fused_ops.split_tf32_conv_kernel() if x.is_cuda else '-'}"
    )
    for name in ("eager", "fused"):
        print(
            f"{name}: conv output error {masks.conv_error[name]:.2e}, {masks.flips[name]} conv "
            "outputs with the other sign than float64"
        )
    print(
        f"{'gradient':26s} {'eager plain':>12s} {'eager own':>12s} {'fused plain':>12s} "
        f"{'fused own':>12s}"
    )
    for what, own in masks.gradients.items():
        p = masks.plain[what]
        print(
            f"{what:26s} {p.eager_error:12.2e} {own.eager_error:12.2e} {p.fused_error:12.2e} "
            f"{own.fused_error:12.2e}"
        )
    print(
        "plain: against the float64 forward's own ReLU mask; own: against float64 "
        "arithmetic with the run's float32 mask"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
