#!/usr/bin/env python3
"""Benchmark of fused-ops against eager PyTorch and torch.compile.

Workloads (headline sizes of shared/reference/models.py):
  relu_group_norm                   F.group_norm(F.relu(x)) on (16,128,34,34,34), G=8
  group_norm_mean                   F.group_norm(x).mean(dim=[1,2,3,4]) on (128,24,22,30,30), G=8
  conv_transpose3d_relu_group_norm  ConvTranspose3d(64->128,k=3) -> ReLU -> GroupNorm(8),
                                    x (16,64,32,32,32)
  conv3d_group_norm_mean            Conv3d(3->24,k=3) -> GroupNorm(8) -> mean, x (128,3,24,32,32)

Implementations: eager (the original module / composite), compile (torch.compile, mode default),
autotune (torch.compile mode="max-autotune-no-cudagraphs"), fused (the fused_ops drop-in, eager).
Modes: fwd (under torch.no_grad) and fwdbwd (forward, then torch.autograd.grad of
sum(out * g) for a fixed random g, w.r.t. the input and every parameter).

Run `python3 benchmarks/bench.py --help`; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import os
import platform
import signal
import sys
import threading
import time
import traceback
import warnings

import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

IMPLS = ["eager", "compile", "autotune", "fused"]
IMPL_LABEL = {
    "eager": "eager",
    "compile": "compile(default)",
    "autotune": "compile(max-autotune-no-cudagraphs)",
    "fused": "fused_ops",
}
COMPILE_MODE = {"compile": "default", "autotune": "max-autotune-no-cudagraphs"}
MODES = ["fwd", "fwdbwd"]


def log(msg):
    print(msg, flush=True)


# The norm-only composites, as modules holding a GroupNorm (so that every workload has the
# same shape: a module, an input, parameters).


class ReLUGroupNormRef(nn.Module):
    def __init__(self, channels, num_groups):
        super().__init__()
        self.group_norm = nn.GroupNorm(num_groups, channels)

    def forward(self, x):
        gn = self.group_norm
        return F.group_norm(F.relu(x), gn.num_groups, gn.weight, gn.bias, gn.eps)


class GroupNormMeanRef(nn.Module):
    def __init__(self, channels, num_groups):
        super().__init__()
        self.group_norm = nn.GroupNorm(num_groups, channels)

    def forward(self, x):
        gn = self.group_norm
        return F.group_norm(x, gn.num_groups, gn.weight, gn.bias, gn.eps).mean(dim=[1, 2, 3, 4])


class ReLUGroupNormFused(ReLUGroupNormRef):
    def forward(self, x):
        gn = self.group_norm
        return torch.ops.fused.relu_group_norm(x, gn.num_groups, gn.weight, gn.bias, gn.eps)


class GroupNormMeanFused(GroupNormMeanRef):
    def forward(self, x):
        gn = self.group_norm
        return torch.ops.fused.group_norm_mean(x, gn.num_groups, gn.weight, gn.bias, gn.eps)


# ---------------------------------------------------------------------------------------
# Loading fused_ops


def load_fused(lib_arg):
    """Imports the repository's fused_ops package (which loads libfused_ops.so: --lib, else
    FUSED_OPS_LIBRARY, else the build folders) and returns (info dict, the reference module
    classes, the fused drop-in classes)."""
    if lib_arg:
        os.environ["FUSED_OPS_LIBRARY"] = os.path.abspath(lib_arg)
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    import fused_ops  # noqa: E402  (raises ImportError naming where it looked)
    from fused_ops import reference

    info = {
        "source": "fused_ops package",
        "library": fused_ops.library_path,
        "has_cuda_kernels": bool(
            torch._C._dispatch_has_kernel_for_dispatch_key("fused::relu_group_norm", "CUDA")
        ),
    }
    refs = (reference.ConvTranspose3dReLUGroupNorm, reference.Conv3dGroupNormMean)
    fused = (fused_ops.ConvTranspose3dReLUGroupNorm, fused_ops.Conv3dGroupNormMean)
    return info, refs, fused


# ---------------------------------------------------------------------------------------
# Workloads


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def make_workloads(quick, refs, fused):
    """name -> spec. Byte counts are 'bytes that must move' (float32); FLOPs are the conv's.
    refs / fused: the (ConvTranspose3d, Conv3d) reference and drop-in model classes."""
    ref_ct, ref_c3 = refs
    fused_ct, fused_c3 = fused
    if quick:
        rgn_shape, gnm_shape = (2, 16, 12, 12, 12), (4, 24, 6, 8, 8)
        ct_init = dict(in_channels=8, out_channels=16, kernel_size=3, groups=8, bias=False)
        ct_in = (2, 8, 8, 8, 8)
        c3_init = dict(in_channels=3, out_channels=24, kernel_size=3, num_groups=8)
        c3_in = (4, 3, 8, 10, 10)
    else:
        rgn_shape, gnm_shape = (16, 128, 34, 34, 34), (128, 24, 22, 30, 30)
        ct_init = dict(in_channels=64, out_channels=128, kernel_size=3, groups=8, bias=False)
        ct_in = (16, 64, 32, 32, 32)
        c3_init = dict(in_channels=3, out_channels=24, kernel_size=3, num_groups=8)
        c3_in = (128, 3, 24, 32, 32)

    k = ct_init["kernel_size"]
    n, cin, d, h, w = ct_in
    ct_flops = 2 * n * cin * ct_init["out_channels"] * k**3 * d * h * w
    k3 = c3_init["kernel_size"]
    n3, cin3, d3, h3, w3 = c3_in
    do, ho, wo = d3 - k3 + 1, h3 - k3 + 1, w3 - k3 + 1
    c3_flops = 2 * n3 * c3_init["out_channels"] * cin3 * k3**3 * do * ho * wo

    return {
        "relu_group_norm": dict(
            kind="norm",
            input_shape=rgn_shape,
            input_dist="randn",
            make_ref=lambda: ReLUGroupNormRef(rgn_shape[1], 8),
            make_fused=lambda: ReLUGroupNormFused(rgn_shape[1], 8),
            # fwd: x read twice (stats, normalise) + y written; bwd: x and dy read twice
            # (reductions, then dx) + dx written.
            bytes={"fwd": 3 * numel(rgn_shape) * 4, "fwdbwd": 8 * numel(rgn_shape) * 4},
            flops=None,
        ),
        "group_norm_mean": dict(
            kind="norm",
            input_shape=gnm_shape,
            input_dist="randn",
            make_ref=lambda: GroupNormMeanRef(gnm_shape[1], 8),
            make_fused=lambda: GroupNormMeanFused(gnm_shape[1], 8),
            # fwd: x read once; bwd: x read once + dx written (dx is affine in x per group).
            bytes={"fwd": numel(gnm_shape) * 4, "fwdbwd": 3 * numel(gnm_shape) * 4},
            flops=None,
        ),
        "conv_transpose3d_relu_group_norm": dict(
            kind="model",
            input_shape=ct_in,
            input_dist="rand",
            make_ref=lambda: ref_ct(**ct_init),
            make_fused=lambda: fused_ct(**ct_init),
            bytes=None,
            # fwd+bwd: grad-input and grad-weight convolutions cost as much as the forward.
            flops={"fwd": ct_flops, "fwdbwd": 3 * ct_flops},
        ),
        "conv3d_group_norm_mean": dict(
            kind="model",
            input_shape=c3_in,
            input_dist="rand",
            make_ref=lambda: ref_c3(**c3_init),
            make_fused=lambda: fused_c3(**c3_init),
            bytes=None,
            flops={"fwd": c3_flops, "fwdbwd": 3 * c3_flops},
        ),
    }


WORKLOAD_ALIASES = {
    "rgn": "relu_group_norm",
    "relu": "relu_group_norm",
    "gnm": "group_norm_mean",
    "ct": "conv_transpose3d_relu_group_norm",
    "convt": "conv_transpose3d_relu_group_norm",
    "c3": "conv3d_group_norm_mean",
    "conv3d": "conv3d_group_norm_mean",
}


def randomise_(module, seed):
    """Random GroupNorm affine and conv bias (GroupNorm's default init hides bugs)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.GroupNorm):
                m.weight.copy_(1.0 + 0.5 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.5 * torch.randn(m.bias.shape, generator=g))
            elif isinstance(m, (nn.Conv3d, nn.ConvTranspose3d)) and m.bias is not None:
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))


