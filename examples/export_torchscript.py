#!/usr/bin/env python3
"""Export the fused drop-in models as TorchScript, for the C++ example (cpp_inference/).

For each of the two patterns (ConvTranspose3d->ReLU->GroupNorm and
Conv3d->GroupNorm->mean) this script

1. builds the original PyTorch model (fused_ops.reference) with random parameters
   (GroupNorm weight/bias and conv bias random too, never GroupNorm's default init),
2. builds the fused drop-in (fused_ops.ConvTranspose3dReLUGroupNorm / Conv3dGroupNormMean)
   and loads the original's state_dict into it,
3. checks that both agree on a random input (prints the max abs error, fails above
   --tolerance),
4. scripts the fused model with torch.jit.script and saves it, with the input shape the
   C++ example should use stored in the file (extra file "input_shape"), and checks that
   the saved file reloads and gives the same output.

Usage:
    python3 examples/export_torchscript.py [CONV_TRANSPOSE_PT [CONV3D_PT]]
        [--headline] [--device cpu|cuda] [--seed N] [--tolerance T]
        [--only conv_transpose3d_relu_group_norm|conv3d_group_norm_mean]

Default outputs: examples/conv_transpose3d_relu_group_norm.pt and
examples/conv3d_group_norm_mean.pt. Default sizes are small (seconds on a CPU);
--headline uses the sizes of the headline workloads (meant for a GPU).

Then run the C++ example on a saved model:
    build/examples/fused_ops_infer examples/conv_transpose3d_relu_group_norm.pt
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if importlib.util.find_spec("fused_ops") is None:  # not installed: the source checkout's
    sys.path.insert(0, os.path.dirname(HERE))

import fused_ops  # noqa: E402  (loads libfused_ops.so)
from fused_ops import reference, testing  # noqa: E402

# TorchScript is deprecated from PyTorch 2.14 on, but is what a libtorch program loads.
warnings.filterwarnings("ignore", message=r".*torch\.jit.*deprecated", category=FutureWarning)
warnings.filterwarnings("ignore", message=r".*torch\.jit.*deprecated", category=DeprecationWarning)

NAMES = list(reference.WORKLOADS)

# Small configurations (same structure as the headline ones) for a quick run on a CPU.
SMALL = {
    "conv_transpose3d_relu_group_norm": dict(
        init=dict(in_channels=8, out_channels=16, kernel_size=3, groups=4, bias=True),
        input_shape=(2, 8, 6, 7, 5),
    ),
    "conv3d_group_norm_mean": dict(
        init=dict(in_channels=3, out_channels=24, kernel_size=3, num_groups=8),
        input_shape=(4, 3, 8, 9, 10),
    ),
}


def build_checked(name: str, headline: bool, device: str, seed: int, tolerance: float):
    """The fused drop-in `name` with the parameters of a randomised original, checked against
    it on a random input: (fused model in eval mode, input, fused output, max abs error)."""
    spec = reference.WORKLOADS[name] if headline else SMALL[name]
    init, input_shape = spec["init"], tuple(spec["input_shape"])
    Original = reference.WORKLOADS[name]["model"]
    Fused = getattr(fused_ops, Original.__name__)

    torch.manual_seed(seed)
    original = testing.randomise_(Original(**init), seed=seed).to(device)
    generator = torch.Generator().manual_seed(seed + 1)
    fused = Fused(**init).to(device)
    fused.load_state_dict(original.state_dict())
    original.eval()
    fused.eval()

    # Compare in plain float32 (TF32 would make both sides differ from float32 by ~1e-3,
    # each in its own way).
    tf32 = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        x = torch.rand(input_shape, generator=generator).to(device)
        with torch.no_grad():
            expected = original(x)
            got = fused(x)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    err = (got - expected).abs().max().item()
    scale = expected.abs().max().item()
    print(
        f"{name}: input {list(input_shape)} on {device}, output {list(got.shape)}, "
        f"max abs error fused vs PyTorch {err:.3e} (max |output| {scale:.3e})"
    )
    if not err <= tolerance * max(1.0, scale):
        raise SystemExit(
            f"{name}: fused and PyTorch outputs differ by {err:.3e} (tolerance {tolerance:g})"
        )
    return fused, x, got, err


def export(name: str, path: str, headline: bool, device: str, seed: int, tolerance: float) -> float:
    fused, x, got, err = build_checked(name, headline, device, seed, tolerance)
    input_shape = tuple(x.shape)
    scripted = torch.jit.script(fused)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    extra = {"input_shape": " ".join(str(s) for s in input_shape), "model": name}
    torch.jit.save(scripted, path, _extra_files=extra)

    loaded = torch.jit.load(path, map_location=device)
    with torch.no_grad():
        reloaded = loaded(x)
    if not torch.equal(reloaded, got):
        raise SystemExit(
            f"{name}: the reloaded TorchScript model gives another output "
            f"(max abs difference {(reloaded - got).abs().max().item():.3e})"
        )
    print(
        f"{name}: saved TorchScript model to {path} "
        f"(input_shape {extra['input_shape']}; reloaded output identical)"
    )
    return err


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "conv_transpose_path",
        nargs="?",
        default=os.path.join(HERE, "conv_transpose3d_relu_group_norm.pt"),
        help="where to save the ConvTranspose3dReLUGroupNorm model",
    )
    parser.add_argument(
        "conv3d_path",
        nargs="?",
        default=os.path.join(HERE, "conv3d_group_norm_mean.pt"),
        help="where to save the Conv3dGroupNormMean model",
    )
    parser.add_argument(
        "--headline",
        action="store_true",
        help="the headline workload sizes of fused_ops.reference (default: small sizes)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="device to check and trace on (the saved model is loaded onto "
        "whatever device the C++ example picks)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of parameters and inputs")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=1e-4,
        help="max abs error allowed between fused and PyTorch, relative to max(1, max |output|)",
    )
    parser.add_argument("--only", choices=NAMES, help="export only this model")
    args = parser.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU available")
    paths = {NAMES[0]: args.conv_transpose_path, NAMES[1]: args.conv3d_path}
    print(f"fused_ops library: {fused_ops.library_path}; torch {torch.__version__}")
    for name in NAMES:
        if args.only is None or args.only == name:
            export(name, paths[name], args.headline, args.device, args.seed, args.tolerance)
    return 0


if __name__ == "__main__":
    sys.exit(main())
