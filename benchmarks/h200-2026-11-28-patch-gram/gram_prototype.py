# Prototype (float64) of the patch-Gram forward of conv3d -> group_norm -> mean, stride 1, k3.
import torch
import torch.nn.functional as F

torch.manual_seed(0)


def classes(Lp):
    # index -> class 0..4 (0,1 low edges, 2 mid, 3,4 high edges)
    return [
        0 if i == 0 else 1 if i == 1 else 4 if i == Lp - 1 else 3 if i == Lp - 2 else 2
        for i in range(Lp)
    ]


INC = {0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4)}  # window k includes these classes
HALF = [(ld, lh) for ld in range(3) for lh in range(-2, 3) if ld > 0 or lh >= 0]  # 13
WIN_OFF = [0, 1, 3, 6, 8]


def kw_lo(j):
    return max(0, 2 - j)


def kw_hi(j):
    return min(2, 4 - j)


def forward(x, w, b, G, gamma, beta, pad, eps=1e-5):
    N, Ci, D, H, W = x.shape
    Co = w.shape[0]
    xp = F.pad(x, (pad[2],) * 2 + (pad[1],) * 2 + (pad[0],) * 2)
    Dp, Hp, Wp = xp.shape[2:]
    Do, Ho, Wo = Dp - 2, Hp - 2, Wp - 2
    P = Do * Ho * Wo
    out = torch.empty(N, dtype=torch.float64)
    for n in range(N):
        s = x[n, :, D // 2, H // 2, :].mean(-1)  # shift per input channel
        xs = xp[n] - s[:, None, None, None]  # padding becomes -s
        # zero beyond the volume: pad by 2 zeros in h, w (both sides) and d (high side)
        z = F.pad(xs, (2, 2, 2, 2, 0, 2))
        dcl, hcl = classes(Dp), classes(Hp)
        bins = torch.zeros(5, 5, Ci, Ci, 13, 9, dtype=torch.float64)
        for d in range(Dp):
            for h in range(Hp):
                for t, (ld, lh) in enumerate(HALF):
                    for c1 in range(Ci):
                        for c2 in range(Ci):
                            a = z[c1, d, h + 2, 2 : 2 + Wp]
                            bb = z[c2, d + ld, h + 2 + lh, :]  # bb[i] = x[i-2]
                            for j in range(5):
                                prod = a * bb[j : j + Wp]  # x_c2[w + j - 2]
                                e = prod[[0, 1, Wp - 2, Wp - 1]]
                                mid = prod[2 : Wp - 2].sum()
                                for kw1 in range(kw_lo(j), kw_hi(j) + 1):
                                    win = mid + (
                                        e[0] + e[1]
                                        if kw1 == 0
                                        else e[1] + e[2]
                                        if kw1 == 1
                                        else e[2] + e[3]
                                    )
                                    bins[
                                        dcl[d], hcl[h], c1, c2, t, WIN_OFF[j] + kw1 - kw_lo(j)
                                    ] += win
        # Gram S'
        K = Ci * 27
        S = torch.full((K, K), float("nan"), dtype=torch.float64)

        def idx(c, kd, kh, kw):
            return c * 27 + kd * 9 + kh * 3 + kw

        for t, (ld, lh) in enumerate(HALF):
            for c1 in range(Ci):
                for c2 in range(Ci):
                    for j in range(5):
                        lw = j - 2
                        if (ld, lh) == (0, 0) and (lw < 0 or (lw == 0 and c1 > c2)):
                            continue
                        for kw1 in range(kw_lo(j), kw_hi(j) + 1):
                            for kd1 in range(0, 3 - ld):
                                for kh1 in range(max(0, -lh), min(3, 3 - lh)):
                                    v = sum(
                                        bins[dc, hc, c1, c2, t, WIN_OFF[j] + kw1 - kw_lo(j)]
                                        for dc in INC[kd1]
                                        for hc in INC[kh1]
                                    )
                                    i1 = idx(c1, kd1, kh1, kw1)
                                    i2 = idx(c2, kd1 + ld, kh1 + lh, kw1 + lw)
                                    S[i1, i2] = v
                                    S[i2, i1] = v
        assert not torch.isnan(S).any()
        # box sums of shifted x per (c, k)
        T = torch.zeros(K, dtype=torch.float64)
        for c in range(Ci):
            for kd in range(3):
                for kh in range(3):
                    for kw in range(3):
                        T[idx(c, kd, kh, kw)] = xs[
                            c, kd : kd + Do, kh : kh + Ho, kw : kw + Wo
                        ].sum()
        C = S - torch.outer(T, T) / P
        wf = w.reshape(Co, K).double()
        shift_term = (w.double().sum((2, 3, 4)) * s).sum(1)
        mu = b.double() + wf @ T / P + shift_term
        m2 = ((wf @ C) * wf).sum(1)
        Cg = Co // G
        mu_g = mu.reshape(G, Cg).mean(1)
        var_g = (
            m2.reshape(G, Cg).sum(1) + P * ((mu.reshape(G, Cg) - mu_g[:, None]) ** 2).sum(1)
        ) / (Cg * P)
        rstd = 1 / torch.sqrt(var_g + eps)
        out[n] = (
            (
                gamma.double().reshape(G, Cg) * (mu.reshape(G, Cg) - mu_g[:, None]) * rstd[:, None]
            ).sum()
            + beta.double().sum()
        ) / Co
    return out


for N, Ci, D, H, W, Co, G, pad in [
    (2, 3, 5, 6, 7, 8, 4, (0, 0, 0)),
    (1, 2, 4, 5, 6, 6, 3, (1, 0, 2)),
    (1, 1, 2, 3, 2, 4, 2, (1, 1, 1)),
]:
    x = torch.rand(N, Ci, D, H, W, dtype=torch.float64)
    w = torch.randn(Co, Ci, 3, 3, 3, dtype=torch.float64)
    b = torch.randn(Co, dtype=torch.float64)
    gamma = torch.randn(Co, dtype=torch.float64)
    beta = torch.randn(Co, dtype=torch.float64)
    ref = F.group_norm(F.conv3d(x, w, b, padding=pad), G, gamma, beta, 1e-5).mean((1, 2, 3, 4))
    got = forward(x, w, b, G, gamma, beta, pad)
    print((got - ref).abs().max().item(), ref)
