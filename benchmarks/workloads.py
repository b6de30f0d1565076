"""Workload definitions of the fused-ops benchmark (benchmarks/bench.py).

Holds: the four workloads (relu_group_norm, group_norm_mean, conv_transpose3d_relu_group_norm,
conv3d_group_norm_mean) with their headline, quick and CPU-sweep sizes; the implementations
and modes a row can have; the reference modules (the original models of
``fused_ops.reference`` and composites of the two norm-only ops) and the drop-ins (the
``fused_ops`` modules and ``torch.ops.fused`` for the norm-only ops); the model and input
builder (``Built``), which always randomises GroupNorm affine and conv bias (seeded) and
copies them into the drop-in; the arguments of the ``torch.ops.fused`` call a drop-in makes,
for ``fused_ops.dispatch_path``; and the bytes / FLOPs each workload must move / compute.

Nothing here imports ``fused_ops`` at import time: ``load_fused`` does, so that ``--lib``
can name the library first.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

WORKLOAD_NAMES = [
    "relu_group_norm",
    "group_norm_mean",
    "conv_transpose3d_relu_group_norm",
    "conv3d_group_norm_mean",
]
WORKLOAD_ALIASES = {
    "rgn": "relu_group_norm",
    "relu": "relu_group_norm",
    "gnm": "group_norm_mean",
    "ct": "conv_transpose3d_relu_group_norm",
    "convt": "conv_transpose3d_relu_group_norm",
    "c3": "conv3d_group_norm_mean",
    "conv3d": "conv3d_group_norm_mean",
}
# The drop-in / reference class of each conv model, in fused_ops and fused_ops.reference.
MODEL_CLASS = {
    "conv_transpose3d_relu_group_norm": "ConvTranspose3dReLUGroupNorm",
    "conv3d_group_norm_mean": "Conv3dGroupNormMean",
}

IMPLS = ["eager", "compile", "autotune", "fused"]
IMPL_LABEL = {
    "eager": "eager",
    "compile": "compile(default)",
    "autotune": "compile(max-autotune-no-cudagraphs)",
    "fused": "fused_ops",
}
COMPILE_MODE = {"compile": "default", "autotune": "max-autotune-no-cudagraphs"}
MODES = ["fwd", "fwdbwd"]
NUM_GROUPS = 8  # GroupNorm groups of the norm-only workloads

# Bytes that must move (float32) of the norm-only ops, in units of numel x 4, and which.
NORM_BYTES = {
    "relu_group_norm": {
        "fwd": (3, "x read twice, y written"),
        "fwdbwd": (8, "fwd 3; bwd: x and dy read twice, dx written"),
    },
    "group_norm_mean": {
        "fwd": (1, "x read once"),
        # dx is affine in x per group: x read once more, dx written.
        "fwdbwd": (3, "fwd 1; bwd: x read once, dx written"),
    },
}
BYTE_COUNTS = {
    op: {mode: f"{k} x numel x 4 ({what})" for mode, (k, what) in counts.items()}
    for op, counts in NORM_BYTES.items()
}
# fwd+bwd: the grad-input and grad-weight convolutions cost as much as the forward.
FLOP_COUNTS = {
    "conv_transpose3d_relu_group_norm": "fwd 2*N*Cin*Cout*k^3*Din*Hin*Win; fwdbwd 3x",
    "conv3d_group_norm_mean": "fwd 2*N*Cout*Cin*k^3*Dout*Hout*Wout; fwdbwd 3x",
}


def ct_init(cin, cout, groups=NUM_GROUPS, kernel_size=3, bias=False):
    """__init__ arguments of ConvTranspose3dReLUGroupNorm (groups: GroupNorm's)."""
    return dict(
        in_channels=cin, out_channels=cout, kernel_size=kernel_size, groups=groups, bias=bias
    )


def c3_init(cin, cout, num_groups=NUM_GROUPS, kernel_size=3):
    """__init__ arguments of Conv3dGroupNormMean."""
    return dict(in_channels=cin, out_channels=cout, kernel_size=kernel_size, num_groups=num_groups)


# Sizes: norm ops take an input shape; conv models (__init__ arguments, input shape). The
# headline conv models are fused_ops.reference.WORKLOADS' (see headline_sizes).
HEADLINE_NORM = {
    "relu_group_norm": (16, 128, 34, 34, 34),
    "group_norm_mean": (128, 24, 22, 30, 30),
}
QUICK_SIZES = {
    "relu_group_norm": (2, 16, 12, 12, 12),
    "group_norm_mean": (4, 24, 6, 8, 8),
    "conv_transpose3d_relu_group_norm": (ct_init(8, 16), (2, 8, 8, 8, 8)),
    "conv3d_group_norm_mean": (c3_init(3, 24), (4, 3, 8, 10, 10)),
}
# The CPU sweep (--device cpu without --quick): tiny to large, each run with 1 thread and
# with all threads; sized so that the whole sweep takes a few minutes on a 2-core machine.
CPU_SWEEP_SIZES = {
    "relu_group_norm": [
        (2, 64, 18, 18, 18),
        (4, 64, 24, 24, 24),
        (8, 128, 16, 16, 16),
        (8, 128, 24, 24, 24),
        (8, 128, 32, 32, 32),
    ],
    "group_norm_mean": [
        (4, 24, 10, 14, 14),
        (16, 24, 14, 18, 18),
        (8, 64, 24, 24, 24),
        (32, 24, 22, 30, 30),
        (128, 24, 22, 30, 30),
    ],
    "conv_transpose3d_relu_group_norm": [
        (ct_init(8, 16), (2, 8, 8, 8, 8)),
        (ct_init(16, 32), (2, 16, 12, 12, 12)),
        (ct_init(32, 64), (2, 32, 16, 16, 16)),
        (ct_init(64, 128), (2, 64, 16, 16, 16)),
        (ct_init(64, 128), (2, 64, 20, 20, 20)),
    ],
    "conv3d_group_norm_mean": [
        (c3_init(3, 24), (4, 3, 8, 10, 10)),
        (c3_init(3, 24), (4, 3, 16, 16, 16)),
        (c3_init(16, 32), (4, 16, 16, 16, 16)),
        (c3_init(3, 24), (16, 3, 24, 32, 32)),
        (c3_init(3, 24), (32, 3, 24, 32, 32)),
    ],
}


def load_fused(lib_arg):
    """Imports the repository's fused_ops package (which loads libfused_ops.so: --lib, else
    FUSED_OPS_LIBRARY, else the build folders); returns (info dict, the fused_ops module)."""
    if lib_arg:
        os.environ["FUSED_OPS_LIBRARY"] = os.path.abspath(lib_arg)
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    import fused_ops  # noqa: E402  (raises ImportError naming where it looked)
    import fused_ops.reference  # noqa: E402, F401

    info = {
        "source": "fused_ops package",
        "library": fused_ops.library_path,
        "has_cuda_kernels": bool(
            torch._C._dispatch_has_kernel_for_dispatch_key("fused::relu_group_norm", "CUDA")
        ),
    }
    return info, fused_ops


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def shape_label(shape):
    return "x".join(str(s) for s in shape)


def describe(op, size):
    """One line on a size of HEADLINE_NORM / QUICK_SIZES / CPU_SWEEP_SIZES."""
    if op in NORM_BYTES:
        return f"x {tuple(size)}, GroupNorm({NUM_GROUPS})"
    init, shape = size
    conv = f"{init['in_channels']}->{init['out_channels']}, k={init['kernel_size']}"
    if op == "conv_transpose3d_relu_group_norm":
        conv, groups = f"ConvTranspose3d({conv}) -> ReLU", init["groups"]
    else:
        conv, groups = f"Conv3d({conv})", init["num_groups"]
    return f"{conv} -> GroupNorm({groups}), x {tuple(shape)}"


# ---------------------------------------------------------------------------------------
# The norm-only composites, as modules holding a GroupNorm (so that every workload has the
# same shape: a module, an input, parameters).


def relu_group_norm_ref(x, num_groups, weight, bias, eps):
    return F.group_norm(F.relu(x), num_groups, weight, bias, eps)


def group_norm_mean_ref(x, num_groups, weight, bias, eps):
    return F.group_norm(x, num_groups, weight, bias, eps).mean(dim=[1, 2, 3, 4])


NORM_REFERENCE = {"relu_group_norm": relu_group_norm_ref, "group_norm_mean": group_norm_mean_ref}


class NormOp(nn.Module):
    """op(x, num_groups, weight, bias, eps) of a held GroupNorm's settings: the eager
    composite (fused=False) or torch.ops.fused.<op> (fused=True)."""

    def __init__(self, op, channels, num_groups, fused):
        super().__init__()
        self.op = op
        self.group_norm = nn.GroupNorm(num_groups, channels)
        self.fn = getattr(torch.ops.fused, op) if fused else NORM_REFERENCE[op]

    def forward(self, x):
        gn = self.group_norm
        return self.fn(x, gn.num_groups, gn.weight, gn.bias, gn.eps)


def fused_call(module, x):
    """(op name, args) of the torch.ops.fused call that module(x) makes, with the arguments
    built as fused_ops/modules.py builds them: for fused_ops.dispatch_path."""
    gn = module.group_norm
    norm = (gn.num_groups, gn.weight, gn.bias, gn.eps)
    if isinstance(module, NormOp):
        return module.op, (x,) + norm
    if hasattr(module, "conv_transpose"):
        c = module.conv_transpose
        conv = (c.weight, c.bias, c.stride, c.padding, c.output_padding, c.groups, c.dilation)
        return "conv_transpose3d_relu_group_norm", (x,) + conv + norm
    c = module.conv
    conv = (c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)
    return "conv3d_group_norm_mean", (x,) + conv + norm


# ---------------------------------------------------------------------------------------
# Workload specs


def conv_flops(op, init, input_shape):
    """FLOPs of the forward convolution (2 per multiply-add)."""
    k = init["kernel_size"]
    n, cin, *spatial = input_shape
    if op == "conv3d_group_norm_mean":  # counted on the output grid
        spatial = [s - k + 1 for s in spatial]
    return 2 * n * cin * init["out_channels"] * k**3 * numel(spatial)


def make_spec(fo, op, size):
    """The spec of one workload at one size: kind, op, input shape and distribution,
    make_ref / make_fused (module builders), bytes or flops per mode, init (conv models).
    fo: the fused_ops module; size: an input shape (norm ops) or (init, input shape)."""
    if op in NORM_BYTES:
        shape = tuple(size)
        return dict(
            kind="norm",
            op=op,
            input_shape=shape,
            input_dist="randn",
            init=None,
            make_ref=lambda: NormOp(op, shape[1], NUM_GROUPS, fused=False),
            make_fused=lambda: NormOp(op, shape[1], NUM_GROUPS, fused=True),
            bytes={m: k * numel(shape) * 4 for m, (k, _) in NORM_BYTES[op].items()},
            flops=None,
        )
    init, shape = dict(size[0]), tuple(size[1])
    ref_cls = getattr(fo.reference, MODEL_CLASS[op])
    fused_cls = getattr(fo, MODEL_CLASS[op])
    flops = conv_flops(op, init, shape)
    return dict(
        kind="model",
        op=op,
        input_shape=shape,
        input_dist="rand",
        init=init,
        make_ref=lambda: ref_cls(**init),
        make_fused=lambda: fused_cls(**init),
        bytes=None,
        flops={"fwd": flops, "fwdbwd": 3 * flops},
    )


def headline_sizes(fo):
    sizes = dict(HEADLINE_NORM)
    for op in MODEL_CLASS:
        w = fo.reference.WORKLOADS[op]
        sizes[op] = (w["init"], w["input_shape"])
    return sizes


def make_workloads(fo, quick, conv_bias=False):
    """name -> spec at the headline sizes (quick: tiny ones); conv_bias: the conv models that
    take a ``bias`` argument (ConvTranspose3dReLUGroupNorm) built with one."""
    sizes = dict(QUICK_SIZES if quick else headline_sizes(fo))
    if conv_bias:
        for op, size in sizes.items():
            if op in MODEL_CLASS and "bias" in size[0]:
                sizes[op] = (dict(size[0], bias=True), size[1])
    return {op: make_spec(fo, op, sizes[op]) for op in WORKLOAD_NAMES}


def sweep_specs(fo, names):
    """The CPU sweep's specs of the named workloads, in order."""
    return [make_spec(fo, op, size) for op in names for size in CPU_SWEEP_SIZES[op]]


def spec_json(spec):
    """What results.json says of a spec."""
    out = dict(
        kind=spec["kind"],
        input_shape=list(spec["input_shape"]),
        bytes=spec["bytes"],
        flops=spec["flops"],
    )
    if spec["init"]:
        out["init"] = spec["init"]
    return out


# ---------------------------------------------------------------------------------------
# Built modules and inputs


def randomise_(module, seed):
    """Random GroupNorm affine and conv bias (GroupNorm's default init hides bugs)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.GroupNorm):
                m.weight.copy_(1.0 + 0.5 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.5 * torch.randn(m.bias.shape, generator=g))
            elif isinstance(m, (nn.Conv3d, nn.ConvTranspose3d)) and m.bias is not None:
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))


class Built:
    """Modules, inputs and grad-output of one workload on the device (rebuilt identically)."""

    def __init__(self, name, spec, device, n_inputs, seed=0):
        self.name, self.spec, self.device = name, spec, device
        torch.manual_seed(seed)
        self.ref = spec["make_ref"]()
        randomise_(self.ref, seed + 1)
        self.ref = self.ref.to(device)
        self.fused_error = None
        try:
            self.fused = spec["make_fused"]()
            self.fused.load_state_dict(self.ref.state_dict())
            self.fused = self.fused.to(device)
        except Exception as e:  # noqa: BLE001
            self.fused = None
            self.fused_error = f"{type(e).__name__}: {e}"
        self.inputs = []
        for i in range(n_inputs):
            gen = torch.Generator(device=device).manual_seed(seed + 100 + i)
            fn = torch.randn if spec["input_dist"] == "randn" else torch.rand
            self.inputs.append(fn(spec["input_shape"], device=device, generator=gen))
        with torch.no_grad():
            out_shape = self.ref(self.inputs[0]).shape
        gen = torch.Generator(device=device).manual_seed(seed + 7)
        self.grad_out = torch.randn(out_shape, device=device, generator=gen)
        self.out_shape = tuple(out_shape)


def transposed_as_forward_weight(weight, groups):
    """The weight of the forward convolution (padding k-1) that computes a stride-1
    ConvTranspose3d of `weight` (C_in, C_out/groups, k...): taps flipped, channels swapped."""
    c_in, c_out_g = weight.shape[:2]
    k = weight.shape[2:]
    return (
        weight.reshape(groups, c_in // groups, c_out_g, *k)
        .transpose(1, 2)
        .reshape(groups * c_out_g, c_in // groups, *k)
        .flip(2, 3, 4)
    )


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(
        description=__doc__ + "\nRun as a script: lists the quick and CPU-sweep sizes.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args(argv)
    tables = [
        ("headline (the conv models': fused_ops.reference.WORKLOADS)", HEADLINE_NORM),
        ("quick", QUICK_SIZES),
        ("CPU sweep", CPU_SWEEP_SIZES),
    ]
    for title, table in tables:
        print(f"{title}:")
        for op, sizes in table.items():
            for size in sizes if title == "CPU sweep" else [sizes]:
                print(f"  {op:34s} {describe(op, size)}")


if __name__ == "__main__":
    main()
