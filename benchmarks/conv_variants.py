"""Times the ways ATen can run the two headline convolutions, to choose fused-ops' conv path.

For ConvTranspose3d(64->128, k=3) on (16, 64, 32^3) and Conv3d(3->24, k=3) on (128, 3, 24, 32, 32):
  - as written (transposed / forward), NCDHW,
  - the transposed one as a forward conv with flipped, channel-swapped taps (fused-ops' rewrite),
  - channels_last_3d (NDHWC) input and weight,
  - cuDNN benchmark mode off / on,
with TF32 on and off. CUDA-event medians over rotated inputs. Prints one table.

    python3 benchmarks/conv_variants.py [--iters 20] [--accuracy | --backward [--kernels]]

--backward: the ConvTranspose3d's input and weight gradients (TF32 on, what eager's default
runs) from an NCDHW output gradient, the transposes to NDHWC timed alone too; with --kernels,
the CUDA kernels each variant launches (torch.profiler) and their times.

--accuracy: instead of times, the error of each full-float32 (TF32 off) variant of the
ConvTranspose3d against float64 (cuDNN's algorithm choice decides it): max |err| / max |ref|
and ||err|| / ||ref|| over the first two samples of the headline batch.
"""

import argparse
import itertools

import torch
import torch.nn.functional as F
from timing import require_cuda
from workloads import transposed_as_forward_weight


