"""Accuracy of the drop-in modules against the modules they replace, measured against float64.

For each drop-in, shape, dtype, TF32 mode (PyTorch's default, TF32 allowed, and TF32 off)
and input distribution (torch.rand, what users pass, and torch.randn), it runs the original
module (eager PyTorch), the fused drop-in and the original in float64 (on the same rounded
input and parameters, random GroupNorm affine and conv bias), and prints:

* the relative L2 error against float64 of eager and of fused, and their ratio (the numerics
  contract: fused <= 2x eager);
* for float32, whether the drop-in passes ``allclose(fused, eager, atol=rtol=1e-5)`` and the
  largest difference;
* with ``--grad``, the same for the input gradient and every parameter gradient (float32).

    python3 benchmarks/numerics.py                 # small sizes, CPU and (if present) CUDA
    python3 benchmarks/numerics.py --headline      # the headline sizes too (GPU)
    python3 benchmarks/numerics.py --device cuda --grad --json out.json
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, List

import torch
from report import write_json
from workloads import c3_init, ct_init, load_fused

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

CT, C3 = "ConvTranspose3dReLUGroupNorm", "Conv3dGroupNormMean"
# (original class name, init arguments, input shape) of the small cases; all_cases adds
# fused_ops.reference.WORKLOADS' (the headline ones).
SMALL_CASES = [
    (CT, ct_init(8, 16, groups=4), (2, 8, 6, 7, 5)),
    (CT, ct_init(6, 12, groups=3, kernel_size=2, bias=True), (1, 6, 5, 3, 7)),
    (CT, ct_init(32, 64), (2, 32, 8, 8, 8)),
    (CT, ct_init(64, 128), (1, 64, 12, 12, 12)),
    (C3, c3_init(3, 24), (4, 3, 8, 9, 10)),
    (C3, c3_init(3, 24), (16, 3, 24, 32, 32)),
    (C3, c3_init(16, 32), (4, 16, 10, 10, 10)),
    (C3, c3_init(64, 64), (2, 64, 10, 10, 10)),
]


def all_cases(reference):
    """(name, init, shape, headline?) of every case."""
    cases = [(name, init, shape, False) for name, init, shape in SMALL_CASES]
    for w in reference.WORKLOADS.values():
        cases.append((w["model"].__name__, dict(w["init"]), tuple(w["input_shape"]), True))
    return cases


def run_case(cls_name, init, shape, dtype, tf32, dist, device, grad) -> List[Dict]:
    import fused_ops  # loaded by main (load_fused)
    from fused_ops import reference, testing

    Original = getattr(reference, cls_name)
    Fused = getattr(fused_ops, cls_name)
    torch.manual_seed(0)
    original = testing.randomise_(Original(**init)).to(device=device, dtype=dtype)
    fused = Fused(**init).to(device=device, dtype=dtype)
    fused.load_state_dict(original.state_dict())
    x = (torch.rand if dist == "rand" else torch.randn)(shape, device=device).to(dtype)
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        report = testing.compare_with_original(original, fused, x, grad=grad)
    finally:
        torch.backends.cudnn.allow_tf32 = previous
    rows = []
    for what, e in report.items():
        row = dict(
            model=cls_name,
            shape=list(shape),
            dtype=str(dtype).replace("torch.", ""),
            tf32=tf32,
            input=dist,
            device=device,
            what=what,
            eager_err=e.eager_error,
            fused_err=e.fused_error,
            ratio=e.ratio,
        )
        if dtype == torch.float32:
            row["allclose_1e-5"] = e.allclose_1e5
            row["max_abs_diff"] = e.max_abs_diff
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--headline", action="store_true", help="include the headline sizes")
    parser.add_argument("--only-headline", action="store_true")
    parser.add_argument("--grad", action="store_true", help="gradients too (float32)")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--json", help="write every row to this file")
    parser.add_argument(
        "--lib", default=None, help="path of libfused_ops.so (else fused_ops finds it)"
    )
    args = parser.parse_args()
    _, fused_ops = load_fused(args.lib)
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if "cuda" in devices and not torch.cuda.is_available():
        if args.device == "cuda":
            print("numerics.py: --device cuda needs a CUDA GPU", file=sys.stderr)
            return 2
        devices.remove("cuda")
    rows = []
    for device in devices:
        for cls_name, init, shape, headline in all_cases(fused_ops.reference):
            if (
                (headline and not (args.headline or args.only_headline))
                or (args.only_headline and not headline)
                or (headline and device == "cpu")
            ):
                continue
            for dtype_name in args.dtypes.split(","):
                dtype = DTYPES[dtype_name]
                if device == "cpu" and dtype != torch.float32:
                    continue
                for tf32 in (
                    [True, False] if device == "cuda" and dtype == torch.float32 else [True]
                ):
                    for dist in ("rand", "randn"):
                        rows += run_case(
                            cls_name,
                            init,
                            shape,
                            dtype,
                            tf32,
                            dist,
                            device,
                            args.grad and dtype == torch.float32,
                        )
    header = (
        f"{'model':<29} {'shape':<22} {'dev':<4} {'dtype':<8} {'tf32':<5} {'input':<5} "
        f"{'what':<26} {'eager err':>9} {'fused err':>9} {'ratio':>6}  allclose  max|diff|"
    )
    print(header)
    worst = 0.0
    for r in rows:
        extra = (
            f"  {str(r['allclose_1e-5']):<8}  {r['max_abs_diff']:.2e}"
            if "allclose_1e-5" in r
            else ""
        )
        print(
            f"{r['model']:<29} {str(tuple(r['shape'])):<22} {r['device']:<4} {r['dtype']:<8} "
            f"{str(r['tf32']):<5} {r['input']:<5} {r['what']:<26} {r['eager_err']:9.2e} "
            f"{r['fused_err']:9.2e} {r['ratio']:6.2f}{extra}"
        )
        worst = max(worst, r["ratio"])
    print(f"worst fused/eager error ratio: {worst:.2f}")
    if args.json:
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