class Built:
    """Modules, inputs and grad-output of one workload on the device (rebuilt identically)."""

    def __init__(self, name, spec, device, n_inputs, seed=0):
        self.name, self.spec, self.device = name, spec, device
        torch.manual_seed(seed)
        self.ref = spec["make_ref"]()
        randomise_(self.ref, seed + 1)
        self.ref = self.ref.to(device)
        self.fused_error = None
        try:
            self.fused = spec["make_fused"]()
            self.fused.load_state_dict(self.ref.state_dict())
            self.fused = self.fused.to(device)
        except Exception as e:  # noqa: BLE001
            self.fused = None
            self.fused_error = f"{type(e).__name__}: {e}"
        self.inputs = []
        for i in range(n_inputs):
            gen = torch.Generator(device=device).manual_seed(seed + 100 + i)
            fn = torch.randn if spec["input_dist"] == "randn" else torch.rand
            self.inputs.append(fn(spec["input_shape"], device=device, generator=gen))
        with torch.no_grad():
            out_shape = self.ref(self.inputs[0]).shape
        gen = torch.Generator(device=device).manual_seed(seed + 7)
        self.grad_out = torch.randn(out_shape, device=device, generator=gen)
        self.out_shape = tuple(out_shape)


# ---------------------------------------------------------------------------------------
# Timing


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def quantile(sorted_vals, q):
    if not sorted_vals:
        return float("nan")
    pos = q * (len(sorted_vals) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def time_fn(fn, inputs, device, iters, warmup, target_s, min_iters):
    """Median/p10/p90 in ms of fn(x) rotating over inputs; per-call CUDA events on GPU."""
    nin = len(inputs)
    for i in range(warmup):
        fn(inputs[i % nin])
    sync(device)
    t0 = time.perf_counter()
    for i in range(2):
        fn(inputs[i % nin])
    sync(device)
    est = (time.perf_counter() - t0) / 2
    n = int(max(min_iters, min(iters, target_s / max(est, 1e-6))))
    times = []
    if device.type == "cuda":
        ev = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(n)
        ]
        for i in range(n):
            ev[i][0].record()
            fn(inputs[i % nin])
            ev[i][1].record()
        torch.cuda.synchronize(device)
        times = [s.elapsed_time(e) for s, e in ev]
    else:
        for i in range(n):
            t = time.perf_counter()
            fn(inputs[i % nin])
            times.append((time.perf_counter() - t) * 1e3)
    st = sorted(times)
    return dict(
        median_ms=quantile(st, 0.5),
        p10_ms=quantile(st, 0.1),
        p90_ms=quantile(st, 0.9),
        mean_ms=sum(st) / len(st),
        min_ms=st[0],
        n_iters=n,
        n_inputs=nin,
    )


