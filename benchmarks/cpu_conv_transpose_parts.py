"""Where ConvTranspose3dReLUGroupNorm's CPU time goes, fused-ops against eager.

For the CPU sweep's ConvTranspose3dReLUGroupNorm sizes (workloads.py), at 1 and 2 threads,
times in alternating batches (timing.time_interleaved: a batch during which another process
ran is timed again), forward under no_grad and forward+backward (autograd.grad of
sum(out * g) w.r.t. the input and every parameter):
  eager   the original module (ConvTranspose3d -> ReLU -> GroupNorm)
  fused   the drop-in (fused_ops.ConvTranspose3dReLUGroupNorm)
  conv    the convolution alone, as both run it (F.conv_transpose3d)
and, forward only, the two tails on a conv output computed once: eager's
F.group_norm(F.relu(c)) and fused's torch.ops.fused.relu_group_norm(c). Prints medians,
eager/fused, and what the convolution leaves to each (module - conv), so that a gap between
the modules can be told from the convolution's run-to-run spread (its p10-p90 is printed).

Usage: FUSED_OPS_LIBRARY=build/libfused_ops.so python3 benchmarks/cpu_conv_transpose_parts.py
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if importlib.util.find_spec("fused_ops") is None:  # not installed: the source checkout's
    sys.path.insert(0, os.path.dirname(HERE))
from timing import CpuContention, time_interleaved  # noqa: E402
from workloads import CPU_SWEEP_SIZES, randomise_  # noqa: E402

import fused_ops  # noqa: E402
from fused_ops import reference  # noqa: E402


def cases():
    return CPU_SWEEP_SIZES["conv_transpose3d_relu_group_norm"]


def build(init, shape, seed=0):
    torch.manual_seed(seed)
    eager = reference.ConvTranspose3dReLUGroupNorm(**init)
    randomise_(eager, seed + 1)  # as bench.py's Built: random GroupNorm affine and conv bias
    fused = fused_ops.ConvTranspose3dReLUGroupNorm(**init)
    fused.load_state_dict(eager.state_dict())
    x = torch.randn(shape)
    return eager, fused, x


def forward_fns(eager, fused, x):
    conv = eager.conv_transpose
    gn = eager.group_norm
    with torch.no_grad():
        c = conv(x)

    def no_grad(f):
        def go(inp):
            with torch.no_grad():
                f(inp)

        return go

    return {
        "eager": no_grad(eager),
        "fused": no_grad(fused),
        "conv": no_grad(conv),
        "eager tail": no_grad(
            lambda _: F.group_norm(F.relu(c), gn.num_groups, gn.weight, gn.bias, gn.eps)
        ),
        "fused tail": no_grad(
            lambda _: torch.ops.fused.relu_group_norm(c, gn.num_groups, gn.weight, gn.bias, gn.eps)
        ),
    }


def backward_fns(eager, fused, x):
    g = torch.randn_like(eager(x).detach())

    def fwd_bwd(module):
        params = [p for p in module.parameters() if p.requires_grad]

        def go(inp):
            out = module(inp)
            torch.autograd.grad((out * g).sum(), [inp, *params])

        return go

    return {"eager": fwd_bwd(eager), "fused": fwd_bwd(fused), "conv": fwd_bwd(eager.conv_transpose)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--min-iters", type=int, default=30)
    ap.add_argument("--target-s", type=float, default=2.0)
    ap.add_argument("--cases", type=int, nargs="*", help="indices into the sweep's sizes")
    args = ap.parse_args()
    contention = CpuContention()
    chosen = [cases()[i] for i in args.cases] if args.cases else cases()
    print(
        "| threads | mode | Cin->Cout | input | eager ms | fused ms | eager/fused | conv ms "
        "(p10-p90) | eager - conv | fused - conv | eager tail ms | fused tail ms |\n"
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for threads in args.threads:
        torch.set_num_threads(threads)
        for init, shape in chosen:
            eager, fused, x = build(init, shape)
            for mode in ("fwd", "fwdbwd"):
                x.requires_grad_(mode == "fwdbwd")
                fns = (
                    forward_fns(eager, fused, x) if mode == "fwd" else backward_fns(eager, fused, x)
                )
                t = time_interleaved(
                    fns,
                    [x],
                    iters=10_000,
                    warmup=3,
                    target_s=args.target_s,
                    min_iters=args.min_iters,
                    rounds=args.rounds,
                    contention=contention,
                )
                med = {k: v["median_ms"] for k, v in t.items()}
                tail = (
                    f"{med['eager tail']:.3f} | {med['fused tail']:.3f}"
                    if mode == "fwd"
                    else "- | -"
                )
                print(
                    f"| {threads} | {mode} | {init['in_channels']}->{init['out_channels']} "
                    f"| {'x'.join(map(str, shape))} | {med['eager']:.3f} | {med['fused']:.3f} "
                    f"| {med['eager'] / med['fused']:.3f}x | {med['conv']:.3f} "
                    f"({t['conv']['p10_ms']:.3f}-{t['conv']['p90_ms']:.3f}) "
                    f"| {med['eager'] - med['conv']:.3f} | {med['fused'] - med['conv']:.3f} "
                    f"| {tail} |",
                    flush=True,
                )
            x.requires_grad_(False)


if __name__ == "__main__":
    main()
