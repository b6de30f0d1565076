"""Times the TF32 ConvTranspose3d -> ReLU -> GroupNorm inference forward on two paths.

Over shapes of the TF32 rewrite's family (k = 3, stride 1, no padding; with a conv bias and
random GroupNorm affine), with TF32 allowed:
cuDNN's convolution (FUSED_OPS_TF32_WGMMA=0) against the pipelined forward on our wgmma kernel
(FUSED_OPS_TF32_WGMMA=1; both read per call), in one process: per path the median and the
minimum over 7 timings of 10 back-to-back calls (CUDA events; per call), the path, and the
relative L2 error against float64. Needs a CUDA GPU; the pipelined path runs on Hopper only.

    python3 benchmarks/tf32_forward_sweep.py [N,C_in,C_out,S ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

if importlib.util.find_spec("fused_ops") is None:  # not installed: the source checkout's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from timing import back_to_back_ms, require_cuda  # noqa: E402

import fused_ops  # noqa: E402

# (N, C_in, C_out, S): the headline first, then batch, channel and spatial variations.
SHAPES = [
    (16, 64, 128, 32),
    (8, 64, 128, 32),
    (4, 64, 128, 32),
    (2, 64, 128, 32),
    (1, 64, 128, 32),
    (16, 32, 32, 32),
    (16, 32, 64, 32),
    (16, 64, 64, 32),
    (16, 128, 128, 16),
    (16, 64, 128, 16),
    (32, 32, 32, 16),
    (2, 16, 32, 24),
    (16, 64, 128, 24),
    (8, 128, 64, 24),
    (4, 128, 128, 24),
]
GROUPS = 8
OP = "conv_transpose3d_relu_group_norm"


def timed(op, args, reps=7, calls=10):
    for _ in range(3):
        op(*args)
    times = [back_to_back_ms(lambda: op(*args), calls) for _ in range(reps)]
    return statistics.median(times), min(times)


def run(shape) -> None:
    n, c_in, c_out, size = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand((n, c_in, size, size, size), device="cuda", generator=g)
    w = (torch.rand((c_in, c_out, 3, 3, 3), device="cuda", generator=g) - 0.5) * 0.1
    b = torch.rand(c_out, device="cuda", generator=g) - 0.5
    gw = torch.rand(c_out, device="cuda", generator=g) + 0.5
    gb = torch.rand(c_out, device="cuda", generator=g) - 0.5
    args = (x, w, b, [1, 1, 1], [0, 0, 0], [0, 0, 0], 1, [1, 1, 1], GROUPS, gw, gb, 1e-5)
    op = torch.ops.fused.conv_transpose3d_relu_group_norm
    y64 = F.conv_transpose3d(x.double(), w.double(), b.double())
    y64 = F.group_norm(F.relu(y64), GROUPS, gw.double(), gb.double(), 1e-5)
    results = {}
    with torch.no_grad():
        for name, setting in (("default", "0"), ("pipelined", "1")):
            os.environ["FUSED_OPS_TF32_WGMMA"] = setting
            out = op(*args)
            error = ((out.double() - y64).norm() / y64.norm()).item()
            path = fused_ops.dispatch_path(OP, *args)
            results[name] = (*timed(op, args), error, path)
    del y64
    default, pipelined = results["default"], results["pipelined"]
    print(
        f"N {n:3d} C {c_in:3d}->{c_out:3d} S {size:2d}: default {default[0]:7.3f} ms "
        f"(min {default[1]:.3f}, err {default[2]:.2e}) | pipelined {pipelined[0]:7.3f} ms "
        f"(min {pipelined[1]:.3f}, err {pipelined[2]:.2e}) | ratio "
        f"{default[0] / pipelined[0]:.3f} | paths: {default[3]} / {pipelined[3]}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "shapes", nargs="*", metavar="N,C_in,C_out,S", help="shapes (default: the sweep's 15)"
    )
    options = parser.parse_args()
    require_cuda("tf32_forward_sweep.py")
    torch.backends.cudnn.allow_tf32 = True
    shapes = [tuple(int(v) for v in s.split(",")) for s in options.shapes] or SHAPES
    print(torch.cuda.get_device_name(), "| torch", torch.__version__)
    for shape in shapes:
        run(shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
