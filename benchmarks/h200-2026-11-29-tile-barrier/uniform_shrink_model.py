"""A float64 model of the scale test's errors (notes.txt, section 4): the convolution output
(bias excluded) shrunk by a uniform relative `e`, and out[n] from it with the channel means
taken from that output (the forward without autograd) or exactly (the training forward, whose
means come from x's sums), against float64. CPU only; inputs built as the test builds them
(torch.rand here is the CPU's, so the values differ from the device's).

    python3 benchmarks/h200-2026-11-29-tile-barrier/uniform_shrink_model.py
"""

import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, "python_tests")
from helpers import conv3d_args  # noqa: E402


def out_from(y0, b, gw, gb, eps, groups, means):
    """out[n] from the conv output without its bias `y0`, in float64; `means`: the channel
    means of y0 to centre with."""
    n, c = y0.shape[:2]
    y = y0.view(n, c, -1) + b.view(1, c, 1)
    m = means + b
    spatial = y.shape[-1]
    m2 = ((y - m.unsqueeze(-1)) ** 2).sum(-1)
    mg = m.view(n, groups, -1).mean(-1)
    spread = ((m.view(n, groups, -1) - mg.unsqueeze(-1)) ** 2).sum(-1)
    m2g = m2.view(n, groups, -1).sum(-1) + spatial * spread
    rstd = 1 / torch.sqrt(m2g / (spatial * c // groups) + eps)
    z = (m.view(n, groups, -1) - mg.unsqueeze(-1)) * rstd.unsqueeze(-1)
    return (gw.view(1, groups, -1) * z + gb.view(1, groups, -1)).view(n, c).mean(1)


def model(x_scale):
    torch.manual_seed(0)
    small = min(x_scale, 1.0)
    args = conv3d_args((3, 3, 12, 14, 32), 24, 3, 8, requires_grad=False, eps=1e-5 * small**2)
    x = torch.rand_like(args[0]).double() * x_scale
    channel_scales = torch.pow(2.0, torch.linspace(-10.0, 10.0, 24))
    w = (args[1] * channel_scales.view(-1, 1, 1, 1, 1)).double()
    b = (args[2] * channel_scales * small).double()
    groups, gw, gb, eps = args[7], args[8].double(), args[9].double(), args[10]
    y0 = F.conv3d(x, w)
    exact = y0.view(*y0.shape[:2], -1).mean(-1)
    ref = F.group_norm(y0 + b.view(1, -1, 1, 1, 1), groups, gw, gb, eps).mean(dim=(1, 2, 3, 4))

    def rel(a):
        return ((a - ref).norm() / ref.norm()).item()

    print(f"x_scale {x_scale:g}")
    for e in (1e-7, 3e-7, 4.5e-7):
        shrunk = y0 * (1 - e)
        own = shrunk.view(*y0.shape[:2], -1).mean(-1)
        from_output = rel(out_from(shrunk, b, gw, gb, eps, groups, own))
        from_exact = rel(out_from(shrunk, b, gw, gb, eps, groups, exact))
        print(
            f"  shrunk by {e:.1e}: means from the output {from_output:.2e}, exact {from_exact:.2e}"
        )


if __name__ == "__main__":
    for scale in (1e-6, 1.0, 1e6):
        model(scale)
