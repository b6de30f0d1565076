# Kernel timelines of 60 headline Conv3dGroupNormMean training steps issued back to back
# (torch.autograd.grad of the output w.r.t. x and every parameter), from torch.profiler's CUDA
# activity: each step's duration (its first kernel's start to its last kernel's end), and the
# kernels of the fastest and the slowest step (stream, start and end in us from the step's
# start, duration). FUSED_OPS_CONCURRENT_GRADS picks the backward's routes. Run on the device
# with FUSED_OPS_LIBRARY and PYTHONPATH set: python3 step_trace.py /tmp/trace (output:
# trace-concurrent.txt, trace-sequential.txt; the profiler's own host cost slows the issue of
# every launch, so the steps are slower than without it).
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fused_ops  # noqa: F401
from fused_ops.modules import Conv3dGroupNormMean

torch.manual_seed(0)
m = Conv3dGroupNormMean(3, 24, 3, 8).cuda()
with torch.no_grad():
    m.group_norm.weight.uniform_(0.5, 1.5)
    m.group_norm.bias.uniform_(-0.5, 0.5)
x = torch.rand(128, 3, 24, 32, 32, device="cuda", requires_grad=True)
g = torch.randn(128, device="cuda")
params = [x, *m.parameters()]


def step():
    return torch.autograd.grad(m(x), params, g)


for _ in range(20):
    step()
torch.cuda.synchronize()
path = sys.argv[1]
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(60):
        step()
    torch.cuda.synchronize()
prof.export_chrome_trace(path + ".json")
kernels = [e for e in json.load(open(path + ".json"))["traceEvents"] if e.get("cat") == "kernel"]
kernels.sort(key=lambda e: e["ts"])
# A step starts with the forward's first kernel (the first kernel traced).
first = kernels[0]["name"]
starts = [i for i, e in enumerate(kernels) if e["name"] == first]
steps = []
for a, b in zip(starts, starts[1:] + [len(kernels)]):
    k = kernels[a:b]
    t0 = k[0]["ts"]
    steps.append((max(e["ts"] + e["dur"] for e in k) - t0, k, t0))
durations = sorted(s[0] for s in steps[:-1])
print(
    "steps",
    len(steps),
    "median us",
    durations[len(durations) // 2],
    "min",
    durations[0],
    "max",
    durations[-1],
)
print("durations", [round(s[0]) for s in steps])


def show(s, tag):
    duration, k, t0 = s
    print(f"--- {tag} step {duration:.1f} us")
    for e in k:
        print(
            f"  s{e['args'].get('stream')} {e['ts'] - t0:8.1f} {e['ts'] - t0 + e['dur']:8.1f} "
            f"{e['dur']:7.1f}  {e['name'][:70]}"
        )


inner = steps[1:-1]  # (the first may hold warm-up work, the last may be cut)
show(min(inner, key=lambda s: s[0]), "fastest")
show(max(inner, key=lambda s: s[0]), "slowest")
