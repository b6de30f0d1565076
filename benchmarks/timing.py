"""Timing of the fused-ops benchmark (benchmarks/bench.py), and its ceilings.

Holds: ``time_fn`` (warm-up, then per-call CUDA events on the GPU or ``perf_counter`` on the
CPU, rotating over enough distinct inputs to cover more than 2x the last-level cache;
median / p10 / p90), ``time_interleaved`` and ``CpuContention`` (CPU: implementations timed
in alternating batches, a batch during which other processes ran timed again),
``measure_ceilings`` (copy bandwidth and matmul throughput measured in
the same run), the torch.compile timeout (``alarm``), TF32 switching, and ``Runner``, which
measures every (case, TF32 setting, implementation, mode) row: eager and fused first, then
the torch.compile tasks within the time budget. A case is one workload at one size and, in
the CPU sweep, one thread count. ``require_cuda`` is the clean exit of the GPU-only scripts,
``back_to_back_ms`` their timing of calls issued back to back.
"""

from __future__ import annotations

import copy
import gc
import math
import os
import signal
import sys
import time
import traceback
import warnings

import torch
import torch._dynamo
from workloads import COMPILE_MODE, IMPL_LABEL, Built, fused_call, numel, shape_label


def log(msg):
    print(msg, flush=True)