class CompileTimeout(Exception):
    pass


class alarm:
    """SIGALRM-based timeout of the main thread (POSIX); seconds <= 0 disables.

    Fires again every 2 s after the first time, in case the first exception is swallowed
    (inductor catches and wraps some); `fired` tells whether it went off.
    """

    def __init__(self, seconds):
        self.seconds = seconds if seconds and seconds > 0 else 0
        self.fired = False

    def _handler(self, signum, frame):
        self.fired = True
        raise CompileTimeout(f"compile exceeded {self.seconds:.0f} s")

    def __enter__(self):
        self.ok = self.seconds > 0 and hasattr(signal, "setitimer")
        if self.ok:
            self.old = signal.signal(signal.SIGALRM, self._handler)
            signal.setitimer(signal.ITIMER_REAL, self.seconds, 2.0)
        return self

    def __exit__(self, *exc):
        if self.ok:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            signal.signal(signal.SIGALRM, self.old)
        return False


def set_tf32(flag):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cudnn.allow_tf32 = flag
        torch.backends.cuda.matmul.allow_tf32 = flag


def free(device):
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# Ceilings


def measure_ceilings(device, quick):
    res = {}
    try:
        nelem = (16 << 20) if quick else (256 << 20)  # 64 MiB / 1 GiB of float32
        if device.type == "cuda":
            free_b, _ = torch.cuda.mem_get_info(device)
            while 2 * nelem * 4 > free_b // 3:
                nelem //= 2
        src = torch.randn(nelem, device=device)
        dst = torch.empty_like(src)
        t = time_fn(
            lambda s, dst=dst: dst.copy_(s),
            [src],
            device,
            iters=20,
            warmup=3,
            target_s=1.0,
            min_iters=5,
        )
        res["copy_bytes"] = 2 * nelem * 4
        res["copy_ms"] = t["median_ms"]
        res["copy_GBps"] = 2 * nelem * 4 / (t["median_ms"] * 1e-3) / 1e9
        del src, dst
    except Exception as e:  # noqa: BLE001
        res["copy_error"] = f"{type(e).__name__}: {e}"
    free(device)
    size = 1024 if quick else 8192
    try:
        a = torch.randn(size, size, device=device)
        b = torch.randn(size, size, device=device)
        res["matmul_size"] = size
        for label, flag in (("tf32", True), ("fp32", False)):
            set_tf32(flag)
            t = time_fn(
                lambda x, b=b: torch.mm(x, b),
                [a],
                device,
                iters=20,
                warmup=2,
                target_s=1.0,
                min_iters=3,
            )
            res[f"matmul_{label}_ms"] = t["median_ms"]
            res[f"matmul_{label}_TFLOPs"] = 2 * size**3 / (t["median_ms"] * 1e-3) / 1e12
        del a, b
    except Exception as e:  # noqa: BLE001
        res["matmul_error"] = f"{type(e).__name__}: {e}"
    free(device)
    return res


# ---------------------------------------------------------------------------------------
# Measurement of one (workload, tf32, implementation) over the selected modes


def errors_vs(out, ref):
    out = out.detach().to(torch.float64)
    ref = ref.to(out.device)
    diff = out - ref
    return dict(
        max_abs_err=float(diff.abs().max()),
        rel_l2_err=float(diff.norm() / ref.norm().clamp_min(1e-300)),
    )


