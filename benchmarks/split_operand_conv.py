"""Measures float32-grade convolutions built from TF32 ones by splitting the operands
("3xTF32" by concatenation): a = a_hi + a_lo with a_hi = a rounded to TF32, and
conv(x, w) ~= conv([x_hi, x_hi, x_lo], [w_hi, w_lo, w_hi]) with the three parts concatenated
along the reduction (channels for the input and forward, batch for the weight gradient), run
as ONE TF32 convolution. Compared with cuDNN float32 and plain TF32, at the headline
ConvTranspose3d(64 -> 128, k3) on (16, 64, 32^3) computed as a forward convolution.
Prints time (median of CUDA events) and relative L2 / max error against float64.

Measured on an H100 (cuDNN 9.19, 2026-11-22), relative L2 error: forward float32 7.1e-7
(6.8 ms), TF32 2.9e-4 (0.88 ms), split by concatenation 1.7e-5 (2.4 ms); weight gradient
float32 1.3e-5 (18.6 ms), split 1.1e-3 (6.1 ms, no better than plain TF32's 1.0e-3). cuDNN's
TF32 kernels do not keep the split exact (they round or transform operands on their own), so
this trick cannot give float32 accuracy; the library's split-TF32 kernels
(ops/conv/split_tf32_conv3d.cuh) split the operands inside the GEMM instead."""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F


def tf32_round(t):
    # Round to nearest TF32 (10 explicit mantissa bits): add half an ulp of TF32 to the
    # bit pattern, clear the low 13 bits.
    i = t.view(torch.int32)
    r = ((i + 0x1000) & ~0x1FFF).view(torch.float32)
    return r


def split(t):
    hi = tf32_round(t)
    return hi, t - hi


def timed(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def err(y, ref):
    d = (y.double() - ref).flatten()
    return (d.norm() / ref.norm()).item(), (d.abs().max() / ref.abs().max()).item()


def main():
    torch.manual_seed(0)
    cl = torch.channels_last_3d
    x = torch.rand(16, 64, 32, 32, 32, device="cuda").contiguous(memory_format=cl)
    w = (torch.randn(128, 64, 3, 3, 3, device="cuda") / (64 * 27) ** 0.5).contiguous(
        memory_format=cl
    )
    g = torch.randn(16, 128, 34, 34, 34, device="cuda").contiguous(memory_format=cl)
    ref = F.conv3d(x.double(), w.double(), padding=2)
    ref_dx = torch.nn.grad.conv3d_input(x.shape, w.double(), g.double(), padding=2)
    ref_dw = torch.nn.grad.conv3d_weight(x.double(), w.shape, g.double(), padding=2)

    def run(name, fn, reference):
        torch.backends.cudnn.allow_tf32 = name.endswith("tf32") or "split" in name
        ms = timed(fn)
        rel, mx = err(fn(), reference)
        print(f"{name:34s} {ms:7.3f} ms  relL2 {rel:.2e}  max {mx:.2e}", flush=True)

    # forward
    run("fwd fp32 (cuDNN)", lambda: F.conv3d(x, w, padding=2), ref)
    run("fwd tf32", lambda: F.conv3d(x, w, padding=2), ref)
    xh, xl = split(x)
    wh, wl = split(w)
    x3 = torch.cat([xh, xh, xl], 1).contiguous(memory_format=cl)
    w3 = torch.cat([wh, wl, wh], 1).contiguous(memory_format=cl)
    run("fwd split (conv only)", lambda: F.conv3d(x3, w3, padding=2), ref)

    def fwd_split_all():
        h, lo = split(x)
        a = torch.cat([h, h, lo], 1).contiguous(memory_format=cl)
        return F.conv3d(a, w3, padding=2)

    run("fwd split (with operand prep)", fwd_split_all, ref)
    # input gradient = forward conv of g with the flipped, transposed weight
    wt = w.transpose(0, 1).flip(2, 3, 4).contiguous(memory_format=cl)
    run("dx fp32 (cuDNN)", lambda: torch.nn.grad.conv3d_input(x.shape, w, g, padding=2), ref_dx)
    gh, gl = split(g)
    wth, wtl = split(wt)
    g3 = torch.cat([gh, gh, gl], 1).contiguous(memory_format=cl)
    wt3 = torch.cat([wth, wtl, wth], 1).contiguous(memory_format=cl)
    run("dx split (conv only)", lambda: F.conv3d(g3, wt3), ref_dx)
    # weight gradient: reduction over batch and space; concatenate along the batch
    run("dw fp32 (cuDNN)", lambda: torch.nn.grad.conv3d_weight(x, w.shape, g, padding=2), ref_dw)
    xb = torch.cat([xh, xh, xl], 0).contiguous(memory_format=cl)
    gb = torch.cat([gh, gl, gh], 0).contiguous(memory_format=cl)
    run(
        "dw split (conv only)",
        lambda: torch.nn.grad.conv3d_weight(xb, w.shape, gb, padding=2),
        ref_dw,
    )
    run("dw tf32", lambda: torch.nn.grad.conv3d_weight(x, w.shape, g, padding=2), ref_dw)


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    main()
