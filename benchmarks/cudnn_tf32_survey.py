"""Which float32 convolutions cuDNN runs in TF32 when torch.backends.cudnn.allow_tf32 is on.

PyTorch's flag *allows* TF32; cuDNN picks per shape whether its kernel uses it. A fused
operator that rounds its convolution to TF32 where eager's does not is less accurate than the
module it replaces. This survey runs eager's ConvTranspose3d and Conv3d, and the forward
convolution that rewrites a stride-1 ConvTranspose3d, over a grid of channel counts, kernel
sizes and spatial sizes with TF32 allowed, and reports for each whether the result carries
TF32 rounding (relative L2 error against float64 above 1e-5; float32 products give ~1e-7).

    python3 benchmarks/cudnn_tf32_survey.py [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch
import torch.nn.functional as F
from report import write_json
from timing import require_cuda
from workloads import transposed_as_forward_weight


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", help="write every row to this file")
    args = parser.parse_args()
    require_cuda("cudnn_tf32_survey.py")
    torch.backends.cudnn.allow_tf32 = True
    rows = []
    channels = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64]
    for c_in, c_out, k, n, s in itertools.product(
        channels, [4, 6, 8, 12, 16, 24, 64, 128], [1, 2, 3], [1, 4], [5, 12]
    ):
        if c_in * c_out > 64 * 64:
            continue
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.rand(n, c_in, s, s + 1, s - 1, device="cuda", generator=g)
        wt = torch.randn(c_in, c_out, k, k, k, device="cuda", generator=g)
        wf = torch.randn(c_out, c_in, k, k, k, device="cuda", generator=g)
        ref_t = F.conv_transpose3d(x.double(), wt.double())
        ref_f = F.conv3d(x.double(), wf.double())
        row = dict(
            c_in=c_in,
            c_out=c_out,
            k=k,
            n=n,
            s=s,
            transposed=rel_err(F.conv_transpose3d(x, wt), ref_t),
            rewrite=rel_err(F.conv3d(x, transposed_as_forward_weight(wt, 1), padding=k - 1), ref_t),
            forward=rel_err(F.conv3d(x, wf), ref_f),
            forward_ndhwc=rel_err(
                F.conv3d(
                    x.to(memory_format=torch.channels_last_3d),
                    wf.to(memory_format=torch.channels_last_3d),
                ),
                ref_f,
            ),
        )
        rows.append(row)
    keys = ["transposed", "rewrite", "forward", "forward_ndhwc"]
    print("c_in c_out k n  s  " + "  ".join(f"{k:>13}" for k in keys))
    for r in rows:
        print(
            f"{r['c_in']:4} {r['c_out']:5} {r['k']} {r['n']} {r['s']:2}  "
            + "  ".join(f"{r[k]:9.1e} {'T' if r[k] > 1e-5 else '-'}  " for k in keys)
        )
    # Summary: where the transposed conv is float32 but the rewrite is TF32 (the hazard).
    hazard = [r for r in rows if r["transposed"] <= 1e-5 < r["rewrite"]]
    print(f"\n{len(hazard)} of {len(rows)} shapes: eager transposed float32, rewrite TF32")
    for r in hazard:
        print(f"  c_in {r['c_in']} c_out {r['c_out']} k {r['k']} n {r['n']} s {r['s']}")
    fwd_t = sorted({(r["c_in"], r["forward"] > 1e-5) for r in rows})
    print("forward conv (NCDHW) TF32 by c_in:", fwd_t)
    if args.json:
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
