"""Tests of the four public operators torch.ops.fused.*, against independent float64
PyTorch composites (conftest.REFERENCES), on CPU and (where available) CUDA."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import fused_ops
from helpers import (
    OPS,
    REFERENCES,
    REPO_DIR,
    assert_close_scaled,
    assert_close_to_ref,
    assert_same_run,
    check_against_reference,
    conv3d_args,
    conv_transpose_args,
    detach_args,
    fused_op,
    max_abs_err,
    norm_args,
    reference,
    requires_cuda,
    tensor_arg_indices,
)

NORM_OPS = ["relu_group_norm", "group_norm_mean"]
CONV_OPS = ["conv_transpose3d_relu_group_norm", "conv3d_group_norm_mean"]

# ---------------------------------------------------------------------------------------
# Argument sets. Each is (builder, keyword arguments); builder(**kw, dtype=, device=,
# requires_grad=) returns the operator's positional arguments.

NORM_CASES = {
    "5d_G3": dict(shape=(2, 6, 5, 7, 3), num_groups=3),
    "3d_Cg1_batch1": dict(shape=(1, 4, 9), num_groups=4),
    "4d_no_affine": dict(shape=(3, 8, 5, 6), num_groups=2, affine=False),
    "5d_G1_weight_only": dict(shape=(2, 6, 3, 5, 7), num_groups=1, weight=True, bias=False),
    "4d_bias_only_eps": dict(shape=(2, 6, 3, 5), num_groups=2, weight=False, bias=True, eps=1e-3),
    "2d_HxW1": dict(shape=(5, 12), num_groups=2),
    "5d_odd_spatial": dict(shape=(2, 12, 7, 5, 11), num_groups=4),
}

CONV_TRANSPOSE_CASES = {
    "headline_like": dict(
        input_shape=(2, 4, 5, 6, 7), out_channels=8, kernel_size=3, num_groups=2, conv_bias=False
    ),
    "stride2_pad_outpad_groups2": dict(
        input_shape=(1, 4, 3, 4, 5),
        out_channels=6,
        kernel_size=(3, 2, 3),
        num_groups=3,
        stride=2,
        padding=1,
        output_padding=1,
        groups=2,
    ),
    "dilation2_Cg1_no_affine": dict(
        input_shape=(2, 2, 4, 3, 5),
        out_channels=4,
        kernel_size=2,
        num_groups=4,
        stride=(1, 2, 1),
        padding=(1, 0, 2),
        output_padding=(0, 1, 0),
        dilation=2,
        gn_affine=False,
    ),
    "stride3_outpad2_no_bias": dict(
        input_shape=(1, 3, 2, 3, 2),
        out_channels=6,
        kernel_size=3,
        num_groups=2,
        stride=3,
        padding=(0, 1, 2),
        output_padding=2,
        conv_bias=False,
    ),
    "kernel1_batch3": dict(
        input_shape=(3, 5, 3, 5, 6), out_channels=10, kernel_size=1, num_groups=5
    ),
}

CONV3D_CASES = {
    "headline_like": dict(
        input_shape=(2, 3, 6, 7, 8), out_channels=12, kernel_size=3, num_groups=4
    ),
    "stride2_pad_dilation2_groups2": dict(
        input_shape=(1, 4, 7, 6, 9),
        out_channels=6,
        kernel_size=3,
        num_groups=3,
        stride=2,
        padding=1,
        dilation=2,
        groups=2,
    ),
    "no_bias_no_affine_Cg1": dict(
        input_shape=(3, 2, 5, 5, 6),
        out_channels=4,
        kernel_size=(1, 2, 3),
        num_groups=4,
        stride=(1, 2, 3),
        padding=(0, 1, 1),
        conv_bias=False,
        gn_affine=False,
    ),
    "pad_only_batch1": dict(
        input_shape=(1, 3, 3, 5, 7),
        out_channels=6,
        kernel_size=(3, 3, 2),
        num_groups=2,
        padding=(2, 0, 1),
    ),
    "groups3_bias_no_affine": dict(
        input_shape=(2, 6, 5, 6, 5),
        out_channels=9,
        kernel_size=2,
        num_groups=3,
        groups=3,
        stride=(2, 1, 1),
        gn_affine=False,
    ),
}


def _norm_builder(**kw):
    kw = dict(kw)
    shape = kw.pop("shape")
    num_groups = kw.pop("num_groups")
    return norm_args(shape, num_groups, **kw)


def _conv_transpose_builder(**kw):
    kw = dict(kw)
    return conv_transpose_args(
        kw.pop("input_shape"),
        kw.pop("out_channels"),
        kw.pop("kernel_size"),
        kw.pop("num_groups"),
        **kw,
    )


def _conv3d_builder(**kw):
    kw = dict(kw)
    return conv3d_args(
        kw.pop("input_shape"),
        kw.pop("out_channels"),
        kw.pop("kernel_size"),
        kw.pop("num_groups"),
        **kw,
    )


BUILDERS = {
    "relu_group_norm": (_norm_builder, NORM_CASES),
    "group_norm_mean": (_norm_builder, NORM_CASES),
    "conv_transpose3d_relu_group_norm": (_conv_transpose_builder, CONV_TRANSPOSE_CASES),
    "conv3d_group_norm_mean": (_conv3d_builder, CONV3D_CASES),
}


def make_args(op, case, dtype=torch.float32, device="cpu", requires_grad=True):
    builder, cases = BUILDERS[op]
    return builder(**cases[case], dtype=dtype, device=device, requires_grad=requires_grad)


ALL_CASES = [pytest.param(op, case, id=f"{op}-{case}") for op in OPS for case in BUILDERS[op][1]]
# One representative argument set per operator (the first), for the costlier tests.
FIRST_CASES = [pytest.param(op, next(iter(BUILDERS[op][1])), id=op) for op in OPS]


# ---------------------------------------------------------------------------------------
# opcheck (schema, autograd registration, FakeTensor/Meta, AOT dispatch with dynamic shapes)

OPCHECK_CASES = [
    pytest.param(op, case, rg, id=f"{op}-{case}-{'grad' if rg else 'nograd'}")
    for op, cases in [
        ("relu_group_norm", ["5d_G3", "4d_no_affine", "5d_G1_weight_only", "2d_HxW1"]),
        ("group_norm_mean", ["5d_G3", "4d_no_affine", "4d_bias_only_eps", "3d_Cg1_batch1"]),
        (
            "conv_transpose3d_relu_group_norm",
            ["headline_like", "stride2_pad_outpad_groups2", "dilation2_Cg1_no_affine"],
        ),
        (
            "conv3d_group_norm_mean",
            ["headline_like", "stride2_pad_dilation2_groups2", "no_bias_no_affine_Cg1"],
        ),
    ]
    for case in cases
    for rg in (True, False)
]


@pytest.mark.parametrize("op,case,requires_grad", OPCHECK_CASES)
def test_opcheck(device, op, case, requires_grad):
    args = make_args(op, case, device=device, requires_grad=requires_grad)
    torch.library.opcheck(fused_op(op), args, **OPCHECK_TOL[device])


# opcheck compares eager and AOT-dispatched gradients; on CUDA, backward may reduce in a
# nondeterministic order, and some gradients (e.g. the conv bias's when GroupNorm has one
# channel per group) are sums of cancelling terms: absolute noise ~1e-5 there.
OPCHECK_TOL = {"cpu": {}, "cuda": dict(rtol=1e-4, atol=1e-4)}


@pytest.mark.tf32_off
@pytest.mark.parametrize("op", OPS)
def test_opcheck_partial_requires_grad(device, op):
    """Only some tensor arguments require grad (the autograd kernel's input mask)."""
    case = next(iter(BUILDERS[op][1]))
    args = make_args(op, case, device=device, requires_grad=False)
    idx = tensor_arg_indices(args)
    args[idx[-1]].requires_grad_(True)  # the last one (bias) only
    torch.library.opcheck(fused_op(op), args, **OPCHECK_TOL[device])
    check_against_reference(op, args)


# ---------------------------------------------------------------------------------------
# Values: forward and backward against the float64 composite reference


@pytest.mark.tf32_off
@pytest.mark.parametrize("op,case", ALL_CASES)
def test_float32_vs_reference(device, op, case):
    check_against_reference(op, make_args(op, case, device=device))


@pytest.mark.parametrize("op,case", ALL_CASES)
def test_float64_vs_reference(device, op, case):
    check_against_reference(op, make_args(op, case, dtype=torch.float64, device=device))


@pytest.mark.tf32_off
@pytest.mark.parametrize("op,case", ALL_CASES)
def test_no_grad_forward(device, op, case):
    """Without autograd (no input requires grad, and under no_grad / inference_mode)."""
    args = make_args(op, case, device=device, requires_grad=False)
    out = check_against_reference(op, args, backward=False)
    assert not out.requires_grad
    grad_args = detach_args(args, requires_grad=True)
    with torch.no_grad():
        out2 = fused_op(op)(*grad_args)
    assert not out2.requires_grad
    with torch.inference_mode():
        out3 = fused_op(op)(*args)
    assert_same_run(out2, out, what="no_grad")
    assert_same_run(out3, out, what="inference_mode")


def test_output_properties(device):
    """Output dtype/shape/device and contiguity, and that grad_fn is set."""
    for op in OPS:
        args = make_args(op, next(iter(BUILDERS[op][1])), device=device)
        out = fused_op(op)(*args)
        ref, _ = reference(op, args)
        assert out.shape == ref.shape
        assert out.dtype == args[0].dtype
        assert out.device == args[0].device
        assert out.is_contiguous()
        assert out.grad_fn is not None


# ---------------------------------------------------------------------------------------
# gradcheck in float64 (small sizes)

GRADCHECK_ARGS = {
    "relu_group_norm": lambda **kw: norm_args((2, 4, 3, 2), 2, **kw),
    "group_norm_mean": lambda **kw: norm_args((2, 6, 2, 3), 3, **kw),
    "conv_transpose3d_relu_group_norm": lambda **kw: conv_transpose_args(
        (1, 2, 2, 3, 2),
        4,
        2,
        2,
        stride=(2, 1, 2),
        padding=(0, 1, 0),
        output_padding=(1, 0, 0),
        **kw,
    ),
    "conv3d_group_norm_mean": lambda **kw: conv3d_args(
        (2, 2, 4, 3, 4), 4, 2, 2, stride=(2, 1, 1), padding=1, dilation=(1, 2, 1), **kw
    ),
}


@pytest.mark.parametrize("op", OPS)
def test_gradcheck(device, op):
    args = GRADCHECK_ARGS[op](dtype=torch.float64, device=device)
    assert torch.autograd.gradcheck(
        fused_op(op), args, eps=1e-6, atol=1e-6, rtol=1e-5, nondet_tol=NONDET_TOL[device]
    )


# Backward on CUDA may reduce in a nondeterministic order (cuDNN's convolution backward and
# the kernels' own reductions) unless torch.use_deterministic_algorithms(True).
NONDET_TOL = {"cpu": 0.0, "cuda": 1e-12}


@pytest.mark.parametrize("op", ["conv_transpose3d_relu_group_norm", "conv3d_group_norm_mean"])
def test_gradcheck_conv_groups_no_affine(device, op):
    if op == "conv_transpose3d_relu_group_norm":
        args = conv_transpose_args(
            (2, 4, 2, 2, 3),
            4,
            (2, 1, 2),
            4,
            groups=2,
            dilation=2,
            gn_affine=False,
            dtype=torch.float64,
            device=device,
        )
    else:
        args = conv3d_args(
            (1, 4, 3, 4, 3), 6, 2, 3, groups=2, conv_bias=False, dtype=torch.float64, device=device
        )
    assert torch.autograd.gradcheck(
        fused_op(op), args, eps=1e-6, atol=1e-6, rtol=1e-5, nondet_tol=NONDET_TOL[device]
    )


# ---------------------------------------------------------------------------------------
# Low precision inputs (float16 / bfloat16): compared to the float64 reference of the same
# (rounded) input values, with looser tolerances.

LOW_PRECISION_TOL = {
    # (rtol, atol) for the norm operators, and for the conv operators (whose convolution
    # itself rounds to the low precision before the normalisation).
    torch.float16: ((1e-2, 1e-2), (2e-2, 2e-2)),
    torch.bfloat16: ((4e-2, 4e-2), (8e-2, 8e-2)),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["half", "bf16"])
@pytest.mark.parametrize("op,case", FIRST_CASES)
def test_low_precision(device, op, case, dtype):
    args = make_args(op, case, dtype=dtype, device=device)
    rtol, atol = LOW_PRECISION_TOL[dtype][op in CONV_OPS]
    # For the conv operators the reference takes the convolution's output from ATen's
    # convolution in `dtype` (as eager PyTorch in that dtype does; the fused operators use
    # that same convolution): a float64 convolution would flip ReLU's mask for outputs near
    # 0, which moves grad_input by O(1) (eager PyTorch in float16 is as far off as the fused
    # operator then). The statistics, normalisation and gradients are still float64.
    check_against_reference(op, args, rtol=rtol, atol=atol, low_precision_conv=dtype)


# ---------------------------------------------------------------------------------------
# The stride-1 transposed convolution computed as a forward one (ops/conv3d.cpp), used on
# CUDA when TF32 is allowed: conv groups, dilation and padding within the kernel's reach.
# TF32 rounds the convolution's products to ~1e-3, so only the forward pass is compared
# (a float64 reference flips ReLU's mask near 0, which moves gradients by O(1)).

TRANSPOSED_AS_FORWARD_CASES = {
    "headline_like": dict(
        input_shape=(2, 8, 5, 6, 7), out_channels=16, kernel_size=3, num_groups=4
    ),
    "groups2_dilation_padding": dict(
        input_shape=(2, 4, 5, 6, 7),
        out_channels=6,
        kernel_size=(3, 2, 3),
        num_groups=3,
        padding=(1, 0, 2),
        groups=2,
        dilation=(2, 1, 1),
    ),
}


@requires_cuda
@pytest.mark.parametrize("case", list(TRANSPOSED_AS_FORWARD_CASES))
def test_transposed_conv_as_forward_tf32(case):
    args = conv_transpose_args(
        **TRANSPOSED_AS_FORWARD_CASES[case], device="cuda", requires_grad=False
    )
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        check_against_reference(
            "conv_transpose3d_relu_group_norm", args, backward=False, rtol=2e-2, atol=2e-2
        )
    finally:
        torch.backends.cudnn.allow_tf32 = previous


# ---------------------------------------------------------------------------------------
# Memory layouts: non-contiguous and channels_last_3d inputs


def _noncontiguous(t: torch.Tensor) -> torch.Tensor:
    """A non-contiguous tensor with t's values (every other element of a wider tensor)."""
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    wide[..., ::2] = t.detach()
    out = wide[..., ::2]
    assert not out.is_contiguous() or out.numel() <= 1
    return out.requires_grad_(t.requires_grad)


@pytest.mark.tf32_off
@pytest.mark.parametrize("op,case", FIRST_CASES)
def test_noncontiguous_inputs(device, op, case):
    args = make_args(op, case, device=device)
    nc = [_noncontiguous(a) if isinstance(a, torch.Tensor) else a for a in args]
    # And a transposed view of the input (spatial dims swapped back and forth).
    check_against_reference(op, nc)
    x = args[0].detach()
    xt = x.transpose(-1, -2).contiguous().transpose(-1, -2).requires_grad_(True)
    assert not xt.is_contiguous()
    check_against_reference(op, [xt] + nc[1:])


@pytest.mark.tf32_off
@pytest.mark.parametrize(
    "op,case",
    [
        pytest.param("relu_group_norm", "5d_G3", id="relu_group_norm"),
        pytest.param("group_norm_mean", "5d_odd_spatial", id="group_norm_mean"),
        pytest.param(
            "conv_transpose3d_relu_group_norm",
            "headline_like",
            id="conv_transpose3d_relu_group_norm",
        ),
        pytest.param("conv3d_group_norm_mean", "headline_like", id="conv3d_group_norm_mean"),
    ],
)
def test_channels_last_3d(device, op, case):
    args = make_args(op, case, device=device)
    cl = list(args)
    cl[0] = args[0].detach().to(memory_format=torch.channels_last_3d).requires_grad_(True)
    assert not cl[0].is_contiguous()
    if op in CONV_OPS:
        cl[1] = args[1].detach().to(memory_format=torch.channels_last_3d).requires_grad_(True)
    out = check_against_reference(op, cl)
    # Same values as with contiguous inputs: to float32 rounding for the GroupNorm operators;
    # the convolutions run another algorithm for channels_last inputs, whose rounding (~1e-6
    # of the convolution's output) GroupNorm multiplies by rstd * weight.
    if op in CONV_OPS:
        assert_close_scaled(out, fused_op(op)(*args), 1e-5, what=f"{op} channels_last")
    else:
        torch.testing.assert_close(out, fused_op(op)(*args), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------
# Empty batch


EMPTY_ARGS = {
    "relu_group_norm": lambda **kw: norm_args((0, 6, 3, 4), 3, **kw),
    "group_norm_mean": lambda **kw: norm_args((0, 6, 3, 4, 2), 2, **kw),
    "conv_transpose3d_relu_group_norm": lambda **kw: conv_transpose_args(
        (0, 4, 3, 4, 5), 6, 3, 3, stride=2, padding=1, output_padding=1, **kw
    ),
    "conv3d_group_norm_mean": lambda **kw: conv3d_args((0, 3, 5, 6, 7), 6, 3, 2, **kw),
}


@pytest.mark.parametrize("op", OPS)
def test_empty_batch(device, op):
    args = EMPTY_ARGS[op](device=device)
    out = fused_op(op)(*args)
    ref, dargs = reference(op, args)
    assert out.shape == ref.shape and out.numel() == 0
    grads = torch.autograd.grad(
        out, [a for a in args if isinstance(a, torch.Tensor)], torch.ones_like(out)
    )
    ref_grads = torch.autograd.grad(
        ref,
        [a for a in dargs if isinstance(a, torch.Tensor)],
        torch.ones_like(ref),
        allow_unused=True,
    )
    for g, rg, a in zip(grads, ref_grads, [a for a in args if isinstance(a, torch.Tensor)]):
        assert g.shape == a.shape
        if rg is None:
            rg = torch.zeros_like(a, dtype=torch.float64)
        assert_close_to_ref(g, rg, what=f"{op} empty-batch grad")


# ---------------------------------------------------------------------------------------
# Bad arguments raise RuntimeError naming the offending argument


def _bad_cases():
    cases = []

    def add(op, name, build, match):
        cases.append(pytest.param(op, build, match, id=f"{op}-{name}"))

    for op in NORM_OPS:
        add(
            op,
            "rank1",
            lambda d: _replace(norm_args((2, 6, 4), 3, device=d), 0, torch.randn(6, device=d)),
            r"input",
        )
        add(op, "C_not_divisible", lambda d: norm_args((2, 6, 4), 4, device=d), r"num_groups")
        add(op, "num_groups0", lambda d: norm_args((2, 6, 4), 0, device=d), r"num_groups")
        add(
            op,
            "weight_shape",
            lambda d: _replace(norm_args((2, 6, 4), 3, device=d), 2, torch.ones(3, device=d)),
            r"weight",
        )
        add(
            op,
            "bias_shape",
            lambda d: _replace(norm_args((2, 6, 4), 3, device=d), 3, torch.ones(6, 1, device=d)),
            r"bias",
        )
        add(
            op,
            "weight_dtype",
            lambda d: _replace(
                norm_args((2, 6, 4), 3, device=d), 2, torch.ones(6, dtype=torch.float64, device=d)
            ),
            r"weight.*dtype",
        )
        add(
            op,
            "integer_input",
            lambda d: _replace(
                norm_args((2, 6, 4), 3, affine=False, device=d, requires_grad=False),
                0,
                torch.ones(2, 6, 4, dtype=torch.int32, device=d),
            ),
            r"input.*floating",
        )
        add(
            op,
            "negative_eps",
            lambda d: _replace(norm_args((2, 6, 4), 3, device=d), 4, -1.0),
            r"eps",
        )
        add(op, "empty_spatial", lambda d: norm_args((2, 6, 0), 3, device=d), r"spatial")
        add(
            op,
            "weight_on_meta",
            lambda d: _replace(norm_args((2, 6, 4), 3, device=d), 2, torch.ones(6, device="meta")),
            r"weight.*device",
        )

    ct = "conv_transpose3d_relu_group_norm"
    base_ct = lambda d, **kw: conv_transpose_args((1, 4, 3, 3, 3), 6, 3, 3, device=d, **kw)
    add(
        ct,
        "input_rank4",
        lambda d: _replace(base_ct(d), 0, torch.randn(4, 3, 3, 3, device=d)),
        r"input",
    )
    add(
        ct,
        "weight_rank4",
        lambda d: _replace(base_ct(d), 1, torch.randn(4, 6, 3, 3, device=d)),
        r"weight",
    )
    add(
        ct,
        "weight_Cin",
        lambda d: _replace(base_ct(d), 1, torch.randn(5, 6, 3, 3, 3, device=d)),
        r"weight",
    )
    add(ct, "negative_padding", lambda d: _replace(base_ct(d), 4, [0, -1, 0]), r"padding")
    add(ct, "stride0", lambda d: _replace(base_ct(d), 3, [1, 0, 1]), r"stride")
    add(ct, "dilation0", lambda d: _replace(base_ct(d), 7, [0, 1, 1]), r"dilation")
    add(
        ct,
        "output_padding_too_large",
        lambda d: base_ct(d, stride=2, output_padding=2),
        r"output_padding",
    )
    add(ct, "stride_two_entries", lambda d: _replace(base_ct(d), 3, [1, 1]), r"stride")
    add(ct, "groups_not_dividing_Cin", lambda d: _replace(base_ct(d), 6, 3), r"groups")
    add(ct, "num_groups_not_dividing_Cout", lambda d: _replace(base_ct(d), 8, 4), r"num_groups")
    add(
        ct,
        "gn_weight_shape",
        lambda d: _replace(base_ct(d), 9, torch.ones(4, device=d)),
        r"gn_weight",
    )
    add(
        ct,
        "gn_bias_dtype",
        lambda d: _replace(base_ct(d), 10, torch.ones(6, dtype=torch.float64, device=d)),
        r"gn_bias.*dtype",
    )
    add(
        ct,
        "conv_bias_shape",
        lambda d: _replace(base_ct(d), 2, torch.ones(4, device=d)),
        r"conv_bias",
    )
    add(
        ct,
        "weight_dtype",
        lambda d: _replace(
            base_ct(d), 1, torch.randn(4, 6, 3, 3, 3, dtype=torch.float64, device=d)
        ),
        r"weight.*dtype",
    )
    add(
        ct,
        "integer_input",
        lambda d: _replace(base_ct(d), 0, torch.ones(1, 4, 3, 3, 3, dtype=torch.int64, device=d)),
        r"input.*floating",
    )
    add(
        ct,
        "input_meta_weight_cpu",
        lambda d: _replace(base_ct("cpu"), 0, torch.empty(1, 4, 3, 3, 3, device="meta")),
        r"weight.*device",
    )
    add(
        ct,
        "input_cpu_weight_meta",
        lambda d: _replace(base_ct("cpu"), 1, torch.empty(4, 6, 3, 3, 3, device="meta")),
        r"weight.*device",
    )

    cv = "conv3d_group_norm_mean"
    base_cv = lambda d, **kw: conv3d_args((2, 4, 5, 5, 5), 6, 3, 3, device=d, **kw)
    add(
        cv,
        "input_rank6",
        lambda d: _replace(base_cv(d), 0, torch.randn(2, 4, 5, 5, 5, 1, device=d)),
        r"input",
    )
    add(
        cv,
        "weight_Cin",
        lambda d: _replace(base_cv(d), 1, torch.randn(6, 3, 3, 3, 3, device=d)),
        r"weight",
    )
    add(cv, "negative_padding", lambda d: _replace(base_cv(d), 4, [-1, 0, 0]), r"padding")
    add(cv, "stride0", lambda d: _replace(base_cv(d), 3, [1, 1, 0]), r"stride")
    add(cv, "dilation0", lambda d: _replace(base_cv(d), 5, [1, 0, 1]), r"dilation")
    add(
        cv,
        "input_smaller_than_kernel",
        lambda d: _replace(base_cv(d), 0, torch.randn(2, 4, 2, 5, 5, device=d)),
        r"kernel",
    )
    add(
        cv,
        "groups_not_dividing_Cout",
        lambda d: _replace(base_cv(d, groups=2), 1, torch.randn(5, 2, 3, 3, 3, device=d)),
        r"groups",
    )
    add(cv, "num_groups_not_dividing_Cout", lambda d: _replace(base_cv(d), 7, 4), r"num_groups")
    add(
        cv,
        "gn_weight_shape",
        lambda d: _replace(base_cv(d), 8, torch.ones(6, 1, device=d)),
        r"gn_weight",
    )
    add(
        cv,
        "conv_bias_dtype",
        lambda d: _replace(base_cv(d), 2, torch.ones(6, dtype=torch.float16, device=d)),
        r"conv_bias.*dtype",
    )
    add(
        cv,
        "integer_weight",
        lambda d: _replace(
            base_cv(d, requires_grad=False),
            1,
            torch.ones(6, 4, 3, 3, 3, dtype=torch.int32, device=d),
        ),
        r"weight.*dtype",
    )
    add(
        cv,
        "input_meta_conv_bias_cpu",
        lambda d: _replace(
            _replace(
                base_cv("cpu", requires_grad=False), 0, torch.empty(2, 4, 5, 5, 5, device="meta")
            ),
            1,
            torch.empty(6, 4, 3, 3, 3, device="meta"),
        ),
        r"conv_bias.*device",
    )
    return cases


def _replace(args, i, value):
    args = list(args)
    args[i] = value
    return args


@pytest.mark.parametrize("op,build,match", _bad_cases())
def test_bad_arguments(device, op, build, match):
    args = build(device)
    with pytest.raises(RuntimeError, match=match):
        fused_op(op)(*args)
    # The same check rejects the arguments without autograd too.
    with torch.no_grad(), pytest.raises(RuntimeError, match=match):
        fused_op(op)(*args)


@pytest.mark.parametrize("op", OPS)
def test_bad_arguments_cross_device(device, op):
    """A parameter on another real device than the input (CPU vs CUDA; meta vs CPU)."""
    other = "meta" if device == "cpu" else "cpu"
    args = make_args(op, next(iter(BUILDERS[op][1])), device=device)
    last = tensor_arg_indices(args)[-1]  # bias / gn_bias
    args[last] = args[last].detach().to(other)
    with pytest.raises(RuntimeError, match=r"bias.*device"):
        fused_op(op)(*args)


# ---------------------------------------------------------------------------------------
# Numerics: a large group with a mean offset (a naive one-pass variance loses it)


@pytest.mark.parametrize("op", NORM_OPS)
def test_large_group_accuracy(device, op):
    """Output and gradients at 1e-5, except group_norm_mean's grad_weight (see below)."""
    # 2 groups of 4 channels x 48*48*72 = 663,552 elements each, mean 5, std 1.
    shape = (2, 8, 48, 48, 72)
    x = (5.0 + torch.randn(shape, dtype=torch.float64)).float().to(device).requires_grad_(True)
    w = (1.0 + 0.5 * torch.randn(8, dtype=torch.float64)).float().to(device).requires_grad_(True)
    b = (0.5 * torch.randn(8, dtype=torch.float64)).float().to(device).requires_grad_(True)
    # group_norm_mean's grad_weight[c] is proportional to (mean of channel c - mean of its
    # group) * rstd, a difference of two numbers near 5 that is ~2.5e-3 here: float32
    # statistics lose ~1e-4 of it (PyTorch's float32 composite loses ~4e-1 of it).
    grad_tols = {2: (3e-4, 3e-4)} if op == "group_norm_mean" else None
    check_against_reference(op, [x, 2, w, b, 1e-5], grad_tols=grad_tols)


# ---------------------------------------------------------------------------------------
# Numerics: groups of equal or nearly equal values (variance 0 or far below eps)


def _degenerate_groups_input(device):
    """(2, 8, 4, 5) float32 with G = 4 (groups of 2 channels x 20 values). Sample 0: a
    constant group, one that ReLU makes all zero, one nearly constant (0.37 + 1e-6 noise) and
    an ordinary one, all of small magnitude (where eager's float32 CPU kernel is accurate too).
    Sample 1: constant 0, constant 1.7, nearly constant 3 + 1e-5 noise, and an ordinary group
    with an offset; there eager's folded x * scale + shift is off by up to ~1e-4."""
    x = torch.empty(2, 8, 4, 5, dtype=torch.float64)

    def noise(std):
        return std * torch.randn(2, 4, 5, dtype=torch.float64)

    x[0, 0:2] = 0.37
    x[0, 2:4] = -1.0 - torch.rand(2, 4, 5, dtype=torch.float64)
    x[0, 4:6] = 0.37 + noise(1e-6)
    x[0, 6:8] = noise(1.0)
    x[1, 0:2] = 0.0
    x[1, 2:4] = 1.7
    x[1, 4:6] = 3.0 + noise(1e-5)
    x[1, 6:8] = 2.0 + noise(1.0)
    return x.float().to(device)


@pytest.mark.parametrize("op", NORM_OPS)
def test_degenerate_groups(device, op):
    """Constant groups, groups that are all zero after ReLU, nearly constant groups: the
    output within 1e-5 of float64 and of eager (where eager's float32 kernel is accurate; elsewhere
    at least as accurate as eager), a constant group's relu_group_norm output exactly the bias
    (the kernels normalise as (x - mean) * scale + bias: x * scale + (bias - mean * scale)
    leaves ~ulp(x * rstd) instead); every gradient within 2x eager's error of float64 (and the
    input and bias gradients within 1e-5 of it)."""
    x = _degenerate_groups_input(device).requires_grad_(True)
    w = (1.0 + 0.5 * torch.randn(8, dtype=torch.float64)).float().to(device).requires_grad_(True)
    b = (0.5 * torch.randn(8, dtype=torch.float64)).float().to(device).requires_grad_(True)
    args = [x, 4, w, b, 1e-5]
    out = fused_op(op)(*args)
    ref, dargs = reference(op, args)
    eager_args = detach_args(args, requires_grad=True)
    eager = REFERENCES[op](*eager_args)
    torch.testing.assert_close(out.detach().double(), ref.detach(), atol=1e-5, rtol=1e-5)
    # Close to eager where eager is float32-accurate (on the CPU all of sample 0; CUDA's eager
    # kernel folds the affine and is off by ~2e-5 on the constant group), and elsewhere at
    # least as accurate as eager.
    eager_accurate = (eager.detach().double() - ref).abs() <= 1e-5 * (1 + ref.abs())
    assert eager_accurate.any()
    torch.testing.assert_close(
        out.detach()[eager_accurate], eager.detach()[eager_accurate], atol=1e-5, rtol=1e-5
    )
    assert max_abs_err(out, ref) <= max_abs_err(eager, ref) + 1e-7
    if op == "relu_group_norm":
        bias = b.detach().view(1, 8, 1, 1).expand_as(out)
        for n, channels in [(0, slice(0, 4)), (1, slice(0, 4))]:
            assert torch.equal(out[n, channels].detach(), bias[n, channels])

    grad_out = torch.randn(out.shape, dtype=torch.float64).float().to(device)
    leaves = [0, 2, 3]
    grads = torch.autograd.grad(out, [args[i] for i in leaves], grad_out)
    eager_grads = torch.autograd.grad(eager, [eager_args[i] for i in leaves], grad_out)
    ref_grads = torch.autograd.grad(ref, [dargs[i] for i in leaves], grad_out.double())
    for i, g, eg, rg in zip(leaves, grads, eager_grads, ref_grads):
        scale = max(rg.abs().max().item(), 1e-3)
        what = f"{op} grad of argument {i}"
        assert max_abs_err(g, rg) <= 2 * max_abs_err(eg, rg) + 1e-5 * scale, what
        if i != 2:
            # (The weight gradient of a nearly constant group is a sum of dy * (x - mean) * rstd
            # with x - mean ~ 1e-6: float32's rounding of the saved mean alone moves it by
            # ~1e-2 of itself, in eager as here.)
            assert_close_to_ref(g, rg, torch.float32, what=what)


@pytest.mark.parametrize("op", NORM_OPS)
def test_single_value_groups(device, op):
    """Groups of one value (variance 0): relu_group_norm returns exactly the bias, as the
    float64 composite does; group_norm_mean the mean of the bias."""
    x = (3.0 + torch.randn(3, 4, dtype=torch.float64)).float().to(device)
    w = (1.0 + 0.5 * torch.randn(4, dtype=torch.float64)).float().to(device)
    b = (0.5 * torch.randn(4, dtype=torch.float64)).float().to(device)
    out = fused_op(op)(x, 4, w, b, 1e-5)
    ref, _ = reference(op, [x, 4, w, b, 1e-5])
    torch.testing.assert_close(out.double(), ref, atol=1e-7, rtol=1e-7)
    if op == "relu_group_norm":
        assert torch.equal(out, b.expand_as(out))


@pytest.mark.tf32_off
def test_large_group_conv_offset(device):
    """conv3d_group_norm_mean on a conv output with a large offset (conv bias 100)."""
    args = conv3d_args((2, 3, 20, 40, 40), 8, 3, 1, device=device)
    args[2] = (100.0 + torch.randn(8, dtype=torch.float64)).float().to(device).requires_grad_()
    # The gradients reaching the convolution are differences of nearly equal terms (the
    # offset cancels), so float32 statistics give them to ~2e-5 of their largest magnitude
    # only (PyTorch's float32 composite: ~2e-2). The output is held to 1e-5.
    check_against_reference("conv3d_group_norm_mean", args, grad_rtol=1e-4, grad_atol=1e-4)


# ---------------------------------------------------------------------------------------
# Determinism: same input twice -> bitwise equal outputs and gradients


@pytest.mark.parametrize("op,case", FIRST_CASES)
def test_deterministic(device, op, case):
    if device == "cuda":
        # Something large enough for the kernels to split work across blocks.
        sizes = {
            "relu_group_norm": lambda **kw: norm_args((4, 32, 24, 40, 40), 8, **kw),
            "group_norm_mean": lambda **kw: norm_args((4, 32, 24, 40, 40), 8, **kw),
            "conv_transpose3d_relu_group_norm": lambda **kw: conv_transpose_args(
                (2, 16, 12, 16, 16), 32, 3, 8, **kw
            ),
            "conv3d_group_norm_mean": lambda **kw: conv3d_args((8, 3, 24, 32, 32), 24, 3, 8, **kw),
        }
        args = sizes[op](device=device)
    else:
        args = make_args(op, case, device=device)
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        results = []
        for _ in range(2):
            run_args = detach_args(args)
            out = fused_op(op)(*run_args)
            g = torch.linspace(-1, 1, out.numel(), device=device).reshape(out.shape)
            out.backward(g)
            results.append([out.detach()] + [run_args[i].grad for i in tensor_arg_indices(args)])
        for a, b in zip(*results):
            assert torch.equal(a, b)
    finally:
        torch.use_deterministic_algorithms(old)


# ---------------------------------------------------------------------------------------
# torch.compile(fullgraph=True) matches eager


@pytest.mark.parametrize("mode", ["forward", "forward_backward"])
@pytest.mark.parametrize("op", OPS)
def test_compile(device, op, mode, fresh_dynamo):
    case = next(iter(BUILDERS[op][1]))
    args = make_args(op, case, device=device, requires_grad=(mode == "forward_backward"))
    f = fused_op(op)

    def fn(*a):
        return f(*a)

    compiled = torch.compile(fn, fullgraph=True, backend="inductor")
    eager_args = detach_args(args)
    comp_args = detach_args(args)
    expected = fn(*eager_args)
    actual = compiled(*comp_args)
    assert_close_scaled(actual, expected, 1e-5, what=f"compiled {op}")
    if mode == "forward_backward":
        g = torch.randn_like(expected)
        expected.backward(g)
        actual.backward(g)
        for i in tensor_arg_indices(args):
            # (The compiled graph may reduce in another order: gradients that are sums of
            # cancelling terms get a looser bound.)
            assert_close_scaled(
                comp_args[i].grad,
                eager_args[i].grad,
                1e-4,
                what=f"compiled {op} grad of argument {i}",
            )


def test_compile_composite_with_other_ops(device, fresh_dynamo):
    """The fused op inside a larger compiled graph (inductor fuses the neighbours)."""
    args = make_args("relu_group_norm", "5d_G3", device=device)

    def fn(x, w, b):
        y = torch.ops.fused.relu_group_norm(x * 2.0 + 1.0, 3, w, b, 1e-5)
        return torch.ops.fused.group_norm_mean(y.sin(), 3, w, b, 1e-5)

    x, _, w, b, _ = args
    compiled = torch.compile(fn, fullgraph=True)
    out = compiled(x, w, b)
    expected = fn(x, w, b)
    assert_close_scaled(out, expected, 1e-5, what="compiled")
    gc = torch.autograd.grad(out.sum(), [x, w, b])
    ge = torch.autograd.grad(expected.sum(), [x, w, b])
    for a, e in zip(gc, ge):
        assert_close_scaled(a, e, 1e-4, what="compiled grad")


@pytest.mark.tf32_off
@pytest.mark.parametrize("op", ["relu_group_norm", "conv_transpose3d_relu_group_norm"])
def test_compile_dynamic_shapes(device, op, fresh_dynamo):
    """One compiled function (dynamic=True) called with two shapes, forward and backward."""
    f = fused_op(op)
    compiled = torch.compile(lambda *a: f(*a), fullgraph=True, dynamic=True)
    if op == "relu_group_norm":
        shapes = [
            norm_args((2, 6, 5, 7, 3), 3, device=device),
            norm_args((3, 6, 4, 9, 5), 3, device=device),
        ]
    else:
        shapes = [
            conv_transpose_args((2, 4, 5, 6, 7), 8, 3, 2, stride=2, device=device),
            conv_transpose_args((1, 4, 4, 7, 3), 8, 3, 2, stride=2, device=device),
        ]
    for args in shapes:
        comp_args = detach_args(args)
        out = compiled(*comp_args)
        expected = check_against_reference(op, detach_args(args))
        assert_close_scaled(out, expected, 1e-5, what="compiled, dynamic shapes")
        g = torch.randn_like(out)
        grads = torch.autograd.grad(out, [comp_args[i] for i in tensor_arg_indices(args)], g)
        eager_args = detach_args(args)
        eager_grads = torch.autograd.grad(
            f(*eager_args), [eager_args[i] for i in tensor_arg_indices(args)], g
        )
        for a, e in zip(grads, eager_grads):
            assert_close_scaled(a, e, 1e-4, what="compiled grad, dynamic shapes")


# ---------------------------------------------------------------------------------------
# The Python package: functional wrappers and library loading


def test_functional_wrappers(device):
    x, _, w, b, _ = norm_args((2, 6, 3, 4), 3, device=device)
    torch.testing.assert_close(
        fused_ops.relu_group_norm(x, 3, w, b), torch.ops.fused.relu_group_norm(x, 3, w, b, 1e-5)
    )
    torch.testing.assert_close(
        fused_ops.group_norm_mean(x, 3, weight=w, bias=b, eps=1e-3),
        torch.ops.fused.group_norm_mean(x, 3, w, b, 1e-3),
    )
    torch.testing.assert_close(
        fused_ops.relu_group_norm(x, 3), fused_ops.relu_group_norm(x, 3, None, None, 1e-5)
    )

    args = conv_transpose_args(
        (1, 4, 3, 4, 5),
        6,
        (3, 2, 3),
        3,
        stride=2,
        padding=1,
        output_padding=1,
        groups=2,
        device=device,
    )
    x, cw, cb, stride, padding, output_padding, groups, dilation, G, gw, gb, eps = args
    expected = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
    got = fused_ops.conv_transpose3d_relu_group_norm(
        x,
        cw,
        cb,
        stride=2,
        padding=(1,),
        output_padding=(1, 1, 1),
        groups=2,
        dilation=1,
        num_groups=G,
        gn_weight=gw,
        gn_bias=gb,
    )
    torch.testing.assert_close(got, expected)
    got = fused_ops.conv_transpose3d_relu_group_norm(x, cw, cb, 2, 1, 1, 2, (1, 1, 1), G, gw, gb)
    torch.testing.assert_close(got, expected)
    with pytest.raises(TypeError, match="num_groups"):
        fused_ops.conv_transpose3d_relu_group_norm(x, cw, cb)
    with pytest.raises(ValueError, match="stride"):
        fused_ops.conv_transpose3d_relu_group_norm(x, cw, cb, stride=(1, 2), num_groups=G)

    args = conv3d_args((2, 3, 6, 7, 8), 12, 3, 4, dilation=(1, 2, 1), device=device)
    x, cw, cb, stride, padding, dilation, groups, G, gw, gb, eps = args
    expected = torch.ops.fused.conv3d_group_norm_mean(*args)
    got = fused_ops.conv3d_group_norm_mean(
        x, cw, cb, 1, "valid", dilation=[1, 2, 1], num_groups=G, gn_weight=gw, gn_bias=gb
    )
    torch.testing.assert_close(got, expected)
    # padding='same' as in F.conv3d
    got = fused_ops.conv3d_group_norm_mean(
        x, cw, cb, padding="same", dilation=(1, 2, 1), num_groups=G, gn_weight=gw, gn_bias=gb
    )
    y = F.group_norm(
        F.conv3d(x.double(), cw.double(), cb.double(), padding="same", dilation=(1, 2, 1)),
        G,
        gw.double(),
        gb.double(),
    )
    assert_close_to_ref(got, y.mean(dim=[1, 2, 3, 4]))
    with pytest.raises(ValueError, match="same"):
        fused_ops.conv3d_group_norm_mean(x, cw[:, :, :2], cb, padding="same", num_groups=G)


def test_library_loaded():
    assert fused_ops.library_path is not None and os.path.isfile(fused_ops.library_path)
    assert os.path.basename(fused_ops.library_path) == "libfused_ops.so"
    # The norm operators have per-backend kernels, the conv operators one device-generic
    # kernel (CompositeExplicitAutograd); every operator has Meta and Autograd kernels.
    for op in OPS:
        backend = "CPU" if op in NORM_OPS else "CompositeExplicitAutograd"
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"fused::{op}", backend)
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"fused::{op}", "Meta")
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"fused::{op}", "Autograd")


