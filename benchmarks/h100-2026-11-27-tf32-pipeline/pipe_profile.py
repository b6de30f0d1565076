"""The profile behind notes.txt: conv_transpose3d_relu_group_norm's inference forward at the
headline, TF32 allowed, cuDNN's path against the pipelined one (FUSED_OPS_TF32_WGMMA=1) for
each launch count given (FUSED_OPS_TMP_LAUNCHES: a temporary override of the launch count, not
in the library any more, which now ignores it), then the kernels of one call (torch.profiler).
Times: CUDA events around one call (host work included), median and min of 30."""

import os
import statistics
import sys

import torch
import torch.nn.functional as F

import fused_ops

torch.backends.cudnn.allow_tf32 = True
g = torch.Generator(device="cuda").manual_seed(0)
N, Ci, Co, S, G = 16, 64, 128, 32, 8
x = torch.rand((N, Ci, S, S, S), device="cuda", generator=g)
w = (torch.rand((Ci, Co, 3, 3, 3), device="cuda", generator=g) - 0.5) * 0.1
b = torch.rand(Co, device="cuda", generator=g) - 0.5
gw = torch.rand(Co, device="cuda", generator=g) + 0.5
gb = torch.rand(Co, device="cuda", generator=g) - 0.5
args = (x, w, b, [1, 1, 1], [0, 0, 0], [0, 0, 0], 1, [1, 1, 1], G, gw, gb, 1e-5)
op = torch.ops.fused.conv_transpose3d_relu_group_norm
path = "conv_transpose3d_relu_group_norm"


def timed(reps=30):
    for _ in range(3):
        op(*args)
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        op(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times)


with torch.no_grad():
    os.environ.pop("FUSED_OPS_TF32_WGMMA", None)
    ref = op(*args)
    print("path default:", fused_ops.dispatch_path(path, *args))
    print("cudnn default: median %.3f min %.3f ms" % timed())
    os.environ["FUSED_OPS_TF32_WGMMA"] = "1"
    print("path opt-in:", fused_ops.dispatch_path(path, *args))
    y64 = F.conv_transpose3d(x.double(), w.double(), b.double())
    y64 = F.group_norm(F.relu(y64), G, gw.double(), gb.double(), 1e-5)

    def rel(o):
        return ((o.double() - y64).norm() / y64.norm()).item()

    print("rel err cudnn %.3e" % rel(ref))
    for launches in sys.argv[1:] or ["1", "2", "3", "4", "6"]:
        os.environ["FUSED_OPS_TMP_LAUNCHES"] = launches
        out = op(*args)
        again = op(*args)
        median, least = timed()
        print(
            "launches<=%s: median %.3f min %.3f ms  rel err %.3e  bitwise-repeat %s  "
            "max|diff vs cudnn| %.2e"
            % (
                launches,
                median,
                least,
                rel(out),
                torch.equal(out, again),
                (out - ref).abs().max().item(),
            )
        )
    os.environ["FUSED_OPS_TMP_LAUNCHES"] = "4"
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        op(*args)
        torch.cuda.synchronize()
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            print("  %8.1f us  %s" % (evt.device_time, evt.name[:110]))
