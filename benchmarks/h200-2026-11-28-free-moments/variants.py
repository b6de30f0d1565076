# TF32 inference forward of ConvTranspose3d->ReLU->GroupNorm at the headline: cuDNN's path vs
# our wgmma conv with the moments (launch count, tile), interleaved rounds, + kernel breakdown.
# (Call 6 of notes.txt. It needs two temporary switches that were in the library for that call
# only: FUSED_OPS_TMP_LAUNCHES, the pipeline's launches at most, and FUSED_OPS_TMP_C1, the
# 128-channel TF32 tile alone instead of in clusters of 2, which the library now runs.)
import os

import torch
from torch.profiler import ProfilerActivity, profile

torch.ops.load_library(os.environ["FUSED_OPS_LIBRARY"])
torch.backends.cudnn.allow_tf32 = True
torch.backends.cuda.matmul.allow_tf32 = True
g = torch.Generator().manual_seed(0)
N, Ci, Co, D = 16, 64, 128, 32
x = torch.rand(N, Ci, D, D, D, generator=g).cuda()
w = (torch.randn(Ci, Co, 3, 3, 3, generator=g) * 0.05).cuda()
b = (torch.randn(Co, generator=g) * 0.1).cuda()
gw = (1 + 0.5 * torch.randn(Co, generator=g)).cuda()
gb = (0.5 * torch.randn(Co, generator=g)).cuda()
args = (w, b, [1, 1, 1], [0, 0, 0], [0, 0, 0], 1, [1, 1, 1], 8, gw, gb, 1e-5)
op = torch.ops.fused.conv_transpose3d_relu_group_norm
variants = {
    "cudnn (default)": {},
    "wgmma c2, 1 launch": {"FUSED_OPS_TF32_WGMMA": "1", "FUSED_OPS_TMP_LAUNCHES": "1"},
    "wgmma c1, 1 launch": {
        "FUSED_OPS_TF32_WGMMA": "1",
        "FUSED_OPS_TMP_LAUNCHES": "1",
        "FUSED_OPS_TMP_C1": "1",
    },
    "wgmma c2, 2 launches": {"FUSED_OPS_TF32_WGMMA": "1", "FUSED_OPS_TMP_LAUNCHES": "2"},
    "wgmma c1, 2 launches": {
        "FUSED_OPS_TF32_WGMMA": "1",
        "FUSED_OPS_TMP_LAUNCHES": "2",
        "FUSED_OPS_TMP_C1": "1",
    },
}
keys = ("FUSED_OPS_TF32_WGMMA", "FUSED_OPS_TMP_LAUNCHES", "FUSED_OPS_TMP_C1")


def setenv(v):
    for k in keys:
        os.environ.pop(k, None)
    os.environ.update(v)


def path():
    return torch.ops.fused._conv_transpose3d_relu_group_norm_path(x, *args)


with torch.no_grad():
    setenv({})
    ref64 = None
    outs = {}
    for name, v in variants.items():
        setenv(v)
        outs[name] = op(x, *args)
        torch.cuda.synchronize()
        print(f"{name:24s} path {path()}")
    # float64 reference (TF32 errors: compare relative L2)
    yd = torch.nn.functional.conv_transpose3d(x.double(), w.double(), b.double())
    ref = torch.nn.functional.group_norm(torch.relu(yd), 8, gw.double(), gb.double(), 1e-5)
    for name, o in outs.items():
        e = ((o.double() - ref).norm() / ref.norm()).item()
        diff = (o - outs["cudnn (default)"]).abs().max().item()
        print(f"{name:24s} rel L2 vs float64 {e:.3e}, max |diff vs cudnn| {diff:.3e}")
    del yd, ref
    times = {n: [] for n in variants}
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _round in range(12):
        for name, v in variants.items():
            setenv(v)
            for _ in range(2):
                op(x, *args)
            torch.cuda.synchronize()
            s.record()
            for _ in range(10):
                op(x, *args)
            e.record()
            torch.cuda.synchronize()
            times[name].append(s.elapsed_time(e) / 10)
    for name, t in times.items():
        t.sort()
        print(f"{name:24s} median {t[len(t) // 2]:.3f} ms  min {t[0]:.3f}")
    for name in ("cudnn (default)", "wgmma c2, 1 launch", "wgmma c1, 1 launch"):
        setenv(variants[name])
        op(x, *args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            op(x, *args)
            torch.cuda.synchronize()
        agg = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                k = ev.name[:80]
                t0, c0 = agg.get(k, (0.0, 0))
                agg[k] = (t0 + ev.device_time, c0 + 1)
        print(f"--- {name}: kernels {sum(t for t, _ in agg.values()):.1f} us")
        for k, (t0, c0) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
            print(f"  {t0:8.1f} us x{c0} {k}")