def median_ms(fn, inputs, iters):
    for x in inputs[:2]:
        fn(x)
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        x = inputs[i % len(inputs)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def accuracy():
    dev = "cuda"
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    weight = torch.randn(64, 128, 3, 3, 3, device=dev) * 0.05
    x = torch.rand(16, 64, 32, 32, 32, device=dev)
    ref = F.conv_transpose3d(x[:2].double(), weight.double())
    fw = transposed_as_forward_weight(weight, 1)
    cl = torch.channels_last_3d
    variants = {
        "as written": lambda: F.conv_transpose3d(x, weight),
        "as forward conv (pad k-1)": lambda: F.conv3d(x, fw, padding=2),
        "as forward conv, NDHWC": lambda: F.conv3d(
            x.contiguous(memory_format=cl), fw.contiguous(memory_format=cl), padding=2
        ),
    }
    print(f"{'variant':30s} {'bench':5s} {'determ':6s} {'max|err|/max|ref|':>18s} {'relL2':>10s}")
    for (name, fn), bench, determ in itertools.product(
        variants.items(), (False, True), (False, True)
    ):
        torch.backends.cudnn.benchmark = bench
        torch.backends.cudnn.deterministic = determ
        out = fn()[:2].double()
        err = out - ref
        print(
            f"{name:30s} {str(bench):5s} {str(determ):6s} "
            f"{(err.abs().max() / ref.abs().max()).item():18.3e} "
            f"{(err.norm() / ref.norm()).item():10.3e}"
        )
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False


def kernel_times(fn, x):
    """The CUDA kernels of one call of fn(x): (name, microseconds), in launch order."""
    from torch.profiler import ProfilerActivity, profile

    fn(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(x)
        torch.cuda.synchronize()
    return [
        (e.name, e.device_time)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0
    ]


def backward_variants(iters, kernels):
    """The ConvTranspose3d 64->128 k3 backward's convolutions, ways ATen can run them."""
    dev = "cuda"
    torch.manual_seed(0)
    cl = torch.channels_last_3d
    cb = torch.ops.aten.convolution_backward
    weight = torch.randn(64, 128, 3, 3, 3, device=dev) * 0.05
    fw = transposed_as_forward_weight(weight, 1)
    w_cl, fw_cl = weight.contiguous(memory_format=cl), fw.contiguous(memory_format=cl)
    xs = [torch.rand(16, 64, 32, 32, 32, device=dev) for _ in range(2)]
    dys = [torch.randn(16, 128, 34, 34, 34, device=dev) for _ in range(2)]
    xs_cl = [x.contiguous(memory_format=cl) for x in xs]
    dys_cl = [d.contiguous(memory_format=cl) for d in dys]
    inputs = list(zip(xs, dys, xs_cl, dys_cl))
    one, zero = [1, 1, 1], [0, 0, 0]
    variants = {
        "x to NDHWC": lambda a: a[0].contiguous(memory_format=cl),
        "dy to NDHWC": lambda a: a[1].contiguous(memory_format=cl),
        "dx+dw+db as written, NCDHW": lambda a: cb(
            a[1], a[0], weight, [128], one, zero, one, True, zero, 1, [True, True, True]
        ),
        "dx as written, NCDHW": lambda a: cb(
            a[1], a[0], weight, None, one, zero, one, True, zero, 1, [True, False, False]
        ),
        "dx = conv3d(dy, w), NCDHW": lambda a: F.conv3d(a[1], weight),
        "dx = conv3d(dy, w), NDHWC in": lambda a: F.conv3d(a[3], w_cl),
        "dx as written, NDHWC in": lambda a: cb(
            a[3], a[2], w_cl, None, one, zero, one, True, zero, 1, [True, False, False]
        ),
        "dw as written, NCDHW": lambda a: cb(
            a[1], a[0], weight, None, one, zero, one, True, zero, 1, [False, True, False]
        ),
        "dw as written, NDHWC in": lambda a: cb(
            a[3], a[2], w_cl, None, one, zero, one, True, zero, 1, [False, True, False]
        ),
        "dw of the rewrite, NDHWC in": lambda a: cb(
            a[3], a[2], fw_cl, None, one, [2, 2, 2], one, False, zero, 1, [False, True, False]
        ),
        "dw of conv3d(dy, w) by x, NDHWC": lambda a: cb(
            a[2], a[3], w_cl, None, one, zero, one, False, zero, 1, [False, True, False]
        ),
        "db = dy.sum, NCDHW": lambda a: a[1].sum((0, 2, 3, 4)),
    }
    rows = []
    for bench in (False, True):
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = bench
        for name, fn in variants.items():
            try:
                ms = median_ms(fn, inputs, iters)
                rows.append((name, bench, f"{ms:.3f}"))
                if kernels and not bench:
                    for k, us in kernel_times(fn, inputs[0]):
                        rows.append(("    " + k[:90], bench, f"{us / 1000:.3f}"))
            except RuntimeError as e:
                rows.append((name, bench, "error " + str(e)[:60]))
    torch.backends.cudnn.benchmark = False
    print(f"{'ConvTranspose3d 64->128 k3 backward, TF32':96s} {'bench':5s} {'ms':>8s}")
    for r in rows:
        print(f"{r[0]:96s} {str(r[1]):5s} {r[2]:>8s}")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iters", type=int, default=20, help="timed calls per variant")
    parser.add_argument(
        "--accuracy", action="store_true", help="errors against float64 instead of times"
    )
    parser.add_argument(
        "--backward", action="store_true", help="the ConvTranspose3d's gradients instead"
    )
    parser.add_argument(
        "--kernels", action="store_true", help="with --backward: each variant's CUDA kernels"
    )
    args = parser.parse_args()
    require_cuda("conv_variants.py")
    if args.accuracy:
        accuracy()
        return
    if args.backward:
        backward_variants(args.iters, args.kernels)
        return
    dev = "cuda"
    torch.manual_seed(0)
    rows = []
    cases = {
        "conv_transpose3d 64->128": dict(
            shape=(16, 64, 32, 32, 32), weight=(64, 128, 3, 3, 3), transposed=True
        ),
        "conv3d 3->24": dict(shape=(128, 3, 24, 32, 32), weight=(24, 3, 3, 3, 3), transposed=False),
    }
    for name, case in cases.items():
        weight = torch.randn(case["weight"], device=dev) * 0.05
        inputs = [torch.rand(case["shape"], device=dev) for _ in range(3)]
        variants = {}
        if case["transposed"]:
            variants["as written"] = lambda x, w=weight: F.conv_transpose3d(x, w)
            fw = transposed_as_forward_weight(weight, 1)
            variants["as forward conv (pad k-1)"] = lambda x, w=fw: F.conv3d(x, w, padding=2)
            fw_cl = fw.contiguous(memory_format=torch.channels_last_3d)
            variants["as forward conv, NDHWC"] = lambda x, w=fw_cl: F.conv3d(x, w, padding=2)
        else:
            variants["as written"] = lambda x, w=weight: F.conv3d(x, w)
            w_cl = weight.contiguous(memory_format=torch.channels_last_3d)
            variants["NDHWC"] = lambda x, w=w_cl: F.conv3d(x, w)
        for (vname, fn), tf32, bench in itertools.product(
            variants.items(), (True, False), (False, True)
        ):
            torch.backends.cudnn.allow_tf32 = tf32
            torch.backends.cudnn.benchmark = bench
            xs = inputs
            if "NDHWC" in vname:
                xs = [x.contiguous(memory_format=torch.channels_last_3d) for x in inputs]
            try:
                ms = median_ms(fn, xs, args.iters)
                out = fn(xs[0])
                rows.append((name, vname, tf32, bench, f"{ms:.3f}", str(out.is_contiguous())))
            except RuntimeError as e:  # an unsupported combination
                rows.append((name, vname, tf32, bench, "error", str(e)[:40]))
        del inputs
        torch.cuda.empty_cache()
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = True
    print(f"{'conv':28s} {'variant':30s} {'tf32':5s} {'bench':5s} {'ms':>8s}  out NCDHW-contiguous")
    for r in rows:
        print(f"{r[0]:28s} {r[1]:30s} {str(r[2]):5s} {str(r[3]):5s} {r[4]:>8s}  {r[5]}")


if __name__ == "__main__":
    main()
