#!/usr/bin/env python3
"""Benchmark of fused-ops against eager PyTorch and torch.compile (the command line).

Workloads (headline sizes; the conv models' are fused_ops/reference.py's WORKLOADS):
  relu_group_norm                   F.group_norm(F.relu(x)) on (16,128,34,34,34), G=8
  group_norm_mean                   F.group_norm(x).mean(dim=[1,2,3,4]) on (128,24,22,30,30), G=8
  conv_transpose3d_relu_group_norm  ConvTranspose3d(64->128,k=3) -> ReLU -> GroupNorm(8),
                                    x (16,64,32,32,32)
  conv3d_group_norm_mean            Conv3d(3->24,k=3) -> GroupNorm(8) -> mean, x (128,3,24,32,32)

Implementations: eager (the original module / composite), compile (torch.compile, mode default),
autotune (torch.compile mode="max-autotune-no-cudagraphs"), fused (the fused_ops drop-in, eager).
Modes: fwd (under torch.no_grad) and fwdbwd (forward, then torch.autograd.grad of
sum(out * g) for a fixed random g, w.r.t. the input and every parameter).

On the GPU: the headline sizes, TF32 on and off for the conv models, and the targets.
On the CPU (--device cpu): a size sweep, 5 sizes per workload from tiny to large, each with
1 thread and with all threads, printed with eager/fused and (norm ops) the fraction of the
copy bandwidth; no targets (they are GPU targets). --device cpu --quick: the tiny shapes only.
On the CPU eager and fused are timed in alternating batches (--rounds), a batch during which
other processes ran timed again. torch.compile rows are off by default on the CPU (name
--compile-modes to add them).

The code: workloads.py (what is measured), timing.py (how), report.py (tables and files);
this file is the command line. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import warnings

import torch
from report import environment, write_report
from timing import (
    Case,
    Runner,
    ceiling_sizes,
    log,
    measure_ceilings,
    restore_tf32,
    tf32_flags,
)
from workloads import (
    HERE,
    MODES,
    WORKLOAD_ALIASES,
    WORKLOAD_NAMES,
    load_fused,
    make_workloads,
    sweep_specs,
)

COMPILE_ALIASES = {
    "default": "compile",
    "compile": "compile",
    "max-autotune-no-cudagraphs": "autotune",
    "autotune": "autotune",
    "max-autotune": "autotune",
}


def comma_list(text):
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="cuda[:i] or cpu (default: cuda if available)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny shapes, few iterations (smoke test of the code path)",
    )
    p.add_argument(
        "--headline",
        action="store_true",
        help="on the CPU: the headline sizes instead of the size sweep (slow)",
    )
    p.add_argument(
        "--only",
        default="all",
        help="comma list of workloads: relu_group_norm (rgn), group_norm_mean (gnm), "
        "conv_transpose3d_relu_group_norm (ct), conv3d_group_norm_mean (c3)",
    )
    p.add_argument("--modes", default="fwd,fwdbwd", help="fwd,fwdbwd")
    p.add_argument(
        "--tf32",
        default="on,off",
        help="TF32 settings for the conv models: on,off (the CPU sweep runs them once, "
        "under the default flags: they change nothing on the CPU)",
    )
    p.add_argument("--skip-compile", action="store_true", help="no torch.compile rows")
    p.add_argument(
        "--compile-modes",
        default=None,
        help="which torch.compile modes: default, max-autotune-no-cudagraphs "
        "(aliases: compile, autotune); default: both on CUDA, none on the CPU (CPU "
        "compiles take longer than the timings: name the modes to add them)",
    )
    p.add_argument(
        "--iters", type=int, default=None, help="max timed iterations (50; quick 5; CPU sweep 50)"
    )
    p.add_argument(
        "--min-iters",
        type=int,
        default=None,
        help="min timed iterations (10; quick 3; CPU sweep 5)",
    )
    p.add_argument(
        "--target-s",
        type=float,
        default=None,
        help="aim for about this many seconds of timed iterations (1.0; quick 0.2; CPU sweep 0.5)",
    )
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls (3; quick 1; sweep 2)")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="CPU: eager and fused timed in this many alternating batches each, a batch "
        "during which other processes ran timed again (5; quick 2)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="wall-clock budget: compile rows that would start past it are skipped, "
        "and compiles are interrupted past it (default 250 on CUDA, 150 on CPU, "
        "550 for the CPU sweep; 0 = none)",
    )
    p.add_argument(
        "--hard-limit-s",
        type=float,
        default=None,
        help="past this, print/write what was measured and exit (default budget + 50; 0 = none)",
    )
    p.add_argument(
        "--compile-timeout-s",
        type=float,
        default=0,
        help="per-compile timeout in seconds (0 = only the budget)",
    )
    p.add_argument(
        "--err-batch",
        type=int,
        default=4,
        help="samples checked against the float64 reference when the whole batch "
        "would be too big or slow in float64 (relu_group_norm, conv_transpose3d)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads on CPU (default: 1 with --quick, else unchanged); "
        "the CPU sweep runs 1 thread and this many (default: all, torch's default)",
    )
    p.add_argument(
        "--conv-bias",
        action="store_true",
        help="ConvTranspose3dReLUGroupNorm built with a conv bias (nn.ConvTranspose3d's "
        "default; the headline model has none; Conv3dGroupNormMean always has one)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lib", default=None, help="path of libfused_ops.so (else fused_ops finds it)")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="output folder")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failures")
    a = p.parse_args(argv)
    on_cpu = torch.device(a.device).type == "cpu"
    a.sweep = on_cpu and not a.quick and not a.headline
    if a.quick:
        a.quick_defaults = dict(iters=5, min_iters=3, target_s=0.2, warmup=1, rounds=2)
    elif a.sweep:
        a.quick_defaults = dict(iters=50, min_iters=5, target_s=0.5, warmup=2, rounds=5)
    else:
        a.quick_defaults = dict(iters=50, min_iters=10, target_s=1.0, warmup=3, rounds=5)
    for k, v in a.quick_defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.modes = [m.replace("+", "").replace("fwd_bwd", "fwdbwd") for m in comma_list(a.modes)]
    for m in a.modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r} (fwd, fwdbwd)")
    a.tf32 = comma_list(a.tf32)
    for t in a.tf32:
        if t not in ("on", "off"):
            p.error(f"unknown tf32 setting {t!r} (on, off)")
    if a.compile_modes is None:
        a.compile_modes = "" if on_cpu else "default,max-autotune-no-cudagraphs"
    cm = []
    for c in comma_list(a.compile_modes):
        if c not in COMPILE_ALIASES:
            p.error(f"unknown compile mode {c!r}")
        cm.append(COMPILE_ALIASES[c])
    a.compile_impls = [] if a.skip_compile else cm
    if a.only == "all":
        a.only = list(WORKLOAD_NAMES)
    else:
        sel = []
        for s in comma_list(a.only):
            s = WORKLOAD_ALIASES.get(s, s)
            if s not in WORKLOAD_NAMES:
                p.error(
                    f"unknown workload {s!r}; choose from {WORKLOAD_NAMES} or "
                    f"{list(WORKLOAD_ALIASES)}"
                )
            sel.append(s)
        a.only = [n for n in WORKLOAD_NAMES if n in sel]
    if a.budget_s is None:
        a.budget_s = 250.0 if not on_cpu else (550.0 if a.sweep else 150.0)
    if a.hard_limit_s is None:
        a.hard_limit_s = a.budget_s + 50 if a.budget_s > 0 else 0.0
    return a


def main(argv=None):
    a = parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("CUDA is not available; use --device cpu")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    elif a.sweep:
        a.sweep_threads = sorted({1, a.threads or torch.get_num_threads()})
    elif a.threads or a.quick:
        torch.set_num_threads(a.threads or 1)
    warnings.filterwarnings("ignore", message=".*TF32.*")
    warnings.filterwarnings("ignore", message=".*allow_tf32.*")
    warnings.filterwarnings("ignore", message=".*TensorFloat32.*")
    os.makedirs(a.out, exist_ok=True)
    tf32_defaults = tf32_flags()

    fused_info, fo = load_fused(a.lib)
    env = environment(device)
    if hasattr(fo, "split_tf32_conv_kernel"):
        # Which kernel runs the float32-grade convolutions (ConvTranspose3d, TF32 off).
        env["split_tf32_conv_kernel"] = fo.split_tf32_conv_kernel(device)
    if hasattr(fo, "onepass_products_kernel"):
        # Which instructions run the Conv3d one-pass forward's products (float32).
        env["onepass_products_kernel"] = fo.onepass_products_kernel(device)
    log(
        f"device: {env['device_name']} | torch {env['torch']} | cuda {env['cuda']} | "
        f"cudnn {env['cudnn']} | fused_ops: {fused_info['source']} ({fused_info['library']})"
        + (
            f" | split-TF32 convolution: {env['split_tf32_conv_kernel']}"
            if env.get("split_tf32_conv_kernel")
            else ""
        )
        + (
            f" | one-pass products: {env['onepass_products_kernel']}"
            if env.get("onepass_products_kernel")
            else ""
        )
    )
    log(
        f"workloads {a.only} | modes {a.modes} | tf32 {a.tf32} | compile {a.compile_impls} | "
        f"budget {a.budget_s:.0f}s | quick={a.quick}"
        + (f" | CPU sweep, threads {a.sweep_threads}" if a.sweep else "")
    )

    t0 = time.perf_counter()
    sizes = ceiling_sizes(device, a.quick)
    if a.sweep:
        ceilings = {}
        for threads in a.sweep_threads:
            torch.set_num_threads(threads)
            ceilings[threads] = measure_ceilings(device, *sizes)
        cases = [
            Case(spec["op"], spec, threads, sweep=True)
            for spec in sweep_specs(fo, a.only)
            for threads in a.sweep_threads
        ]
    else:
        ceilings = {None: measure_ceilings(device, *sizes)}
        workloads = make_workloads(fo, a.quick, conv_bias=a.conv_bias)
        cases = [Case(name, workloads[name]) for name in a.only]
    restore_tf32(tf32_defaults)
    for threads, c in ceilings.items():
        label = f" ({threads} thread{'s' if threads > 1 else ''})" if threads else ""
        log(
            f"ceilings{label}: "
            + ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in c.items()
            )
        )

    runner = Runner(a, device, cases, ceilings)
    runner.t_start = t0
    finished = threading.Event()
    reported = threading.Lock()

    def report(note=None):
        write_report(a, env, fused_info, ceilings, cases, runner.results, t0, note=note)

    def watchdog():
        # Hard stop: if the run is still going well past the budget (a compile that ignores
        # the alarm), report what was measured and leave, so the caller's time limit holds.
        if finished.wait(a.hard_limit_s - (time.perf_counter() - t0)):
            return
        if reported.acquire(blocking=False):
            try:
                report(note=f"partial: hard limit of {a.hard_limit_s:.0f}s reached")
            finally:
                sys.stdout.flush()
                os._exit(0)

    if a.hard_limit_s > 0:
        threading.Thread(target=watchdog, daemon=True).start()
    try:
        runner.run()
    except KeyboardInterrupt:
        log("interrupted: reporting what was measured")
    finally:
        finished.set()
        restore_tf32(tf32_defaults)
    if reported.acquire(blocking=False):
        report()


if __name__ == "__main__":
    main()
