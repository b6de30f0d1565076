"""Where the one-pass forward's error comes from in the scale test of test_conv3d_onepass.py
(test_input_and_weight_scales_as_accurate_as_eager): per-statistic errors against float64.

Run from the repository root with the library built (FUSED_OPS_LIBRARY) on a CUDA device:
    python3 benchmarks/h200-2026-11-29-tile-barrier/scale_diag.py
"""

import sys

import torch
import torch.nn.functional as F

import fused_ops  # noqa: F401

sys.path.insert(0, "python_tests")
from helpers import conv3d_args  # noqa: E402


def rel(a, r):
    return ((a.double() - r).norm() / r.norm()).item()


def out_from(gw, gb, cm, mean, rstd, groups):
    """out[n] in float64 from channel means, group means and rstd."""
    n, c = cm.shape
    z = (cm.view(n, groups, -1) - mean.view(n, groups, 1)) * rstd.view(n, groups, 1)
    return (gw.view(1, groups, -1) * z + gb.view(1, groups, -1)).view(n, c).mean(1)


def diagnose(x_scale):
    torch.manual_seed(0)  # (as conftest seeds each test)
    small = min(x_scale, 1.0)
    args = conv3d_args(
        (3, 3, 12, 14, 32), 24, 3, 8, device="cuda", requires_grad=False, eps=1e-5 * small**2
    )
    args[0] = torch.rand_like(args[0]) * x_scale
    channel_scales = torch.pow(2.0, torch.linspace(-10.0, 10.0, 24, device="cuda"))
    args[1] = args[1] * channel_scales.view(-1, 1, 1, 1, 1)
    args[2] = args[2] * channel_scales * small
    x, w, b, stride, padding, dilation, conv_groups, groups, gw, gb, eps = args
    y = F.conv3d(x.double(), w.double(), b.double(), stride, padding, dilation, conv_groups)
    n, c = y.shape[:2]
    per_group = y.view(n, groups, -1)
    mean64 = per_group.mean(-1)
    var64 = per_group.var(-1, unbiased=False)
    rstd64 = 1 / torch.sqrt(var64 + eps)
    cm64 = y.view(n, c, -1).mean(-1)
    out64 = F.group_norm(y, groups, gw.double(), gb.double(), eps).mean(dim=(1, 2, 3, 4))
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        out_inference = torch.ops.fused.conv3d_group_norm_mean(*args)
        # (The training forward: its channel means come exactly from x's sums.)
        out_train, mean, rstd, cm, _ = torch.ops.fused._conv3d_group_norm_mean_onepass_forward(
            *args
        )
        eager_y = F.conv3d(x, w, b, stride, padding, dilation, conv_groups)
        eager = F.group_norm(eager_y, groups, gw, gb, eps).mean(dim=(1, 2, 3, 4))
    gw64, gb64 = gw.double(), gb.double()
    cm, mean, rstd = cm.double(), mean.double(), rstd.double()
    print(f"x_scale {x_scale:g}: out64 {out64.tolist()}")
    print(
        f"  out rel err: inference {rel(out_inference, out64):.3e}, "
        f"training forward {rel(out_train, out64):.3e}, eager {rel(eager, out64):.3e}"
    )
    print(
        f"  stats rel err: mean {rel(mean, mean64):.3e}, rstd {rel(rstd, rstd64):.3e}, "
        f"channel means {rel(cm, cm64):.3e}"
    )
    ratio = var64 / eps
    print(f"  per-group var/eps: {ratio.min().item():.3e} .. {ratio.max().item():.3e}")
    print(
        "  out from float64 stats "
        f"{rel(out_from(gw64, gb64, cm64, mean64, rstd64, groups), out64):.3e}; "
        "with fused channel means "
        f"{rel(out_from(gw64, gb64, cm, mean64, rstd64, groups), out64):.3e}, "
        f"fused group means {rel(out_from(gw64, gb64, cm64, mean, rstd64, groups), out64):.3e}, "
        f"fused rstd {rel(out_from(gw64, gb64, cm64, mean64, rstd, groups), out64):.3e}, "
        f"all fused {rel(out_from(gw64, gb64, cm, mean, rstd, groups), out64):.3e}"
    )
    print(
        "  fused out vs its own stats in float64: "
        f"{rel(out_train, out_from(gw64, gb64, cm, mean, rstd, groups)):.3e}"
    )


if __name__ == "__main__":
    for scale in (1e-6, 1.0, 1e6):
        diagnose(scale)
