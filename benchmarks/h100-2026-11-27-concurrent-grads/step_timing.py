# Headline Conv3dGroupNormMean training step (torch.autograd.grad of the output w.r.t. x and
# every parameter): per-step event times over 300 eager steps (median, p10, p90), 300 steps
# back to back (ms a step by events; wall ms a step, the final sync included), and 300 replays
# of the step captured in a CUDA graph; gradients one after the other
# (FUSED_OPS_CONCURRENT_GRADS=0) and at once (=1), two rounds. Run on the device with
# FUSED_OPS_LIBRARY and PYTHONPATH set (output: graph-time.txt).
import os
import time

import torch

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


def eager_times(n=300):
    events = []
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    for _ in range(n):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        events.append((a, b))
    torch.cuda.synchronize()
    v = sorted(a.elapsed_time(b) for a, b in events)
    return v[len(v) // 2], v[len(v) // 10], v[9 * len(v) // 10]


def back_to_back(n=300):
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        step()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n, (time.perf_counter() - t) * 1e3 / n


def graph_time(n=300):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        graph.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n


for _round in range(2):
    for setting in ("0", "1"):
        os.environ["FUSED_OPS_CONCURRENT_GRADS"] = setting
        med, p10, p90 = eager_times()
        gpu, host = back_to_back()
        replay = graph_time()
        print(
            f"concurrent={setting}: eager step median {med:.3f} p10 {p10:.3f} p90 {p90:.3f} ms; "
            f"back-to-back {gpu:.3f} ms/step (host {host:.3f}); CUDA graph replay {replay:.3f} ms",
            flush=True,
        )
