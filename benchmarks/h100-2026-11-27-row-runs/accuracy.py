"""Headline Conv3d forward: relative L2 errors against float64 of out (inference, and the
training forward, which takes exact channel means from x's sums) and of rstd, per setting of
the row-run experiment's switches (FUSED_OPS_ONEPASS_ROW_RUNS, FUSED_OPS_ONEPASS_CENTRED: that
build only, main ignores them), and eager's (TF32 off / on). Random GroupNorm affine and conv
bias. python3 accuracy.py [rand|offset|randn]"""

import os
import sys

import torch

import fused_ops
from fused_ops import reference


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def main() -> None:
    dist = sys.argv[1] if len(sys.argv) > 1 else "rand"
    torch.manual_seed(0)
    m = fused_ops.Conv3dGroupNormMean(3, 24, 3, 8).cuda()
    with torch.no_grad():
        m.group_norm.weight.uniform_(0.5, 1.5)
        m.group_norm.bias.uniform_(-0.5, 0.5)
        m.conv.bias.uniform_(-0.2, 0.2)
    x = torch.rand(128, 3, 24, 32, 32, device="cuda")
    if dist == "randn":
        x = torch.randn_like(x)
    elif dist == "offset":
        x = x + 3.0
    print("input:", dist)
    exact = reference.Conv3dGroupNormMean(3, 24, 3, 8).cuda().double()
    exact.load_state_dict(m.state_dict())
    eager = reference.Conv3dGroupNormMean(3, 24, 3, 8).cuda()
    eager.load_state_dict(m.state_dict())
    with torch.no_grad():
        y64 = torch.nn.functional.conv3d(x.double(), exact.conv.weight, exact.conv.bias)
        groups = y64.view(128, 8, 3, 22 * 30 * 30)
        rstd64 = 1 / torch.sqrt(groups.var(dim=(2, 3), unbiased=False) + 1e-5)
        ref = exact(x.double())
        gn = m.group_norm
        args = [x, m.conv.weight, m.conv.bias, [1, 1, 1], [0, 0, 0], [1, 1, 1], 1, 8]
        args += [gn.weight, gn.bias, 1e-5]
        for row_runs, centred in (("1", "1"), ("1", "0"), ("0", "1"), ("0", "0")):
            os.environ["FUSED_OPS_ONEPASS_ROW_RUNS"] = row_runs
            os.environ["FUSED_OPS_ONEPASS_CENTRED"] = centred
            out, _, rstd, _, _ = torch.ops.fused._conv3d_group_norm_mean_onepass_forward(*args)
            inference = torch.ops.fused.conv3d_group_norm_mean(*args)
            signed = ((rstd.double() - rstd64) / rstd64).mean().item()
            print(
                f"row_runs={row_runs} centred={centred}: inference out rel "
                f"{rel(inference, ref):.3e}; training out rel {rel(out, ref):.3e}, rstd rel "
                f"{rel(rstd, rstd64):.3e} (mean signed {signed:+.2e})"
            )
        for tf32 in (False, True):
            torch.backends.cudnn.allow_tf32 = tf32
            print(f"eager tf32={tf32}: out rel {rel(eager(x), ref):.3e}")


if __name__ == "__main__":
    main()