class Runner:
    def __init__(self, args, device, workloads, ceilings):
        self.args, self.device, self.workloads, self.ceilings = args, device, workloads, ceilings
        self.results = {}  # (workload, mode, tf32, impl) -> dict
        self.refs = {}  # workload -> float64 reference output of inputs[0][:k]
        self.t_start = time.perf_counter()
        self.compile_seen = {}  # (compile impl, workload kind) -> longest task seconds so far

    def elapsed(self):
        return time.perf_counter() - self.t_start

    def n_inputs(self, spec):
        in_bytes = numel(spec["input_shape"]) * 4
        if self.device.type != "cuda":
            return 2
        props = torch.cuda.get_device_properties(self.device)
        l2 = getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
        n = max(2, math.ceil(2 * l2 / in_bytes))
        free_b, _ = torch.cuda.mem_get_info(self.device)
        cap = max(2, int(0.15 * free_b // in_bytes))
        return int(min(n, cap, 64))

    def build(self, name):
        spec = self.workloads[name]
        return Built(name, spec, self.device, self.n_inputs(spec), seed=self.args.seed)

    def reference(self, name, b):
        if name not in self.refs:
            spec, x0 = b.spec, b.inputs[0]
            k = x0.shape[0]
            # The whole batch where the float64 copy is small and cheap, else the first samples.
            if x0.numel() * 8 > (512 << 20) or (spec["flops"] and spec["flops"]["fwd"] > 20e9):
                k = min(self.args.err_batch, k)
            ref64 = copy.deepcopy(b.ref).to(torch.float64)
            with torch.no_grad():
                self.refs[name] = (k, ref64(b.inputs[0][:k].to(torch.float64)))
            del ref64
        return self.refs[name]

    def record(self, name, mode, tf32, impl, entry):
        spec = self.workloads[name]
        entry.update(workload=name, mode=mode, tf32=tf32, impl=impl)
        if entry.get("median_ms"):
            ms = entry["median_ms"]
            if spec["bytes"]:
                gbps = spec["bytes"][mode] / (ms * 1e-3) / 1e9
                entry["bytes"] = spec["bytes"][mode]
                entry["GBps"] = gbps
                if self.ceilings.get("copy_GBps"):
                    entry["pct_copy_bw"] = 100 * gbps / self.ceilings["copy_GBps"]
            if spec["flops"]:
                tfl = spec["flops"][mode] / (ms * 1e-3) / 1e12
                entry["flops"] = spec["flops"][mode]
                entry["TFLOPs"] = tfl
                ceil = self.ceilings.get(
                    "matmul_tf32_TFLOPs" if tf32 == "on" else "matmul_fp32_TFLOPs"
                )
                if ceil:
                    entry["pct_matmul"] = 100 * tfl / ceil
        self.results[(name, mode, tf32, impl)] = entry
        status = entry.get("status")
        if status == "ok":
            extra = ""
            if "rel_l2_err" in entry:
                extra = f"  relL2={entry['rel_l2_err']:.2e} maxabs={entry['max_abs_err']:.2e}"
            if "compile_s" in entry:
                extra += f"  compile={entry['compile_s']:.1f}s"
            log(
                f"  [{self.elapsed():6.1f}s] {name:34s} {mode:6s} tf32={tf32:3s} {impl:8s} "
                f"{entry['median_ms']:9.3f} ms (p10 {entry['p10_ms']:.3f}, "
                f"p90 {entry['p90_ms']:.3f},"
                f" n={entry['n_iters']}x{entry['n_inputs']} inputs){extra}"
            )
        else:
            log(
                f"  [{self.elapsed():6.1f}s] {name:34s} {mode:6s} tf32={tf32:3s} {impl:8s} "
                f"{status}: {entry.get('error', '')[:300]}"
            )

    def run_impl(self, name, b, tf32_list, impl, compile_timeout=0):
        """Measure impl of a workload for each TF32 setting and mode. Returns seconds spent.

        torch.compile impls compile once per call (after torch._dynamo.reset()); a later TF32
        setting re-uses the compiled module (dynamo recompiles if its guards ask for it): pass
        one setting per call where the generated code bakes TF32 in (max-autotune templates).
        """
        t_task = time.perf_counter()
        a, dev = self.args, self.device
        if impl == "fused":
            if b.fused is None:
                for tf32 in tf32_list:
                    for mode in a.modes:
                        self.record(
                            name,
                            mode,
                            tf32,
                            impl,
                            dict(status="error", error=f"fused module: {b.fused_error}"),
                        )
                return time.perf_counter() - t_task
            module = b.fused
        elif impl == "eager":
            module = b.ref
        else:
            torch._dynamo.reset()
            module = torch.compile(b.ref, mode=COMPILE_MODE[impl])
        params = [p for p in module.parameters()]
        k, ref_out = self.reference(name, b)
        timed_out = False
        for tf32 in tf32_list:
            if tf32 != "n/a":
                set_tf32(tf32 == "on")
            err_done = False
            for mode in a.modes:
                if timed_out:
                    self.record(
                        name,
                        mode,
                        tf32,
                        impl,
                        dict(status="skipped", error="after a compile timeout"),
                    )
                    continue
                entry = {"status": "ok"}
                try:
                    if dev.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(dev)
                    if mode == "fwd":
                        for x in b.inputs:
                            x.requires_grad_(False)

                        def fn(x, module=module):
                            with torch.no_grad():
                                return module(x)
                    else:
                        for x in b.inputs:
                            x.requires_grad_(True)

                        def fn(x, module=module):
                            out = module(x)
                            return torch.autograd.grad(out, [x] + params, grad_outputs=b.grad_out)

                    if impl in COMPILE_MODE:
                        # Untimed first call: compiles (or recompiles) forward and backward.
                        t0 = time.perf_counter()
                        al = alarm(compile_timeout)
                        try:
                            with al:
                                fn(b.inputs[0])
                                sync(dev)
                        except Exception as e:  # noqa: BLE001
                            if al.fired:
                                raise CompileTimeout(
                                    f"compile exceeded {compile_timeout:.0f} s (time budget)"
                                ) from e
                            raise
                        entry["compile_s"] = time.perf_counter() - t0
                    if not err_done:
                        if mode == "fwd":
                            with torch.no_grad():
                                out = module(b.inputs[0])
                        else:
                            out = module(b.inputs[0]).detach()
                        entry.update(errors_vs(out[:k], ref_out))
                        entry["err_samples"] = k
                        del out
                        err_done = True
                    entry.update(
                        time_fn(fn, b.inputs, dev, a.iters, a.warmup, a.target_s, a.min_iters)
                    )
                    if dev.type == "cuda":
                        entry["peak_mem_GB"] = torch.cuda.max_memory_allocated(dev) / 1e9
                except Exception as e:  # noqa: BLE001  (compile failures, OOM, missing kernels)
                    msg = str(e).strip().splitlines()
                    entry = {
                        "status": "error",
                        "error": f"{type(e).__name__}: {msg[0] if msg else ''}"[:500],
                    }
                    if a.verbose:
                        traceback.print_exc()
                    timed_out = isinstance(e, CompileTimeout)
                    free(dev)
                finally:
                    for x in b.inputs:
                        x.requires_grad_(False)
                self.record(name, mode, tf32, impl, entry)
        if impl in COMPILE_MODE:
            del module
            torch._dynamo.reset()
        free(dev)
        return time.perf_counter() - t_task

    def tf32_settings(self, name):
        return self.args.tf32 if self.workloads[name]["kind"] == "model" else ["n/a"]

    def run(self):
        a = self.args
        # Phase 1: eager and fused (cheap, always complete).
        for name in a.only:
            log(f"== {name}: eager + fused")
            try:
                b = self.build(name)
            except Exception as e:  # noqa: BLE001
                log(f"  build failed: {type(e).__name__}: {e}")
                for tf32 in self.tf32_settings(name):
                    for mode in a.modes:
                        for impl in ("eager", "fused"):
                            self.record(
                                name, mode, tf32, impl, dict(status="error", error=f"build: {e}")
                            )
                free(self.device)
                continue
            for impl in ("eager", "fused"):
                self.run_impl(name, b, self.tf32_settings(name), impl)
            del b
            free(self.device)
        # Phase 2: torch.compile, in priority order, within the time budget.
        if not a.compile_impls:
            return
        norm = [n for n in a.only if self.workloads[n]["kind"] == "norm"]
        models = [n for n in a.only if self.workloads[n]["kind"] == "model"]
        tasks = []  # (workload, tf32 settings, impl), in priority order
        if "compile" in a.compile_impls:
            # Default mode calls aten (cuDNN/cuBLAS) for the convolutions, which read the TF32
            # flags at run time: one compile serves both settings.
            tasks += [(n, ["n/a"], "compile") for n in norm]
            tasks += [(n, list(a.tf32), "compile") for n in models]
        if "autotune" in a.compile_impls:
            # max-autotune may pick Triton templates with TF32 baked in: one compile each.
            tasks += [(n, ["on"], "autotune") for n in models if "on" in a.tf32]
            tasks += [(n, ["n/a"], "autotune") for n in norm]
            tasks += [(n, ["off"], "autotune") for n in models if "off" in a.tf32]
        default_est = {"compile": 30.0, "autotune": 60.0}
        for name, tf32_list, impl in tasks:
            kind = self.workloads[name]["kind"]
            # Estimated task time: seen for this (impl, kind), else the longest seen for this
            # impl, else a guess.
            seen_impl = [v for (i, _k), v in self.compile_seen.items() if i == impl]
            est = self.compile_seen.get(
                (impl, kind), max(seen_impl) if seen_impl else default_est[impl]
            )
            if a.budget_s > 0 and self.elapsed() + est > a.budget_s:
                for tf32 in tf32_list:
                    for mode in a.modes:
                        self.record(
                            name,
                            mode,
                            tf32,
                            impl,
                            dict(
                                status="skipped",
                                error=f"budget: {self.elapsed():.0f}s done + ~{est:.0f}s "
                                f"> {a.budget_s:.0f}s",
                            ),
                        )
                continue
            log(f"== {name}: {IMPL_LABEL[impl]} tf32={','.join(tf32_list)}")
            timeout = a.compile_timeout_s
            if a.budget_s > 0:
                left = a.budget_s - self.elapsed() + 15
                timeout = min(timeout, left) if timeout > 0 else left
            try:
                b = self.build(name)
                spent = self.run_impl(name, b, tf32_list, impl, compile_timeout=timeout)
                self.compile_seen[(impl, kind)] = max(
                    self.compile_seen.get((impl, kind), 0.0), spent
                )
                del b
            except Exception as e:  # noqa: BLE001
                for tf32 in tf32_list:
                    for mode in a.modes:
                        if (name, mode, tf32, impl) not in self.results:
                            self.record(
                                name,
                                mode,
                                tf32,
                                impl,
                                dict(status="error", error=f"{type(e).__name__}: {e}"),
                            )
            free(self.device)


# ---------------------------------------------------------------------------------------
# Reporting


SHORT = {
    "conv_transpose3d_relu_group_norm": "convT3d_relu_gn",
    "conv3d_group_norm_mean": "conv3d_gn_mean",
}


def fmt_ms(e):
    if e is None:
        return "-"
    if e.get("status") != "ok":
        return "skip" if e.get("status") == "skipped" else "ERR"
    return f"{e['median_ms']:.3f}"


def speedup(results, key, impl):
    f = results.get(key + ("fused",))
    o = results.get(key + (impl,))
    if not f or not o or f.get("status") != "ok" or o.get("status") != "ok":
        return None
    return o["median_ms"] / f["median_ms"]


def row_keys(results):
    seen = []
    for w, m, t, _i in results:
        if (w, m, t) not in seen:
            seen.append((w, m, t))
    wl_order = [
        "relu_group_norm",
        "group_norm_mean",
        "conv_transpose3d_relu_group_norm",
        "conv3d_group_norm_mean",
    ]
    tf_order = {"n/a": 0, "on": 1, "off": 2}
    seen.sort(
        key=lambda k: (
            wl_order.index(k[0]) if k[0] in wl_order else 9,
            tf_order.get(k[2], 3),
            MODES.index(k[1]),
        )
    )
    return seen


def format_table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(
        str(c).rjust(w) if i else str(c).ljust(w)  # noqa: E731
        for i, (c, w) in enumerate(zip(r, widths))
    )
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep] + [line(r) for r in rows])


