"""Kernel-level profile of the fused drop-ins' forward at the headline sizes (CUDA).

For each model of fused_ops.reference.WORKLOADS and TF32 on/off: the GPU time of every
kernel of one forward call (after warm-up), from torch.profiler, so that a missed target can
be explained by where the time goes.

    python3 benchmarks/profile_models.py [--only conv3d_group_norm_mean] [--tf32 on,off]
        [--backward] [--conv-padding 1]

--backward: the kernels of one forward+backward step (input and parameters requiring grad).
--conv-padding: the models' convolution padding instead of the workload's (set on their `conv`
after construction; the headline convolutions have none), e.g. to see the kernels of padded
convolutions at the headline's sizes.
"""

import argparse

import torch
from timing import require_cuda
from torch.profiler import ProfilerActivity, profile
from workloads import MODEL_CLASS, load_fused


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", default=",".join(MODEL_CLASS), help="comma list of " + ", ".join(MODEL_CLASS)
    )
    parser.add_argument("--tf32", default="on,off", help="TF32 settings: on,off")
    parser.add_argument(
        "--backward", action="store_true", help="profile a forward+backward step instead"
    )
    parser.add_argument(
        "--lib", default=None, help="path of libfused_ops.so (else fused_ops finds it)"
    )
    parser.add_argument(
        "--conv-padding",
        type=int,
        default=None,
        help="the convolution's padding, every dim (models with a `conv`)",
    )
    args = parser.parse_args()
    require_cuda("profile_models.py")
    _, fused_ops = load_fused(args.lib)
    reference = fused_ops.reference
    torch.manual_seed(0)
    for name in args.only.split(","):
        workload = reference.WORKLOADS[name]
        original = workload["model"](**workload["init"]).cuda()
        for p in original.parameters():  # random affine (default init hides broken kernels)
            torch.nn.init.normal_(p, mean=0.5, std=0.3)
        fused = getattr(fused_ops, workload["model"].__name__)(**workload["init"]).cuda()
        fused.load_state_dict(original.state_dict())
        setting = ""
        if args.conv_padding is not None:
            for model in (original, fused):
                model.conv.padding = (args.conv_padding,) * 3
            setting = f", conv padding {args.conv_padding}"
        x = torch.rand(workload["input_shape"], device="cuda", requires_grad=args.backward)
        grad_out = torch.randn_like(fused(x)) if args.backward else None

        def fused_step(x, fused=fused, grad_out=grad_out):
            fused(x).backward(grad_out)

        kind = "forward+backward step" if args.backward else "forward"
        for tf32 in args.tf32.split(","):
            torch.backends.cudnn.allow_tf32 = tf32 == "on"
            step = fused_step if args.backward else torch.no_grad()(fused)
            for _ in range(3):
                step(x)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                step(x)
                torch.cuda.synchronize()
            print(f"\n=== {name}{setting}, TF32 {tf32}: kernels of one fused {kind}")
            total = 0.0
            for event in prof.key_averages():
                us = getattr(event, "device_time_total", None)
                if us is None:
                    us = event.cuda_time_total
                if us <= 0:
                    continue
                total += us
                print(f"{us / 1000:9.3f} ms  {event.key[:110]}")
            print(f"{total / 1000:9.3f} ms  total kernel time")
        del original, fused, x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