def _run_pythons(code, env_updates_list, cwd):
    """Runs `code` in one fresh interpreter per env update dict, in parallel."""
    procs = []
    for updates in env_updates_list:
        env = dict(os.environ)
        env.pop("FUSED_OPS_LIBRARY", None)
        env.update(updates)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return results


def test_library_search(tmp_path):
    """Where `import fused_ops` looks for libfused_ops.so, and its ImportError."""
    # Two copies of the package outside the repository: one bare, one with the library
    # in the package directory (as an installed copy has it).
    bare, installed = tmp_path / "bare", tmp_path / "installed"
    for root in (bare, installed):
        shutil.copytree(
            os.path.join(REPO_DIR, "fused_ops"),
            root / "fused_ops",
            ignore=shutil.ignore_patterns("__pycache__", "*.so"),
        )
    shutil.copy(fused_ops.library_path, installed / "fused_ops" / "libfused_ops.so")
    code = "import fused_ops; print('LOADED', fused_ops.library_path)"
    missing, from_env, bad_env, from_package = _run_pythons(
        code,
        [
            {"PYTHONPATH": str(bare)},
            {"PYTHONPATH": str(bare), "FUSED_OPS_LIBRARY": fused_ops.library_path},
            {"PYTHONPATH": str(bare), "FUSED_OPS_LIBRARY": str(tmp_path / "nope.so")},
            {"PYTHONPATH": str(installed)},
        ],
        cwd=tmp_path,
    )
    # No library anywhere: ImportError listing where it looked.
    assert missing.returncode != 0
    assert "ImportError" in missing.stderr and "FUSED_OPS_LIBRARY" in missing.stderr
    assert str(bare / "fused_ops" / "libfused_ops.so") in missing.stderr
    # Outside a source checkout no build folder is looked at (nothing is guessed).
    assert "build" not in missing.stderr.split("Looked in:")[1].split("Install")[0]
    # FUSED_OPS_LIBRARY names the library.
    assert from_env.returncode == 0, from_env.stderr
    assert f"LOADED {fused_ops.library_path}" in from_env.stdout
    # FUSED_OPS_LIBRARY naming no file is an ImportError (no silent fallback).
    assert bad_env.returncode != 0
    assert "ImportError" in bad_env.stderr and "nope.so" in bad_env.stderr
    # A copy of the library in the package directory.
    assert from_package.returncode == 0, from_package.stderr
    assert f"LOADED {installed / 'fused_ops' / 'libfused_ops.so'}" in from_package.stdout