def summary_table(results):
    header = [
        "workload",
        "mode",
        "tf32",
        "eager ms",
        "compile ms",
        "autotune ms",
        "fused ms",
        "fused x eager",
        "x compile",
        "x autotune",
    ]
    rows = []
    for key in row_keys(results):
        w, m, t = key
        cells = [SHORT.get(w, w), m, t] + [fmt_ms(results.get(key + (i,))) for i in IMPLS]
        for i in ("eager", "compile", "autotune"):
            s = speedup(results, key, i)
            cells.append(f"{s:.2f}x" if s else "-")
        rows.append(cells)
    return format_table(header, rows)


def detail_table(results):
    header = [
        "workload",
        "mode",
        "tf32",
        "impl",
        "p10 ms",
        "median",
        "p90 ms",
        "GB/s",
        "%copyBW",
        "TFLOP/s",
        "%mm",
        "max|err|",
        "relL2err",
        "note",
    ]
    rows = []
    for key in row_keys(results):
        for impl in IMPLS:
            e = results.get(key + (impl,))
            if e is None:
                continue
            ok = e.get("status") == "ok"
            g = lambda k, f, e=e, ok=ok: (f % e[k]) if ok and e.get(k) is not None else "-"
            note = ""
            if not ok:
                note = f"{e.get('status')}: {e.get('error', '')}"[:48]
            elif "compile_s" in e:
                note = f"compile {e['compile_s']:.1f}s"
            rows.append(
                [
                    SHORT.get(key[0], key[0]),
                    key[1],
                    key[2],
                    impl,
                    g("p10_ms", "%.3f"),
                    g("median_ms", "%.3f"),
                    g("p90_ms", "%.3f"),
                    g("GBps", "%.4g"),
                    g("pct_copy_bw", "%.0f%%"),
                    g("TFLOPs", "%.3g"),
                    g("pct_matmul", "%.0f%%"),
                    g("max_abs_err", "%.1e"),
                    g("rel_l2_err", "%.1e"),
                    note,
                ]
            )
    return format_table(header, rows)


