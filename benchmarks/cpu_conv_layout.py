"""CPU: the convolutions of the two drop-ins, contiguous vs channels_last_3d, and the drop-ins.

For the conv stage on the CPU (ops/conv/conv_stage.cpp): times eager's ConvTranspose3d(32->64,
k3) on (2, 32, 16^3) and Conv3d(3->24, k3) on (16, 3, 24, 32, 32), forward and forward+backward,
with contiguous input and weight vs both in channels_last_3d (which ATen runs with oneDNN); and
the whole modules, eager's and the fused drop-ins, in both layouts. At each thread count of
``--threads``; each time is the best of ``--reps`` loops of at least ``--min-ms`` ms, the two
layouts interleaved.

Usage: FUSED_OPS_LIBRARY=build-cpu/libfused_ops.so python3 benchmarks/cpu_conv_layout.py
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import torch

if importlib.util.find_spec("fused_ops") is None:  # not installed: the source checkout's
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fused_ops  # noqa: E402
from fused_ops import reference, testing  # noqa: E402

CL = torch.channels_last_3d
# name: (module class, __init__ arguments, input shape, the module's convolution)
CASES = {
    "ConvTranspose3dReLUGroupNorm": (
        dict(in_channels=32, out_channels=64, kernel_size=3, groups=8),
        (2, 32, 16, 16, 16),
        lambda: torch.nn.ConvTranspose3d(32, 64, 3, bias=False),
    ),
    "Conv3dGroupNormMean": (
        dict(in_channels=3, out_channels=24, kernel_size=3, num_groups=8),
        (16, 3, 24, 32, 32),
        lambda: torch.nn.Conv3d(3, 24, 3),
    ),
}


def best_ms(fns, reps, min_s):
    """Best time (ms) of each function, repetitions interleaved."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(reps):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            iters = max(1, int(min_s / max(time.perf_counter() - t0, 1e-6)))
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            best[i] = min(best[i], (time.perf_counter() - t0) / iters)
    return [t * 1e3 for t in best]


def runner(module, x, backward):
    if not backward:

        def forward():
            with torch.no_grad():
                module(x)

        return forward
    x = x.detach().clone().requires_grad_(True)

    def forward_backward():
        module.zero_grad(set_to_none=True)
        x.grad = None
        out = module(x)
        out.backward(torch.ones_like(out))

    return forward_backward


def modules(name, init, make_conv):
    """(what, contiguous module, channels_last_3d module) for the conv and both modules."""
    torch.manual_seed(0)
    conv = make_conv()
    original = testing.randomise_(getattr(reference, name)(**init))
    fused = getattr(fused_ops, name)(**init)
    fused.load_state_dict(original.state_dict())
    out = []
    for what, m in (
        (f"eager {type(conv).__name__}", conv),
        (f"eager {name}", original),
        (f"fused {name}", fused),
    ):
        m_cl = type(m)(**init) if m is not conv else make_conv()
        m_cl.load_state_dict(m.state_dict())
        out.append((what, m, m_cl.to(memory_format=CL)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-ms", type=float, default=100.0)
    args = ap.parse_args()
    min_s = args.min_ms / 1e3
    print("| threads | what | mode | contiguous ms | channels_last_3d ms | speed-up |")
    print("|---:|---|---|---:|---:|---:|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, (init, shape, make_conv) in CASES.items():
            x = torch.rand(shape)
            for what, m, m_cl in modules(name, init, make_conv):
                for mode in ("forward", "forward+backward"):
                    bw = mode != "forward"
                    t_c, t_cl = best_ms(
                        [runner(m, x, bw), runner(m_cl, x.to(memory_format=CL), bw)],
                        args.reps,
                        min_s,
                    )
                    print(
                        f"| {threads} | {what} | {mode} | {t_c:.2f} | {t_cl:.2f} "
                        f"| {t_c / t_cl:.2f}x |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