def require_cuda(script):
    """Exits with status 2 and one line on stderr where there is no CUDA GPU."""
    if not torch.cuda.is_available():
        print(f"{script}: needs a CUDA GPU (none is available here)", file=sys.stderr)
        sys.exit(2)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def back_to_back_ms(fn, calls):
    """ms per call of `calls` calls of fn() issued back to back between two CUDA events (the
    host's launches overlapping the GPU's work, as in a model's steps); the caller warms up."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


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


class CpuContention:
    """CPU time that other processes take while a CPU timing runs (Linux: /proc/stat's busy
    time of the whole machine minus this process's, in clock ticks of 10 ms), and waiting for
    a quiet machine. On a small machine shared with other work (2 cores), a batch of calls
    during which another process ran is slower by more than the difference being measured;
    time_interleaved times such a batch again after the machine has been quiet for a moment.
    Elsewhere (no /proc) it measures nothing and never waits."""

    TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)

    def __init__(self, max_wait_s=150.0):
        self.ok = os.path.exists("/proc/stat") and os.path.exists("/proc/self/stat")
        # In all, over the run: waiting, and the batches timed again (then batches are kept).
        self.max_wait_s = max_wait_s
        self.waited_s = 0.0

    def snapshot(self):
        """(machine busy ticks, this process's ticks)."""
        if not self.ok:
            return (0, 0)
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]  # user nice system irq softirq steal
        with open("/proc/self/stat") as f:
            text = f.read()
        own = text[text.rindex(")") + 2 :].split()
        return (busy, int(own[11]) + int(own[12]))  # utime + stime, all threads

    def other_s(self, since):
        """Seconds of CPU that other processes (and the hypervisor: steal) took since."""
        now = self.snapshot()
        return max(0, (now[0] - since[0]) - (now[1] - since[1])) * self.TICK_S

    def allowed_s(self, wall_s):
        """What other processes may take during a batch of wall_s seconds: 2 ticks plus 2%
        of one core (kernel threads and the like)."""
        return 2 * self.TICK_S + 0.02 * wall_s

    def wait_quiet(self, window_s=0.1, max_s=5.0):
        """Sleeps until a window of window_s passes with at most one tick of other work, for
        at most max_s (and the run's max_wait_s in all)."""
        if not self.ok:
            return
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < max_s and self.waited_s < self.max_wait_s:
            snap = self.snapshot()
            time.sleep(window_s)
            self.waited_s += window_s
            if self.other_s(snap) <= self.TICK_S:
                break


def time_interleaved(fns, inputs, iters, warmup, target_s, min_iters, rounds, contention):
    """CPU: times several functions of the same inputs (name -> fn(x)) in alternating batches,
    `rounds` of them each (orders A B, B A, ...), so that the machine's slow drifts and the
    allocator's state fall on all of them alike; a batch during which other processes took
    CPU (CpuContention) is timed again once the machine is quiet, up to 3 times (then kept and
    counted as contended). Returns name -> time_fn's statistics plus rounds, retried_batches,
    contended_batches, other_cpu_pct (other processes' CPU during the kept batches, % of
    one core) and batch_ms (the median of each round's batch, in round order: batches of one
    round ran back to back, so their ratios are free of the machine's slower drifts;
    paired_ratio)."""
    names = list(fns)
    nin = len(inputs)
    counts = {}
    for name in names:
        fn = fns[name]
        for i in range(warmup):
            fn(inputs[i % nin])
        t0 = time.perf_counter()
        for i in range(2):
            fn(inputs[i % nin])
        est = (time.perf_counter() - t0) / 2
        counts[name] = int(max(min_iters, min(iters, target_s / max(est, 1e-6))))
    rounds = max(1, min(rounds, min(counts.values())))
    times = {name: [] for name in names}
    batch_ms = {name: [] for name in names}
    stats = {name: dict(retried=0, contended=0, other_s=0.0, wall_s=0.0) for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            fn, st = fns[name], stats[name]
            start = len(times[name])
            n = counts[name] * (r + 1) // rounds - counts[name] * r // rounds
            for attempt in range(4):
                batch = []
                snap = contention.snapshot()
                t_batch = time.perf_counter()
                for i in range(start, start + n):
                    t = time.perf_counter()
                    fn(inputs[i % nin])
                    batch.append((time.perf_counter() - t) * 1e3)
                wall = time.perf_counter() - t_batch
                other = contention.other_s(snap)
                if (
                    other <= contention.allowed_s(wall)
                    or attempt == 3
                    or contention.waited_s >= contention.max_wait_s
                ):
                    break
                st["retried"] += 1
                contention.waited_s += wall  # the batch thrown away counts as waiting
                contention.wait_quiet()
            st["contended"] += int(other > contention.allowed_s(wall))
            st["other_s"] += other
            st["wall_s"] += wall
            times[name] += batch
            batch_ms[name].append(quantile(sorted(batch), 0.5))
    out = {}
    for name in names:
        st, ts = stats[name], sorted(times[name])
        out[name] = dict(
            median_ms=quantile(ts, 0.5),
            p10_ms=quantile(ts, 0.1),
            p90_ms=quantile(ts, 0.9),
            mean_ms=sum(ts) / len(ts),
            min_ms=ts[0],
            n_iters=len(ts),
            n_inputs=nin,
            rounds=rounds,
            retried_batches=st["retried"],
            contended_batches=st["contended"],
            other_cpu_pct=100 * st["other_s"] / max(st["wall_s"], 1e-9),
            batch_ms=batch_ms[name],
        )
    return out


def paired_ratio(num, den):
    """num / den for two functions timed together by time_interleaved (their entries),
    from the rounds' pairs of adjacent batches: (median, p10, p90) over the rounds of
    num batch median / den batch median. Where the run-to-run spread of a function (a
    convolution's, on a shared machine) is larger than the difference being measured, this
    compares each batch with its neighbour rather than pooling all of them."""
    ratios = sorted(a / b for a, b in zip(num["batch_ms"], den["batch_ms"]) if b > 0)
    if not ratios:
        return None
    return quantile(ratios, 0.5), quantile(ratios, 0.1), quantile(ratios, 0.9)


def cache_bytes(device):
    """L2 size on the GPU; on the CPU the largest cache sysfs lists for cpu0 (32 MiB if none)."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
    sizes = []
    folder = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in os.listdir(folder):
            with open(os.path.join(folder, index, "size")) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KMG")) * scale)
    except (OSError, ValueError):
        pass
    return max(sizes) if sizes else 32 << 20


def free_bytes(device):
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 4 << 30


def n_inputs_for(device, in_bytes):
    """Distinct inputs to rotate over: > 2x the cache, at most 15% of free memory, 2..64."""
    n = max(2, math.ceil(2 * cache_bytes(device) / in_bytes))
    cap = max(2, int(0.15 * free_bytes(device) // in_bytes))
    return int(min(n, cap, 64))


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
    restore_tf32((flag, flag))


def tf32_flags():
    """(cudnn.allow_tf32, cuda.matmul.allow_tf32) now, for restore_tf32."""
    return torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32


def restore_tf32(flags):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags


def free(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# Ceilings


def ceiling_sizes(device, quick):
    """(float32 elements of the copy, matmul size): 64 MiB / 1024 with --quick, else 1 GiB
    and 8192 on the GPU, 2048 on the CPU (an 8192^3 matmul takes many seconds there)."""
    if quick:
        return 16 << 20, 1024
    return 256 << 20, (8192 if device.type == "cuda" else 2048)


def _time_ceiling(fn, inputs, device, **kw):
    """time_fn, or on the CPU time_interleaved of the one function (batches during which other
    processes ran timed again)."""
    if device.type != "cpu":
        return time_fn(fn, inputs, device, **kw)
    return time_interleaved({"fn": fn}, inputs, rounds=5, contention=CpuContention(30.0), **kw)[
        "fn"
    ]


def measure_ceilings(device, copy_elems, matmul_size):
    """Copy bandwidth (bytes read + written of copy_) and matmul TFLOP/s, TF32 on and off.
    Leaves the TF32 flags off: the caller restores them."""
    res = {}
    try:
        nelem = copy_elems
        if device.type == "cuda":
            free_b, _ = torch.cuda.mem_get_info(device)
            while 2 * nelem * 4 > free_b // 3:
                nelem //= 2
        src = torch.randn(nelem, device=device)
        dst = torch.empty_like(src)
        t = _time_ceiling(
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
    size = matmul_size
    try:
        a = torch.randn(size, size, device=device)
        b = torch.randn(size, size, device=device)
        res["matmul_size"] = size
        for label, flag in (("tf32", True), ("fp32", False)):
            set_tf32(flag)
            t = _time_ceiling(
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
# Measurement of one (case, tf32, implementation) over the selected modes


def errors_vs(out, ref):
    out = out.detach().to(torch.float64)
    ref = ref.to(out.device)
    diff = out - ref
    return dict(
        max_abs_err=float(diff.abs().max()),
        rel_l2_err=float(diff.norm() / ref.norm().clamp_min(1e-300)),
    )


def call_fn(module, mode, grad_out):
    """fn(x) of one timed call: module(x) under no_grad (fwd), or module(x) and the gradients
    of sum(out * grad_out) w.r.t. x and every parameter (fwdbwd; x must require grad)."""
    params = list(module.parameters())
    if mode == "fwd":

        def fn(x):
            with torch.no_grad():
                return module(x)

    else:

        def fn(x):
            out = module(x)
            return torch.autograd.grad(out, [x] + params, grad_outputs=grad_out)

    return fn


def error_entry(e, entry, verbose):
    """The entry of a row whose measurement raised e (keeping its path fields)."""
    msg = str(e).strip().splitlines()
    if verbose:
        traceback.print_exc()
    return {
        "status": "error",
        "error": f"{type(e).__name__}: {msg[0] if msg else ''}"[:500],
        **{k: v for k, v in entry.items() if k in ("path", "path_error")},
    }


class Case:
    """One workload at one size; in the CPU sweep also one thread count (threads=None: the
    process's setting). `key` names its rows: the workload's name at the headline sizes."""

    def __init__(self, workload, spec, threads=None, sweep=False):
        self.workload, self.spec, self.threads, self.sweep = workload, spec, threads, sweep
        self.shape = shape_label(spec["input_shape"])
        self.build_key = (workload, self.shape, repr(spec["init"]))
        self.key = f"{workload} {self.shape} t{threads}" if sweep else workload

    def row_fields(self):
        """What a row of this case says besides workload/mode/tf32/impl."""
        if not self.sweep:
            return {}
        fields = dict(case=self.key, shape=list(self.spec["input_shape"]), threads=self.threads)
        if self.spec["init"]:
            fields["init"] = self.spec["init"]
        return fields


class Runner:
    """Measures the rows of `cases` into `results`: (case key, mode, tf32, impl) -> dict.

    ceilings: threads -> the ceilings measured with that many threads (key None: the
    process's setting), for the %-of-ceiling of each row.
    """

    def __init__(self, args, device, cases, ceilings):
        self.args, self.device, self.cases, self.ceilings = args, device, cases, ceilings
        self.results = {}
        self.refs = {}  # build key -> (k, float64 reference output of inputs[0][:k])
        self.t_start = time.perf_counter()
        self.compile_seen = {}  # (compile impl, workload kind) -> longest task seconds so far
        self.contention = CpuContention()

    def elapsed(self):
        return time.perf_counter() - self.t_start

    def build(self, case):
        spec = case.spec
        n = n_inputs_for(self.device, numel(spec["input_shape"]) * 4)
        return Built(case.workload, spec, self.device, n, seed=self.args.seed)

    def enter(self, case):
        """Thread count of the case (CPU sweep)."""
        if case.threads:
            torch.set_num_threads(case.threads)

    def reference(self, case, b):
        if case.build_key not in self.refs:
            spec, x0 = b.spec, b.inputs[0]
            k = x0.shape[0]
            # The whole batch where the float64 copy is small and cheap, else the first samples.
            if x0.numel() * 8 > (512 << 20) or (spec["flops"] and spec["flops"]["fwd"] > 20e9):
                k = min(self.args.err_batch, k)
            ref64 = copy.deepcopy(b.ref).to(torch.float64)
            with torch.no_grad():
                self.refs[case.build_key] = (k, ref64(b.inputs[0][:k].to(torch.float64)))
            del ref64
        return self.refs[case.build_key]

    def record(self, case, mode, tf32, impl, entry):
        spec = case.spec
        entry.update(workload=case.workload, mode=mode, tf32=tf32, impl=impl)
        entry.update(case.row_fields())
        ceilings = self.ceilings.get(case.threads, {})
        if entry.get("median_ms"):
            ms = entry["median_ms"]
            if spec["bytes"]:
                gbps = spec["bytes"][mode] / (ms * 1e-3) / 1e9
                entry["bytes"] = spec["bytes"][mode]
                entry["GBps"] = gbps
                if ceilings.get("copy_GBps"):
                    entry["pct_copy_bw"] = 100 * gbps / ceilings["copy_GBps"]
            if spec["flops"]:
                tfl = spec["flops"][mode] / (ms * 1e-3) / 1e12
                entry["flops"] = spec["flops"][mode]
                entry["TFLOPs"] = tfl
                ceil = ceilings.get("matmul_tf32_TFLOPs" if tf32 == "on" else "matmul_fp32_TFLOPs")
                if ceil:
                    entry["pct_matmul"] = 100 * tfl / ceil
        self.results[(case.key, mode, tf32, impl)] = entry
        status = entry.get("status")
        head = f"  [{self.elapsed():6.1f}s] {case.key:34s} {mode:6s} tf32={tf32:3s} {impl:8s}"
        if status != "ok":
            log(f"{head} {status}: {entry.get('error', '')[:300]}")
            return
        extra = ""
        if "rel_l2_err" in entry:
            extra = f"  relL2={entry['rel_l2_err']:.2e} maxabs={entry['max_abs_err']:.2e}"
        if "compile_s" in entry:
            extra += f"  compile={entry['compile_s']:.1f}s"
        eager = self.results.get((case.key, mode, tf32, "eager"))
        if impl == "fused" and eager and eager.get("status") == "ok":
            extra += f"  eager/fused={eager['median_ms'] / entry['median_ms']:.2f}x"
            if "paired_eager_ratio" in entry:
                p10, p90 = entry["paired_eager_ratio_p10_p90"]
                extra += (
                    f" (paired {entry['paired_eager_ratio']:.2f}x, p10-p90 {p10:.2f}-{p90:.2f})"
                )
        if impl == "fused" and "pct_copy_bw" in entry:
            extra += f"  {entry['pct_copy_bw']:.0f}% of copy BW"
        if "path" in entry:
            extra += f"  path={entry['path']}"
        if entry.get("retried_batches") or entry.get("contended_batches"):
            extra += (
                f"  (other processes: {entry['retried_batches']} batches timed again,"
                f" {entry['contended_batches']} kept contended)"
            )
        log(
            f"{head} {entry['median_ms']:9.3f} ms (p10 {entry['p10_ms']:.3f}, "
            f"p90 {entry['p90_ms']:.3f}, n={entry['n_iters']}x{entry['n_inputs']} inputs){extra}"
        )

    def record_all(self, case, tf32_list, impls, status, error):
        """The same non-ok entry for each (tf32, mode, impl) not measured yet."""
        for tf32 in tf32_list:
            for mode in self.args.modes:
                for impl in impls:
                    if (case.key, mode, tf32, impl) not in self.results:
                        self.record(case, mode, tf32, impl, dict(status=status, error=error))

    def run_impl(self, case, b, tf32_list, impl, compile_timeout=0):
        """Measure impl of a case for each TF32 setting and mode. Returns seconds spent.

        torch.compile impls compile once per call (after torch._dynamo.reset()); a later TF32
        setting re-uses the compiled module (dynamo recompiles if its guards ask for it): pass
        one setting per call where the generated code bakes TF32 in (max-autotune templates).
        """
        t_task = time.perf_counter()
        a, dev = self.args, self.device
        if impl == "fused":
            if b.fused is None:
                self.record_all(case, tf32_list, [impl], "error", f"fused module: {b.fused_error}")
                return time.perf_counter() - t_task
            module = b.fused
        elif impl == "eager":
            module = b.ref
        else:
            torch._dynamo.reset()
            module = torch.compile(b.ref, mode=COMPILE_MODE[impl])
        params = [p for p in module.parameters()]
        k, ref_out = self.reference(case, b)
        timed_out = False
        for tf32 in tf32_list:
            if tf32 != "n/a":
                set_tf32(tf32 == "on")
            err_done = False
            for mode in a.modes:
                if timed_out:
                    self.record(
                        case,
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
                        # What is allocated now (the rotated inputs, every model's parameters)
                        # is the same for every impl; the peak above it is the row's own.
                        base_bytes = torch.cuda.memory_allocated(dev)
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

                    if impl == "fused":
                        entry.update(self.path(module, b.inputs[0], mode))
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
                        peak = torch.cuda.max_memory_allocated(dev)
                        entry["peak_mem_GB"] = peak / 1e9
                        entry["peak_extra_MiB"] = (peak - base_bytes) / 2**20
                except Exception as e:  # noqa: BLE001  (compile failures, OOM, missing kernels)
                    msg = str(e).strip().splitlines()
                    entry = {
                        "status": "error",
                        "error": f"{type(e).__name__}: {msg[0] if msg else ''}"[:500],
                        **{k: v for k, v in entry.items() if k in ("path", "path_error")},
                    }
                    if a.verbose:
                        traceback.print_exc()
                    timed_out = isinstance(e, CompileTimeout)
                    free(dev)
                finally:
                    for x in b.inputs:
                        x.requires_grad_(False)
                self.record(case, mode, tf32, impl, entry)
        if impl in COMPILE_MODE:
            del module
            torch._dynamo.reset()
        free(dev)
        return time.perf_counter() - t_task

    def run_pair(self, case, b, tf32_list):
        """CPU: eager and fused of a case, each mode timed by time_interleaved (alternating
        batches; batches during which other processes ran are timed again). Records the same
        entries as run_impl, plus time_interleaved's counts."""
        a = self.args
        modules = {"eager": b.ref}
        if b.fused is None:
            self.record_all(case, tf32_list, ["fused"], "error", f"fused module: {b.fused_error}")
        else:
            modules["fused"] = b.fused
        k, ref_out = self.reference(case, b)
        for tf32 in tf32_list:
            if tf32 != "n/a":
                set_tf32(tf32 == "on")
            for mode_index, mode in enumerate(a.modes):
                for x in b.inputs:
                    x.requires_grad_(mode != "fwd")
                fns, entries = {}, {}
                for impl, module in modules.items():
                    entry = {"status": "ok"}
                    try:
                        fn = call_fn(module, mode, b.grad_out)
                        if impl == "fused":
                            entry.update(self.path(module, b.inputs[0], mode))
                        if mode_index == 0:  # errors once per implementation, as run_impl
                            with torch.set_grad_enabled(mode != "fwd"):
                                out = module(b.inputs[0]).detach()
                            entry.update(errors_vs(out[:k], ref_out))
                            entry["err_samples"] = k
                            del out
                        fns[impl] = fn
                    except Exception as e:  # noqa: BLE001
                        entry = error_entry(e, entry, a.verbose)
                    entries[impl] = entry

                def timed_together(group):
                    return time_interleaved(
                        group,
                        b.inputs,
                        a.iters,
                        a.warmup,
                        a.target_s,
                        a.min_iters,
                        a.rounds,
                        self.contention,
                    )

                together = True
                try:
                    timed = timed_together(fns)
                except Exception:  # noqa: BLE001  (one implementation failing: each alone)
                    together = False
                    timed = {}
                    for impl, fn in fns.items():
                        try:
                            timed[impl] = timed_together({impl: fn})[impl]
                        except Exception as e:  # noqa: BLE001
                            entries[impl] = error_entry(e, entries[impl], a.verbose)
                for impl in modules:
                    if impl in timed:
                        entries[impl].update(timed[impl])
                if together and "eager" in timed and "fused" in timed:
                    paired = paired_ratio(timed["eager"], timed["fused"])
                    if paired:
                        entries["fused"]["paired_eager_ratio"] = paired[0]
                        entries["fused"]["paired_eager_ratio_p10_p90"] = list(paired[1:])
                for impl in modules:
                    self.record(case, mode, tf32, impl, entries[impl])
                for x in b.inputs:
                    x.requires_grad_(False)
        free(self.device)

    def path(self, module, x, mode):
        """{"path": the kernels fused_ops.dispatch_path names} for module(x), queried under
        the flags and grad mode the timing runs with, and for a training step of the
        ConvTranspose3d model those of its backward too (fused_ops.backward_path, after
        " | backward: "); {"path_error": ...} if a query fails."""
        import fused_ops

        op, args = fused_call(module, x)
        try:
            with torch.set_grad_enabled(mode != "fwd"):
                path = str(fused_ops.dispatch_path(op, *args))
                if mode != "fwd" and op == "conv_transpose3d_relu_group_norm":
                    path += " | backward: " + str(fused_ops.backward_path(op, *args))
                return {"path": path}
        except Exception as e:  # noqa: BLE001  (a library without the path queries)
            return {"path_error": f"{type(e).__name__}: {str(e).strip()[:200]}"}

    def tf32_settings(self, case):
        # The CPU sweep leaves the flags alone: they change nothing there.
        if case.spec["kind"] != "model" or case.sweep:
            return ["n/a"]
        return self.args.tf32

    def run(self):
        a = self.args
        # Phase 1: eager and fused (cheap, always complete). Consecutive cases of one
        # workload and size (the sweep's thread counts) share the built modules and inputs.
        built, built_key = None, None
        for case in self.cases:
            tf32_list = self.tf32_settings(case)
            log(f"== {case.key}: eager + fused")
            self.enter(case)
            if built_key != case.build_key:
                built, built_key = None, None
                free(self.device)
                try:
                    built, built_key = self.build(case), case.build_key
                except Exception as e:  # noqa: BLE001
                    log(f"  build failed: {type(e).__name__}: {e}")
                    self.record_all(case, tf32_list, ["eager", "fused"], "error", f"build: {e}")
                    continue
            if self.device.type == "cpu":
                self.run_pair(case, built, tf32_list)
            else:
                for impl in ("eager", "fused"):
                    self.run_impl(case, built, tf32_list, impl)
        del built
        free(self.device)
        # Phase 2: torch.compile, in priority order, within the time budget.
        if not a.compile_impls:
            return
        norm = [c for c in self.cases if c.spec["kind"] == "norm"]
        models = [c for c in self.cases if c.spec["kind"] == "model"]
        tasks = []  # (case, tf32 settings, impl), in priority order
        if "compile" in a.compile_impls:
            # Default mode calls aten (cuDNN/cuBLAS) for the convolutions, which read the TF32
            # flags at run time: one compile serves both settings.
            tasks += [(c, ["n/a"], "compile") for c in norm]
            tasks += [(c, list(self.tf32_settings(c)), "compile") for c in models]
        if "autotune" in a.compile_impls:
            # max-autotune may pick Triton templates with TF32 baked in: one compile each.
            for setting in ("on", "n/a", "off"):
                for c in models + norm:
                    if setting in self.tf32_settings(c):
                        tasks.append((c, [setting], "autotune"))
        default_est = {"compile": 30.0, "autotune": 60.0}
        for case, tf32_list, impl in tasks:
            kind = case.spec["kind"]
            # Estimated task time: seen for this (impl, kind), else the longest seen for this
            # impl, else a guess.
            seen_impl = [v for (i, _k), v in self.compile_seen.items() if i == impl]
            est = self.compile_seen.get(
                (impl, kind), max(seen_impl) if seen_impl else default_est[impl]
            )
            if a.budget_s > 0 and self.elapsed() + est > a.budget_s:
                error = f"budget: {self.elapsed():.0f}s done + ~{est:.0f}s > {a.budget_s:.0f}s"
                self.record_all(case, tf32_list, [impl], "skipped", error)
                continue
            log(f"== {case.key}: {IMPL_LABEL[impl]} tf32={','.join(tf32_list)}")
            timeout = a.compile_timeout_s
            if a.budget_s > 0:
                left = a.budget_s - self.elapsed() + 15
                timeout = min(timeout, left) if timeout > 0 else left
            try:
                self.enter(case)
                b = self.build(case)
                spent = self.run_impl(case, b, tf32_list, impl, compile_timeout=timeout)
                self.compile_seen[(impl, kind)] = max(
                    self.compile_seen.get((impl, kind), 0.0), spent
                )
                del b
            except Exception as e:  # noqa: BLE001
                self.record_all(case, tf32_list, [impl], "error", f"{type(e).__name__}: {e}")
            free(self.device)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(
        description=__doc__ + "\nRun as a script: measures and prints the ceilings.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="64 MiB copy, 1024^3 matmul")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        require_cuda("timing.py")
    elif args.threads:
        torch.set_num_threads(args.threads)
    flags = tf32_flags()
    ceilings = measure_ceilings(device, *ceiling_sizes(device, args.quick))
    restore_tf32(flags)
    for key, value in ceilings.items():
        print(f"{key:20s} {value:.4g}" if isinstance(value, float) else f"{key:20s} {value}")


if __name__ == "__main__":
    main()
