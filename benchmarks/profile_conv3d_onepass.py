"""One training step of Conv3dGroupNormMean at the headline size on CUDA, for profilers:
    ncu --kernel-name regex:onepass --launch-skip 4 --launch-count 4 \\
        python3 benchmarks/profile_conv3d_onepass.py
runs two warm-up steps, then the steps to profile; prints the dispatch path and the time of
a step (CUDA events, after the warm-up). With --phases, also the one-pass backward's time
per gradient set, and the peak CUDA memory of a training step, fused vs eager. With
--input-grad-accuracy, the input gradient of a step whose conv weight is frozen (the lag
tables' path, and with FUSED_OPS_CONV3D_LAG_INPUT_GRAD=0 the recomputing one) against
float64, with eager's, in both TF32 modes. With --forward-kernels, the forward without autograd:
its kernels' times (torch.profiler), its time per call, its output's error against float64
and whether a second run is bitwise equal."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import torch

if importlib.util.find_spec("fused_ops") is None:  # not installed: the source checkout's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from timing import back_to_back_ms  # noqa: E402

import fused_ops  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="steps after the warm-up")
    parser.add_argument("--phases", action="store_true", help="backward phases and peak memory")
    parser.add_argument(
        "--input-grad-accuracy", action="store_true", help="input gradients against float64"
    )
    parser.add_argument(
        "--forward-kernels", action="store_true", help="the inference forward's kernel times"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("profile_conv3d_onepass.py: needs a CUDA GPU (torch.cuda.is_available() is False)")
        return 2
    torch.manual_seed(0)
    model = fused_ops.Conv3dGroupNormMean(3, 24, 3, 8).cuda()
    with torch.no_grad():
        model.group_norm.weight.normal_(1.0, 0.2)
        model.group_norm.bias.normal_(0.0, 0.2)
    x = torch.rand(128, 3, 24, 32, 32, device="cuda", requires_grad=True)
    conv, gn = model.conv, model.group_norm
    op_args = (x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups,
               gn.num_groups, gn.weight, gn.bias, gn.eps)  # fmt: skip
    print("path:", fused_ops.dispatch_path("conv3d_group_norm_mean", *op_args))

    def step():
        model.zero_grad(set_to_none=True)
        x.grad = None
        model(x).sum().backward()

    for _ in range(2):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.steps):
        step()
    end.record()
    torch.cuda.synchronize()
    print(f"forward+backward: {start.elapsed_time(end) / args.steps:.3f} ms per step")
    if args.phases:
        report_phases(model, x, op_args)
    if args.input_grad_accuracy:
        report_input_grad_accuracy(model, x)
    if args.forward_kernels:
        report_forward_kernels(model, x)
    return 0


def time_ms(fn, iters=20) -> float:
    fn()
    return back_to_back_ms(fn, iters)


def report_phases(model, x, op_args) -> None:
    """The one-pass backward per gradient set, and peak memory of a step (fused vs eager)."""
    from fused_ops import reference

    fwd = torch.ops.fused._conv3d_group_norm_mean_onepass_forward
    bwd = torch.ops.fused._conv3d_group_norm_mean_onepass_backward
    with torch.no_grad():
        out, mean, rstd, channel_mean, input_sums = fwd(*op_args)
        stats = (mean, rstd, channel_mean, input_sums)
        print(f"onepass training forward: {time_ms(lambda: fwd(*op_args)):.3f} ms")
        grad = torch.randn_like(out)
        rest = list(op_args[3:9])
        for name, mask in [
            ("all gradients", [True] * 5),
            ("input only", [True, False, False, False, False]),
            ("weight only", [False, True, False, False, False]),
            ("parameters' statistics only", [False, False, True, True, True]),
        ]:

            def run(mask=mask):
                bwd(grad, x, op_args[1], op_args[2], *stats, *rest, mask)

            print(f"onepass backward, {name}: {time_ms(run):.3f} ms")
    saved = (mean.numel() + rstd.numel() + channel_mean.numel()) * mean.element_size()
    saved += input_sums.numel() * input_sums.element_size()
    print(f"saved for backward besides the arguments: {saved} bytes")
    original = reference.Conv3dGroupNormMean(3, 24, 3, 8).cuda()
    original.load_state_dict(model.state_dict())
    for name, module in [("fused", model), ("eager", original)]:
        module.zero_grad(set_to_none=True)
        x.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        module(x).sum().backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        print(f"peak CUDA memory of a step above its inputs, {name}: {peak / 2**20:.1f} MiB")


def report_forward_kernels(model, x) -> None:
    """The forward without autograd on 4 rotating inputs: kernel times over 20 calls, time
    per call (3 x 50 calls), relative L2 error of out against float64, bitwise repeat; which
    instructions run its products (FUSED_OPS_ONEPASS_WGMMA=0 switches wgmma off)."""
    from torch.profiler import ProfilerActivity, profile

    from fused_ops import reference

    xs = [torch.rand_like(x, requires_grad=False) for _ in range(4)]
    exact = reference.Conv3dGroupNormMean(3, 24, 3, 8).cuda().double()
    exact.load_state_dict(model.state_dict())
    with torch.no_grad():
        out = model(xs[0])
        ref = exact(xs[0].double())
        error = ((out.double() - ref).norm() / ref.norm()).item()
        repeat = torch.equal(out, model(xs[0]))
        print(f"forward ({fused_ops.onepass_products_kernel()} products): relative L2 error "
              f"vs float64 {error:.3e}, bitwise repeat {repeat}")  # fmt: skip
        for _ in range(5):
            model(xs[0])
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(20):
                model(xs[i % 4])
            torch.cuda.synchronize()
        for event in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
            if event.device_time_total > 0:
                print(f"  kernel {event.device_time_total / 20:8.1f} us  {event.key[:90]}")
        per_call = [
            time_ms(lambda: [model(xs[i % 4]) for i in range(50)], 1) / 50 for _ in range(3)
        ]
        print("forward per call ms (3 x 50 calls):", " ".join(f"{t:.4f}" for t in per_call))


def report_input_grad_accuracy(model, x) -> None:
    """Relative L2 error of the input gradient (conv weight frozen) against float64."""
    from fused_ops import reference

    original = reference.Conv3dGroupNormMean(3, 24, 3, 8).cuda()
    original.load_state_dict(model.state_dict())
    exact = reference.Conv3dGroupNormMean(3, 24, 3, 8).cuda().double()
    exact.load_state_dict(model.state_dict())
    grad = torch.randn(x.shape[0], device="cuda")
    x64 = x.detach().double().requires_grad_(True)
    (dx64,) = torch.autograd.grad(exact(x64), x64, grad.double())

    def error(module):
        for p in module.parameters():
            p.requires_grad_(p is not module.conv.weight)
        xi = x.detach().clone().requires_grad_(True)
        (dx,) = torch.autograd.grad(module(xi), xi, grad)
        return ((dx.double() - dx64).norm() / dx64.norm()).item()

    flag = torch.backends.cudnn.allow_tf32
    setting = os.environ.get("FUSED_OPS_CONV3D_LAG_INPUT_GRAD")
    try:
        for tf32 in (True, False):
            torch.backends.cudnn.allow_tf32 = tf32
            os.environ["FUSED_OPS_CONV3D_LAG_INPUT_GRAD"] = "1"
            lag = error(model)
            os.environ["FUSED_OPS_CONV3D_LAG_INPUT_GRAD"] = "0"
            recomputed = error(model)
            print(
                f"input gradient, conv weight frozen, TF32 {'on' if tf32 else 'off'}: relative L2 "
                f"error vs float64: lag tables {lag:.2e}, recomputing kernel {recomputed:.2e}, "
                f"eager {error(original):.2e}"
            )
    finally:
        torch.backends.cudnn.allow_tf32 = flag
        if setting is None:
            os.environ.pop("FUSED_OPS_CONV3D_LAG_INPUT_GRAD", None)
        else:
            os.environ["FUSED_OPS_CONV3D_LAG_INPUT_GRAD"] = setting
        for module in (model, original):
            for p in module.parameters():
                p.requires_grad_(True)


if __name__ == "__main__":
    sys.exit(main())
