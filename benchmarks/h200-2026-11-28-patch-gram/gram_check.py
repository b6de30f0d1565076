import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "python_tests"))
import fused_ops

torch.manual_seed(0)
dev = "cuda"


def ref64(x, w, b, pad, G, gw, gb):
    y = F.conv3d(x.double(), w.double(), None if b is None else b.double(), padding=pad)
    return F.group_norm(y, G, gw.double(), gb.double(), 1e-5).mean((1, 2, 3, 4))


def eager(x, w, b, pad, G, gw, gb):
    return F.group_norm(F.conv3d(x, w, b, padding=pad), G, gw, gb, 1e-5).mean((1, 2, 3, 4))


cases = [  # N, Ci, D, H, W, Co, G, pad
    (128, 3, 24, 32, 32, 24, 8, (0, 0, 0)),
    (2, 3, 5, 6, 7, 8, 4, (0, 0, 0)),
    (1, 2, 4, 5, 6, 6, 3, (1, 0, 2)),
    (1, 1, 2, 3, 2, 4, 2, (1, 1, 1)),
    (3, 4, 9, 17, 31, 12, 4, (1, 1, 1)),
    (2, 1, 30, 60, 50, 5, 5, (0, 2, 1)),
    (1, 3, 4, 4, 60, 33, 3, (0, 0, 2)),
    (5, 2, 13, 11, 9, 40, 8, (2, 2, 2)),
]
worst = 0
for N, Ci, D, H, W, Co, G, pad in cases:
    for dist in ("rand", "randn"):
        x = (torch.rand if dist == "rand" else torch.randn)(N, Ci, D, H, W, device=dev)
        w = torch.randn(Co, Ci, 3, 3, 3, device=dev) / (Ci * 27) ** 0.5
        b = torch.randn(Co, device=dev)
        gw = torch.randn(Co, device=dev)
        gb = torch.randn(Co, device=dev)
        args = [x, w, b, [1, 1, 1], list(pad), [1, 1, 1], 1, G, gw, gb, 1e-5]
        with torch.no_grad():
            path = fused_ops.dispatch_path("conv3d_group_norm_mean", *args)
            out = torch.ops.fused.conv3d_group_norm_mean(*args)
            out2 = torch.ops.fused.conv3d_group_norm_mean(*args)
            r = ref64(x, w, b, pad, G, gw, gb)
            try:
                e = eager(x, w, b, pad, G, gw, gb)
            except RuntimeError:
                e = r.float() * float("nan")
        rel = ((out.double() - r).norm() / r.norm()).item()
        rel_e = ((e.double() - r).norm() / r.norm()).item()
        ok = torch.allclose(out.double(), r, rtol=1e-5, atol=1e-5)
        # training path: forward + backward vs float64
        xs = x.clone().requires_grad_()
        ws = w.clone().requires_grad_()
        bs = b.clone().requires_grad_()
        gws = gw.clone().requires_grad_()
        gbs = gb.clone().requires_grad_()
        o = torch.ops.fused.conv3d_group_norm_mean(
            xs, ws, bs, [1, 1, 1], list(pad), [1, 1, 1], 1, G, gws, gbs, 1e-5
        )
        g = torch.randn_like(o)
        grads = torch.autograd.grad((o * g).sum(), [xs, ws, bs, gws, gbs])
        x6 = x.double().requires_grad_()
        w6 = w.double().requires_grad_()
        b6 = b.double().requires_grad_()
        gw6 = gw.double().requires_grad_()
        gb6 = gb.double().requires_grad_()
        o6 = F.group_norm(F.conv3d(x6, w6, b6, padding=pad), G, gw6, gb6, 1e-5).mean((1, 2, 3, 4))
        g6 = torch.autograd.grad((o6 * g.double()).sum(), [x6, w6, b6, gw6, gb6])
        gerr = max(
            ((a.double() - c).norm() / c.norm().clamp_min(1e-30)).item() for a, c in zip(grads, g6)
        )
        otrain = ((o.double() - o6).norm() / o6.norm()).item()
        worst = max(worst, rel / max(rel_e, 1e-9))
        print(
            f"{(N, Ci, D, H, W, Co, G, pad)} {dist:5s} path={path} rel={rel:.2e} "
            f"eager={rel_e:.2e} allclose={ok} bitwise={torch.equal(out, out2)} "
            f"train_rel={otrain:.2e} grad_rel_max={gerr:.2e}"
        )
print("worst ratio to eager", worst)
