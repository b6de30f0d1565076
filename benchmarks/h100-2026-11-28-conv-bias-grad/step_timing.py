"""The timing of notes.txt (run from the repository root, the library found as fused_ops finds
it, e.g. FUSED_OPS_LIBRARY): the fused ConvTranspose3dReLUGroupNorm drop-in at the headline,
float32, TF32 allowed, random GroupNorm affine (and conv bias), per-call CUDA events over 4
rotating inputs (4 x 134 MB: more than twice the L2), 5 warm-up calls, 40 timed; forward under
no_grad, forward+backward as autograd.grad of sum(out * g) (its product and sum included).

    python3 step_timing.py [fwd,fwdbwd] [0,1]    # modes, conv bias off / on
    PROFILE=1 ...                                # also the kernels of 8 calls per mode
    TAG=...                                      # a label for the lines
"""

import os
import statistics
import sys

import torch

sys.path.insert(0, os.getcwd())
from fused_ops.modules import ConvTranspose3dReLUGroupNorm  # noqa: E402

torch.backends.cudnn.allow_tf32 = True
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
modes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["fwd", "fwdbwd"]
biases = [b == "1" for b in (sys.argv[2].split(",") if len(sys.argv) > 2 else ["0", "1"])]
tag = os.environ.get("TAG", "")


def step(m, params, g, mode, x):
    if mode == "fwd":
        with torch.no_grad():
            return m(x)
    x = x.detach().requires_grad_(True)
    out = m(x)
    return torch.autograd.grad((out * g).sum(), [x] + params)


for bias in biases:
    torch.manual_seed(0)
    m = ConvTranspose3dReLUGroupNorm(64, 128, 3, 8, bias=bias).to(dev)
    with torch.no_grad():
        m.group_norm.weight.copy_(1 + 0.5 * torch.randn(128))
        m.group_norm.bias.copy_(0.5 * torch.randn(128))
        if bias:
            m.conv_transpose.bias.copy_(0.2 * torch.randn(128))
    xs = [torch.rand(16, 64, 32, 32, 32, device=dev) for _ in range(4)]
    g = torch.randn(16, 128, 34, 34, 34, device=dev)
    params = list(m.parameters())
    for mode in modes:
        for i in range(5):
            step(m, params, g, mode, xs[i % 4])
        torch.cuda.synchronize()
        ts = []
        for i in range(40):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            r = step(m, params, g, mode, xs[i % 4])
            b.record()
            del r
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
        ts.sort()
        print(
            f"{tag} bias={int(bias)} {mode}: median {statistics.median(ts):.3f} ms  "
            f"p10 {ts[4]:.3f}  p90 {ts[35]:.3f}",
            flush=True,
        )
    if os.environ.get("PROFILE") == "1":
        for mode in modes:
            activities = [torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=activities) as prof:
                for i in range(8):
                    step(m, params, g, mode, xs[i % 4])
                torch.cuda.synchronize()
            print(f"{tag} bias={int(bias)} {mode} kernels (us per call):")
            rows = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)
            for e in rows[:16]:
                print(f"   {e.device_time_total / 8:9.1f} x{e.count // 8:<3d} {e.key[:110]}")