def targets(results):
    out = []

    def bw(w):
        e = results.get((w, "fwd", "n/a", "fused"))
        if not e or e.get("status") != "ok" or "pct_copy_bw" not in e:
            return None
        return e["pct_copy_bw"] / 100

    def ratio(w, m, t):
        f = results.get((w, m, t, "fused"))
        e = results.get((w, m, t, "eager"))
        if not f or not e or f.get("status") != "ok" or e.get("status") != "ok":
            return None
        return f["median_ms"] / e["median_ms"]

    checks = [
        ("relu_group_norm fwd fused >= 80% of copy BW", bw("relu_group_norm"), 0.80, ">="),
        ("group_norm_mean fwd fused >= 80% of copy BW", bw("group_norm_mean"), 0.80, ">="),
        (
            "conv_transpose3d model fwd fused/eager <= 0.45 (tf32 on)",
            ratio("conv_transpose3d_relu_group_norm", "fwd", "on"),
            0.45,
            "<=",
        ),
        (
            "conv_transpose3d model fwd fused/eager <= 0.40 (tf32 off)",
            ratio("conv_transpose3d_relu_group_norm", "fwd", "off"),
            0.40,
            "<=",
        ),
        (
            "conv3d model fwd fused/eager <= 0.55 (tf32 on)",
            ratio("conv3d_group_norm_mean", "fwd", "on"),
            0.55,
            "<=",
        ),
        (
            "conv3d model fwd fused/eager <= 0.55 (tf32 off)",
            ratio("conv3d_group_norm_mean", "fwd", "off"),
            0.55,
            "<=",
        ),
        (
            "conv_transpose3d model fwd+bwd fused/eager <= 0.75 (tf32 on)",
            ratio("conv_transpose3d_relu_group_norm", "fwdbwd", "on"),
            0.75,
            "<=",
        ),
        (
            "conv_transpose3d model fwd+bwd fused/eager <= 0.75 (tf32 off)",
            ratio("conv_transpose3d_relu_group_norm", "fwdbwd", "off"),
            0.75,
            "<=",
        ),
    ]
    for label, val, thr, op in checks:
        if val is None:
            status = "N/A"
        else:
            status = "PASS" if (val >= thr if op == ">=" else val <= thr) else "MISS"
        out.append(dict(target=label, value=val, threshold=thr, op=op, status=status))
    return out


