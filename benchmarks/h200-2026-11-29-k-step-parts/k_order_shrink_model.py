"""Does the windows' K order (window_tap in conv3d_group_norm_mean_onepass_cuda.cu) change how
much the tensor cores' truncating float32 accumulation shrinks the convolution's output?
A CPU model of one output's 11 k steps x 3 split-TF32 terms at the Conv3d headline (C_in 3,
k 3: 81 taps; a Conv3d(3, 24, 3)'s default-init weights, seed 0; torch.rand-like inputs, taps
independent): each instruction adds its k8 products exactly and rounds the sum toward zero
(call1-tf32-accumulation-bias.txt measured that behaviour). Printed: the output-weighted
signed relative error, sum(sign * (y - exact)) / sum(|exact|) (negative: smaller in
magnitude), for the taps in order and in the windows' order (notes.txt, section 4).
  python3 k_order_shrink_model.py"""

import numpy as np
import torch

torch.manual_seed(0)
conv = torch.nn.Conv3d(3, 24, 3)
W = conv.weight.detach().double().numpy().reshape(24, 81)
rng = np.random.default_rng(1)


def tf32_rn(v):
    b = v.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return b.view(np.float32)


def tf32_trunc(v):
    b = v.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return b.view(np.float32)


def trunc_f32(v):  # round toward zero to float32
    f = v.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(v)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f


P = 20000
A = rng.random((P, 81))  # rand inputs at the 81 taps (independent: fine for the order question)
A32 = A.astype(np.float32)
ahi = tf32_rn(A32)
alo = tf32_trunc((A32 - ahi).astype(np.float32))
W32 = W.astype(np.float32)
bhi = tf32_rn(W32)
blo = tf32_trunc((W32 - bhi).astype(np.float32))
exact = A32.astype(np.float64) @ W32.T.astype(np.float64)


def run(order):  # order: list of 11 steps x 8 columns of tap index or -1
    acc = np.zeros((P, 24), dtype=np.float32)
    for cols in order:
        idx = [c for c in cols if c >= 0]
        for a, b in ((alo, bhi), (ahi, blo), (ahi, bhi)):
            s = a[:, idx].astype(np.float64) @ b[:, idx].T.astype(np.float64)
            acc = trunc_f32(acc.astype(np.float64) + s)
    return acc


plain = [[8 * s + c if 8 * s + c < 81 else -1 for c in range(8)] for s in range(11)]


def wtap(k):
    slot = 2 * (k // 8) + (k % 8) // 4
    row = 4 * (slot // 3) + k % 4
    return 3 * row + slot % 3 if row < 27 else -1


windows = [[wtap(8 * s + c) for c in range(8)] for s in range(11)]
assert sorted(t for st in windows for t in st if t >= 0) == list(range(81))
for name, order in (("plain", plain), ("windows", windows)):
    y = run(order).astype(np.float64)
    sign = np.sign(exact)
    print(
        f"{name:8s} output-weighted signed relative error "
        f"{np.sum(sign * (y - exact)) / np.sum(np.abs(exact)):.3e}"
    )
