#!/usr/bin/env python3
"""Export the fused drop-in models with torch.export and compile them with AOTInductor, for
the C++ example (cpp_inference/), PyTorch's deployment path after TorchScript.

For each of the two patterns this script builds the fused drop-in with the parameters of a
randomised original and checks it against the original (as export_torchscript.py does), then

1. exports it with torch.export, the batch dimension dynamic, and checks the exported
   program on the example input and on another batch size;
2. saves the ExportedProgram (<name>.export.pt2) and checks that torch.export.load gives it
   back;
3. compiles it with torch._inductor.aoti_compile_and_package into <name>.pt2 (the input shape
   the C++ example should use stored as the package's "input_shape" metadata) and checks the
   compiled package, loaded back in Python, against the eager output.

The fused operators stay operators in the exported graph (they have Meta kernels for
torch.export and are run by the AOTInductor runtime's proxy executor, through the
dispatcher): a process that runs the package must have loaded libfused_ops.so first.

Usage:
    python3 examples/export_aoti.py [OUT_DIR] [--headline] [--device cpu|cuda] [--seed N]
        [--only conv_transpose3d_relu_group_norm|conv3d_group_norm_mean]

Then, from C++ (no Python):
    build/examples/fused_ops_infer OUT_DIR/conv3d_group_norm_mean.pt2 --device cpu
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if importlib.util.find_spec("fused_ops") is None:  # not installed: the source checkout's
    sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from export_torchscript import NAMES, build_checked  # noqa: E402

import fused_ops  # noqa: E402  (loads libfused_ops.so)


def export(name: str, out_dir: str, headline: bool, device: str, seed: int, tolerance: float):
    # The checks compare runs of the same kernels in plain float32 (with TF32, cuDNN may pick
    # another algorithm from one call to the next, each with its own TF32 rounding).
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        _export(name, out_dir, headline, device, seed, tolerance)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32


def _export(name: str, out_dir: str, headline: bool, device: str, seed: int, tolerance: float):
    fused, x, got, _ = build_checked(name, headline, device, seed, tolerance)
    batch = torch.export.Dim("batch", min=1, max=65536)
    exported = torch.export.export(fused, (x,), dynamic_shapes={"x": {0: batch}})
    other = torch.rand((x.shape[0] + 3, *x.shape[1:]), device=device)
    with torch.no_grad():
        for inp, expected in [(x, got), (other, fused(other))]:
            out = exported.module()(inp)
            if not torch.allclose(out, expected, rtol=1e-6, atol=1e-6):
                raise SystemExit(f"{name}: the exported program differs from the model")
    os.makedirs(out_dir, exist_ok=True)
    program_path = os.path.join(out_dir, f"{name}.export.pt2")
    torch.export.save(exported, program_path)
    with torch.no_grad():
        # (Not bitwise: cuDNN's float32 transposed convolutions may sum in another order.)
        if not torch.allclose(torch.export.load(program_path).module()(x), got, 1e-6, 1e-6):
            raise SystemExit(f"{name}: the reloaded ExportedProgram gives another output")

    package_path = os.path.join(out_dir, f"{name}.pt2")
    input_shape = " ".join(str(s) for s in x.shape)
    torch._inductor.aoti_compile_and_package(
        exported,
        package_path=package_path,
        inductor_configs={"aot_inductor.metadata": {"input_shape": input_shape, "model": name}},
    )
    compiled = torch._inductor.aoti_load_package(package_path)
    with torch.no_grad():
        for inp in (x, other):
            if not torch.allclose(compiled(inp), fused(inp), rtol=1e-6, atol=1e-6):
                raise SystemExit(f"{name}: the AOTInductor package differs from the model")
    print(
        f"{name}: saved {program_path} (ExportedProgram, dynamic batch) and {package_path} "
        f"(AOTInductor, {device}; input_shape {input_shape}); outputs checked"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", default=HERE, help="where to write the .pt2 files")
    parser.add_argument(
        "--headline", action="store_true", help="the headline sizes (default: small sizes)"
    )
    parser.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="the device the package is compiled for (it runs there only)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of parameters and inputs")
    parser.add_argument(
        "--tolerance", type=float, default=1e-4, help="fused vs PyTorch, as export_torchscript.py"
    )
    parser.add_argument("--only", choices=NAMES, help="export only this model")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU available")
    print(f"fused_ops library: {fused_ops.library_path}; torch {torch.__version__}")
    for name in NAMES:
        if args.only is None or args.only == name:
            export(name, args.out_dir, args.headline, args.device, args.seed, args.tolerance)
    return 0


if __name__ == "__main__":
    sys.exit(main())