def format_targets(tg):
    lines = []
    for t in tg:
        v = (
            "not measured"
            if t["value"] is None
            else f"{t['value']:.3f} (threshold {t['threshold']})"
        )
        lines.append(f"  {t['status']:4s}  {t['target']:62s} {v}")
    return "\n".join(lines)


def environment(device):
    env = dict(
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        host=platform.node(),
        python=platform.python_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        device_type=device.type,
        cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        cudnn_benchmark=torch.backends.cudnn.benchmark,
    )
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(
            device_name=p.name,
            sm_count=p.multi_processor_count,
            total_mem_GB=p.total_memory / 1e9,
            L2_cache_MB=getattr(p, "L2_cache_size", 0) / 2**20,
            capability=f"{p.major}.{p.minor}",
        )
    else:
        env.update(
            device_name=platform.processor() or platform.machine(),
            cpu_threads=torch.get_num_threads(),
        )
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        pass
    return env


# ---------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny shapes, few iterations (smoke test of the code path)",
    )
    p.add_argument(
        "--only",
        default="all",
        help="comma list of workloads: relu_group_norm (rgn), group_norm_mean (gnm), "
        "conv_transpose3d_relu_group_norm (ct), conv3d_group_norm_mean (c3)",
    )
    p.add_argument("--modes", default="fwd,fwdbwd", help="fwd,fwdbwd")
    p.add_argument("--tf32", default="on,off", help="TF32 settings for the conv models: on,off")
    p.add_argument("--skip-compile", action="store_true", help="no torch.compile rows")
    p.add_argument(
        "--compile-modes",
        default="default,max-autotune-no-cudagraphs",
        help="which torch.compile modes: default, max-autotune-no-cudagraphs "
        "(aliases: compile, autotune)",
    )
    p.add_argument("--iters", type=int, default=None, help="max timed iterations (50; quick 5)")
    p.add_argument("--min-iters", type=int, default=None, help="min timed iterations (10; quick 3)")
    p.add_argument(
        "--target-s",
        type=float,
        default=None,
        help="aim for about this many seconds of timed iterations (1.0; quick 0.2)",
    )
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls (3; quick 1)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="wall-clock budget: compile rows that would start past it are skipped, "
        "and compiles are interrupted past it (default 250 on CUDA, 150 on CPU; "
        "0 = none)",
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
        help="torch.set_num_threads on CPU (default: 1 with --quick, else unchanged)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lib", default=None, help="path of libfused_ops.so (else fused_ops finds it)")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="output folder")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failures")
    a = p.parse_args(argv)
    a.quick_defaults = (
        dict(iters=5, min_iters=3, target_s=0.2, warmup=1)
        if a.quick
        else dict(iters=50, min_iters=10, target_s=1.0, warmup=3)
    )
    for k, v in a.quick_defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.modes = [
        m.strip().replace("+", "").replace("fwd_bwd", "fwdbwd")
        for m in a.modes.split(",")
        if m.strip()
    ]
    for m in a.modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r} (fwd, fwdbwd)")
    a.tf32 = [t.strip() for t in a.tf32.split(",") if t.strip()]
    for t in a.tf32:
        if t not in ("on", "off"):
            p.error(f"unknown tf32 setting {t!r} (on, off)")
    cm = []
    for c in a.compile_modes.split(","):
        c = c.strip()
        if not c:
            continue
        impl = {
            "default": "compile",
            "compile": "compile",
            "max-autotune-no-cudagraphs": "autotune",
            "autotune": "autotune",
            "max-autotune": "autotune",
        }.get(c)
        if impl is None:
            p.error(f"unknown compile mode {c!r}")
        cm.append(impl)
    a.compile_impls = [] if a.skip_compile else cm
    names = [
        "relu_group_norm",
        "group_norm_mean",
        "conv_transpose3d_relu_group_norm",
        "conv3d_group_norm_mean",
    ]
    if a.only == "all":
        a.only = names
    else:
        sel = []
        for s in a.only.split(","):
            s = s.strip()
            s = WORKLOAD_ALIASES.get(s, s)
            if s not in names:
                p.error(f"unknown workload {s!r}; choose from {names} or {list(WORKLOAD_ALIASES)}")
            sel.append(s)
        a.only = [n for n in names if n in sel]
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
    elif a.threads or a.quick:
        torch.set_num_threads(a.threads or 1)
    if a.budget_s is None:
        a.budget_s = 250.0 if device.type == "cuda" else 150.0
    if a.hard_limit_s is None:
        a.hard_limit_s = a.budget_s + 50 if a.budget_s > 0 else 0.0
    warnings.filterwarnings("ignore", message=".*TF32.*")
    warnings.filterwarnings("ignore", message=".*allow_tf32.*")
    warnings.filterwarnings("ignore", message=".*TensorFloat32.*")
    os.makedirs(a.out, exist_ok=True)
    tf32_defaults = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)

    fused_info, ref_classes, fused_classes = load_fused(a.lib)
    env = environment(device)
    log(
        f"device: {env['device_name']} | torch {env['torch']} | cuda {env['cuda']} | "
        f"cudnn {env['cudnn']} | fused_ops: {fused_info['source']} ({fused_info['library']})"
    )
    log(
        f"workloads {a.only} | modes {a.modes} | tf32 {a.tf32} | compile {a.compile_impls} | "
        f"budget {a.budget_s:.0f}s | quick={a.quick}"
    )

    t0 = time.perf_counter()
    ceilings = measure_ceilings(device, a.quick)
    set_tf32(tf32_defaults[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = tf32_defaults[1]
    log(
        "ceilings: "
        + ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in ceilings.items()
        )
    )

    workloads = make_workloads(a.quick, ref_classes, fused_classes)
    runner = Runner(a, device, workloads, ceilings)
    runner.t_start = t0
    finished = threading.Event()
    reported = threading.Lock()

    def watchdog():
        # Hard stop: if the run is still going well past the budget (a compile that ignores
        # the alarm), report what was measured and leave, so the caller's time limit holds.
        if finished.wait(a.hard_limit_s - (time.perf_counter() - t0)):
            return
        if reported.acquire(blocking=False):
            try:
                report(
                    a,
                    env,
                    fused_info,
                    ceilings,
                    workloads,
                    runner.results,
                    t0,
                    note=f"partial: hard limit of {a.hard_limit_s:.0f}s reached",
                )
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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32_defaults
    if reported.acquire(blocking=False):
        report(a, env, fused_info, ceilings, workloads, runner.results, t0)


def report(a, env, fused_info, ceilings, workloads, results, t0, note=None):
    """Writes results.json / results.png / results.txt under a.out and prints the tables."""
    results = dict(results)
    tg = targets(results)
    args_json = {k: v for k, v in vars(a).items()}
    doc = dict(
        env=env,
        fused_ops=fused_info,
        args=args_json,
        ceilings=ceilings,
        byte_counts={
            "relu_group_norm": {
                "fwd": "3 x numel x 4 (x read twice, y written)",
                "fwdbwd": "8 x numel x 4 (fwd 3; bwd: x and dy read twice, dx written)",
            },
            "group_norm_mean": {
                "fwd": "1 x numel x 4 (x read once)",
                "fwdbwd": "3 x numel x 4 (fwd 1; bwd: x read once, dx written)",
            },
        },
        flop_counts={
            "conv_transpose3d_relu_group_norm": "fwd 2*N*Cin*Cout*k^3*Din*Hin*Win; fwdbwd 3x",
            "conv3d_group_norm_mean": "fwd 2*N*Cout*Cin*k^3*Dout*Hout*Wout; fwdbwd 3x",
        },
        workloads={
            n: dict(
                kind=s["kind"],
                input_shape=list(s["input_shape"]),
                bytes=s["bytes"],
                flops=s["flops"],
            )
            for n, s in workloads.items()
            if n in a.only
        },
        rows=list(results.values()),
        targets=tg,
        wall_s=time.perf_counter() - t0,
        note=note,
    )
    json_path = os.path.join(a.out, "results.json")
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1, default=str)

    png_path = os.path.join(a.out, "results.png")
    png_note = None
    if not a.no_plot:
        try:
            sys.path.insert(0, HERE)
            from plot import make_chart  # noqa: E402

            make_chart(doc, png_path)
        except ImportError as e:
            png_note = f"no PNG ({e}); later: python3 benchmarks/plot.py {json_path} out.png"
        except Exception as e:  # noqa: BLE001
            png_note = f"PNG failed: {type(e).__name__}: {e}"
    else:
        png_note = "no PNG (--no-plot)"

    det = detail_table(results)
    summ = summary_table(results)
    tgt = format_targets(tg)
    c = ceilings
    ceil_line = (
        f"ceilings: copy {c.get('copy_GBps', float('nan')):.0f} GB/s (read+write) | "
        f"matmul {c.get('matmul_size', '?')}^3 TF32 {c.get('matmul_tf32_TFLOPs', float('nan')):.4g}"
        f" TFLOP/s, fp32 {c.get('matmul_fp32_TFLOPs', float('nan')):.4g} TFLOP/s"
    )
    head = (
        f"{env['device_name']} | torch {env['torch']} | cuda {env['cuda']} | cudnn {env['cudnn']}"
        f" | {env['date']} | wall {doc['wall_s']:.0f}s"
    )
    text = "\n".join(
        [
            "",
            "=" * 20 + " details (errors: forward output vs float64 reference) " + "=" * 20,
            det,
            "",
            "=" * 20 + " summary (median ms; speedup = other / fused) " + "=" * 20,
            head,
            ceil_line,
            summ,
            "",
            "targets:",
            tgt,
        ]
        + ([f"NOTE: {note}"] if note else [])
        + [""]
    )
    with open(os.path.join(a.out, "results.txt"), "w") as f:
        f.write(text)
    log(
        f"\nwrote {json_path}"
        + ("" if png_note else f", {png_path}")
        + f", {os.path.join(a.out, 'results.txt')}"
    )
    if png_note:
        log(png_note)
    log(text)


if __name__ == "__main__":
    main()
