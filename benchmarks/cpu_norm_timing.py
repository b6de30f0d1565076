"""CPU timing of the GroupNorm-family operators against eager PyTorch's composite.

Compares ``torch.ops.fused.relu_group_norm`` with ``F.group_norm(F.relu(x))`` and
``torch.ops.fused.group_norm_mean`` with ``F.group_norm(x).mean(dims)``, forward and
forward+backward, at 1 and 2 threads (``--threads``), GroupNorm with a random affine
(weight 1 + 0.5 * randn, bias 0.5 * randn). Each time is the best of ``--reps`` repetitions of
a loop of at least ``--min-ms`` milliseconds, fused and eager interleaved.

Also times a plain copy of a tensor of the input's size, into an existing tensor
(``dst.copy_(x)``), into a new one (``x.clone()``, which also pays for the allocation, as the
operators do for their outputs), and into a new one given transparent huge pages (Linux
``madvise(MADV_HUGEPAGE)``, as the CPU kernels do for their large outputs: the least a new
output of that size costs, page zeroing included), at the same thread count, and reports the
fused time as a fraction of copy bandwidth: (bytes the operator must move / fused time) /
(2 * input bytes / copy time). The bytes that must move: relu_group_norm forward reads x and
writes y (2 tensors of x's size); group_norm_mean forward reads x (1); backward adds dy, x read
and dx written for relu_group_norm (3), x read and dx written for group_norm_mean (2).

Usage: FUSED_OPS_LIBRARY=build-cpu/libfused_ops.so python3 benchmarks/cpu_norm_timing.py
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import importlib.util
import os
import sys
import time

import torch
import torch.nn.functional as F

if importlib.util.find_spec("fused_ops") is None:  # not installed: the source checkout's
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fused_ops  # noqa: E402, F401  (loads the library)

G = 8
EPS = 1e-5
SHAPES = [
    (2, 16, 8, 8, 8),  # tiny
    (32, 64, 4, 4),  # many short rows
    (2, 64, 18, 18, 18),
    (4, 64, 24, 24, 24),
    (8, 128, 16, 16, 16),
    (1, 16, 96, 96, 96),  # N * G = 8, 14 M elements
    (4, 64, 40, 40, 40),  # 16 M elements
    (1, 8, 128, 128, 128),  # N * G = 8, long rows, 16 M elements
]


def _huge_page_clone(x):
    """x.clone() into memory given transparent huge pages before the copy writes it (the
    aligned 2 MiB pages inside it), or a plain clone where madvise is not available."""
    out = torch.empty_like(x)
    bytes_ = out.numel() * out.element_size()
    if _LIBC is not None and bytes_ >= 2 << 20:
        huge = 2 << 20
        begin = (out.data_ptr() + huge - 1) // huge * huge
        end = (out.data_ptr() + bytes_) // huge * huge
        if end > begin:
            _LIBC.madvise(ctypes.c_void_p(begin), ctypes.c_size_t(end - begin), _MADV_HUGEPAGE)
    return out.copy_(x)


_MADV_HUGEPAGE = 14
try:
    _LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
except OSError:  # pragma: no cover
    _LIBC = None


def _timeit(fn, min_s):
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    iters = max(1, int(min_s / once))
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def best_of(fns, reps, min_s):
    """Best time (s) of each function, repetitions interleaved."""
    best = [float("inf")] * len(fns)
    for _ in range(reps):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], _timeit(fn, min_s))
    return best


def make_case(op, shape, backward, dtype):
    C = shape[1]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen).to(dtype)
    w = (1.0 + 0.5 * torch.randn(C, generator=gen)).to(dtype)
    b = (0.5 * torch.randn(C, generator=gen)).to(dtype)
    dims = list(range(1, len(shape)))
    if op == "relu_group_norm":

        def fused(x, w, b):
            return torch.ops.fused.relu_group_norm(x, G, w, b, EPS)

        def eager(x, w, b):
            return F.group_norm(F.relu(x), G, w, b, EPS)

        grad = torch.randn(shape, generator=gen).to(dtype)
    else:

        def fused(x, w, b):
            return torch.ops.fused.group_norm_mean(x, G, w, b, EPS)

        def eager(x, w, b):
            return F.group_norm(x, G, w, b, EPS).mean(dims)

        grad = torch.randn(shape[0], generator=gen).to(dtype)
    if not backward:

        def run(f):
            def go():
                with torch.no_grad():
                    f(x, w, b)

            return go

        return x, run(fused), run(eager)
    xs = [t.clone().requires_grad_(True) for t in (x, w, b)]

    def run_bw(f):
        def go():
            for t in xs:
                t.grad = None
            f(*xs).backward(grad)

        return go

    return x, run_bw(fused), run_bw(eager)


# Tensors (of the input's size) that each case must move, over the input's bytes.
MOVED = {
    ("relu_group_norm", False): 2,
    ("relu_group_norm", True): 5,
    ("group_norm_mean", False): 1,
    ("group_norm_mean", True): 3,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--min-ms", type=float, default=30.0)
    ap.add_argument("--ops", nargs="+", default=["relu_group_norm", "group_norm_mean"])
    ap.add_argument("--modes", nargs="+", default=["forward", "forward+backward"])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--shapes", nargs="*", help="e.g. 4x64x24x24x24 (default: a sweep)")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else SHAPES
    min_s = args.min_ms / 1e3
    print(
        "| threads | op | mode | shape | elements | fused ms | eager ms | ratio | copy_ ms "
        "| clone ms | huge-page clone ms | copy fraction (copy_) | copy fraction (clone) "
        "| copy fraction (huge-page clone) |\n"
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for threads in args.threads:
        torch.set_num_threads(threads)
        for op in args.ops:
            for mode in args.modes:
                backward = mode != "forward"
                for shape in shapes:
                    print(row(threads, op, backward, shape, dtype, args.reps, min_s), flush=True)


def row(threads, op, backward, shape, dtype, reps, min_s):
    """One line of the table."""
    x, fused, eager = make_case(op, shape, backward, dtype)
    dst = torch.empty_like(x)
    t_fused, t_eager, t_copy, t_clone, t_huge = best_of(
        [
            fused,
            eager,
            functools.partial(dst.copy_, x),
            x.clone,
            functools.partial(_huge_page_clone, x),
        ],
        reps,
        min_s,
    )
    # (moved * bytes / t_fused) / (2 * bytes / t_copy)
    moved = MOVED[(op, backward)]
    return (
        f"| {threads} | {op} | {'forward+backward' if backward else 'forward'} "
        f"| {'x'.join(map(str, shape))} | {x.numel() / 1e6:.2f} M | {t_fused * 1e3:.3f} "
        f"| {t_eager * 1e3:.3f} | {t_eager / t_fused:.2f}x | {t_copy * 1e3:.3f} "
        f"| {t_clone * 1e3:.3f} | {t_huge * 1e3:.3f} | {moved * t_copy / (2 * t_fused):.2f} "
        f"| {moved * t_clone / (2 * t_fused):.2f} | {moved * t_huge / (2 * t_fused):.2f} |"
    )


if __name__ == "__main__":
    main()
