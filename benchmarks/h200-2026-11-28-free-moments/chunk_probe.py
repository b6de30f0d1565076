# (Call 1 of notes.txt; not kept.) Probe: the TF32 inference forward of
# ConvTranspose3d->ReLU->GroupNorm run over sample chunks,
# so that each chunk's conv output (20 MB a sample) is re-read from L2 by the moments and the
# normalise pass, and its buffer (freed, then reused by the allocator) is rewritten in L2.
import os

import torch
from torch.profiler import ProfilerActivity, profile

torch.ops.load_library(os.environ["FUSED_OPS_LIBRARY"])
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
dev = "cuda"
g = torch.Generator(device="cpu").manual_seed(0)
N, Ci, Co, D = 16, 64, 128, 32
x = torch.rand(N, Ci, D, D, D, generator=g).to(dev)
w = (torch.randn(Ci, Co, 3, 3, 3, generator=g) * 0.05).to(dev)
b = (torch.randn(Co, generator=g) * 0.1).to(dev)
gw = (1 + 0.5 * torch.randn(Co, generator=g)).to(dev)
gb = (0.5 * torch.randn(Co, generator=g)).to(dev)
op = torch.ops.fused.conv_transpose3d_relu_group_norm


def call(xx, out=None):
    return op(xx, w, b, [1, 1, 1], [0, 0, 0], [0, 0, 0], 1, [1, 1, 1], 8, gw, gb, 1e-5)


def chunked(S):
    def f():
        return [call(x[i : i + S]) for i in range(0, N, S)]

    return f


def chunked_into(S, out):
    def f():
        for i in range(0, N, S):
            out[i : i + S].copy_(call(x[i : i + S]))

    return f


def time_ms(fn, iters=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2], ts[0]


with torch.no_grad():
    print(
        "path:",
        torch.ops.fused._conv_transpose3d_relu_group_norm_path(
            x, w, b, [1, 1, 1], [0, 0, 0], [0, 0, 0], 1, [1, 1, 1], 8, gw, gb, 1e-5
        ),
    )
    ref = call(x)
    for S in (1, 2, 4):
        outs = torch.cat(chunked(S)(), 0)
        print(f"S={S} max|chunk - full| = {(outs - ref).abs().max().item():.3e}")
    for _rep in range(2):
        print("full      median/min ms %.3f %.3f" % time_ms(lambda: call(x)))
        for S in (1, 2, 4, 8):
            print(f"chunks S={S} median/min ms %.3f %.3f" % time_ms(chunked(S)))
    # Kernel times for full and S=1, S=2.
    for name, fn in (("full", lambda: call(x)), ("S=1", chunked(1)), ("S=2", chunked(2))):
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        agg = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                k = ev.name[:90]
                t, c = agg.get(k, (0.0, 0))
                agg[k] = (t + ev.device_time, c + 1)
        print(f"--- {name}: kernel total {sum(t for t, _ in agg.values()):.1f} us")
        for k, (t, c) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
            print(f"  {t:8.1f} us  x{c:3d}  {k}")
