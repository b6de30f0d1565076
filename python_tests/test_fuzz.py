"""Property-based fuzzing (hypothesis) of all four operators against their float64
composites, forward and every gradient: random shapes, groups, strides, paddings, output
paddings, dilations, conv groups, dtypes, memory formats, affine or not, on the CPU and on
CUDA. The profile FUSED_OPS_FUZZ=ci (default: a fixed budget, derandomised so CI is
reproducible) or FUSED_OPS_FUZZ=long (many more examples, for the GPU machine). A failure
prints the falsifying example (hypothesis' reproducer) and the tensors' seed."""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn.functional as F

from helpers import (
    REFERENCES,
    check_against_reference,
    conv3d_args,
    conv_transpose_args,
    detach_args,
    fused_op,
    max_abs_err,
    norm_args,
    reference,
    tensor_arg_indices,
)

hypothesis = pytest.importorskip(
    "hypothesis", reason="hypothesis not installed: pip install hypothesis"
)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile("ci", max_examples=20, derandomize=True, **_COMMON)
settings.register_profile("long", max_examples=400, **_COMMON)
settings.load_profile(os.environ.get("FUSED_OPS_FUZZ", "ci"))

DTYPES = st.sampled_from([torch.float32, torch.float64])
# Gradient tolerances (relative to the largest magnitude), as the tests of test_ops.py use.
GRAD_TOL = {torch.float32: (1e-4, 2e-5), torch.float64: (1e-9, 1e-10)}


@st.composite
def norm_cases(draw):
    rank = draw(st.integers(2, 5))
    groups = draw(st.integers(1, 4))
    C = groups * draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 3)), C] + [draw(st.integers(1, 6)) for _ in range(rank - 2)]
    # The reference needs more than one value per channel of its (N * C / G, G, *) view (it
    # rejects a batch of one). Groups of one or two values are in (see test_norm_ops_fuzz).
    hypothesis.assume(shape[0] * C // groups * math.prod(shape[2:]) > 1)
    return dict(
        shape=shape,
        groups=groups,
        weight=draw(st.booleans()),
        bias=draw(st.booleans()),
        dtype=draw(DTYPES),
        channels_last=rank in (4, 5) and draw(st.booleans()),
        offset=draw(st.sampled_from([0.0, 3.0])),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


@st.composite
def conv_cases(draw, transposed):
    groups = draw(st.integers(1, 2))
    c_in = groups * draw(st.integers(1, 3))
    num_groups = draw(st.integers(1, 3))
    c_out = groups * num_groups * draw(st.integers(1, 2))
    k = [draw(st.integers(1, 3)) for _ in range(3)]
    stride = [draw(st.integers(1, 2)) for _ in range(3)]
    dilation = [draw(st.integers(1, 2)) for _ in range(3)]
    padding = [draw(st.integers(0, 1)) for _ in range(3)]
    output_padding = [
        draw(st.integers(0, max(stride[i], dilation[i]) - 1)) if transposed else 0 for i in range(3)
    ]
    size = []
    for i in range(3):
        reach = (k[i] - 1) * dilation[i] + 1
        low = 1 if transposed else max(reach - 2 * padding[i], 1)
        size.append(low + draw(st.integers(0, 4)))
    out = []
    for i in range(3):
        if transposed:
            n = (size[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k[i] - 1)
            out.append(n + output_padding[i] + 1)
        else:
            out.append((size[i] + 2 * padding[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1)
    # A non-empty output with at least 3 values per (sample, group), so that the gradients
    # can be checked (see test_norm_ops_fuzz; smaller groups are norm_cases' part).
    hypothesis.assume(min(out) >= 1 and c_out // num_groups * math.prod(out) > 2)
    gn_affine = draw(st.booleans())
    if not transposed:
        # (Without a weight, or one channel per group, the mean of GroupNorm does not depend on
        # the input: its gradients are 0 by structure.)
        hypothesis.assume(gn_affine and c_out // num_groups > 1)
    return dict(
        input_shape=(draw(st.integers(1, 2)), c_in, *size),
        out_channels=c_out,
        kernel_size=k,
        num_groups=num_groups,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        conv_bias=draw(st.booleans()),
        gn_affine=gn_affine,
        dtype=draw(DTYPES),
        seed=draw(st.integers(0, 2**31 - 1)),
        **({"output_padding": output_padding} if transposed else {}),
    )


def _check(op, args, dtype, backward=True):
    """The fused operator against the float64 composite within GRAD_TOL; where it is not, at
    least as accurate as eager's composite in the same dtype (the numerics contract). Small
    and degenerate cases (groups of a few values, nearly equal ones, an offset, convolutions
    that read only padding) are ill-conditioned: there every float computation, eager's too,
    is off the float64 result by more than a fixed tolerance of its largest magnitude."""
    if dtype == torch.float32:
        torch.backends.cudnn.allow_tf32 = False  # float32 convolutions on both sides
    rtol, atol = GRAD_TOL[dtype]
    try:
        check_against_reference(op, args, backward=backward, grad_rtol=rtol, grad_atol=atol)
    except AssertionError as outside_tolerance:
        _check_as_accurate_as_eager(op, args, backward, outside_tolerance)


def _check_as_accurate_as_eager(op, args, backward, outside_tolerance):
    """Every output and gradient of the fused operator within 2x eager's error against the
    float64 composite, plus 4 ulps (in the operator's dtype) of the magnitude of the terms
    that make it: the result's, and for a gradient also the incoming gradient's, whose
    products cancel down to a small result in these cases (of a few values, the largest
    rounding error of either computation is a matter of luck); plus 1e-12 of it, the float64
    composite's own rounding (in float64, eager is that composite, and a group of equal
    values normalises to exactly 0 in the fused kernels, to ~ulp(x) / sqrt(eps) in it)."""
    out = fused_op(op)(*args)
    ref, ref_args = reference(op, args)
    eager_args = detach_args(args, requires_grad=True)
    eager = REFERENCES[op](*eager_args)
    results = [("output", out, eager, ref, ref.abs().max().item())]
    if backward and out.requires_grad:
        grad_out = torch.randn(out.shape, dtype=out.dtype, device=out.device)
        leaves = [i for i in tensor_arg_indices(args) if args[i].requires_grad]

        def grads(y, inputs, g):
            return torch.autograd.grad(y, [inputs[i] for i in leaves], g, allow_unused=True)

        triples = zip(
            grads(out, args, grad_out),
            grads(eager, eager_args, grad_out),
            grads(ref, ref_args, grad_out.to(ref.device, torch.float64)),
        )
        for i, (g, eg, rg) in zip(leaves, triples):
            if rg is None:
                rg = torch.zeros_like(ref_args[i])
            magnitude = max(rg.abs().max().item(), grad_out.abs().max().item())
            results.append((f"grad of argument {i}", g, eg, rg, magnitude))
    eps = torch.finfo(out.dtype).eps
    for what, fused, eager_result, ref_result, magnitude in results:
        err, eager_err = max_abs_err(fused, ref_result), max_abs_err(eager_result, ref_result)
        floor = 4 * eps * magnitude + 1e-12 * max(magnitude, 1.0)
        assert err <= 2 * eager_err + floor, (
            f"{op} {what}: error {err:.3e} against float64, eager's {eager_err:.3e} "
            f"(outside the fixed tolerance first: {outside_tolerance})"
        )


def _fewest_distinct_values(v, groups):
    """The least number of distinct values in a (sample, group) of v (N, C, *)."""
    rows = v.detach().reshape(v.shape[0] * groups, -1).cpu()
    return min(torch.unique(row).numel() for row in rows)


@pytest.mark.parametrize("op", ["relu_group_norm", "group_norm_mean"])
@given(case=norm_cases())
def test_norm_ops_fuzz(device, op, case):
    if op == "group_norm_mean":
        # Without a weight, or with one channel per group, the output does not depend on x
        # (every channel's mean is its group's): the input gradient is 0 by structure.
        hypothesis.assume(case["weight"] and case["shape"][1] // case["groups"] > 1)
    torch.manual_seed(case["seed"])
    args = norm_args(
        case["shape"],
        case["groups"],
        weight=case["weight"],
        bias=case["bias"],
        dtype=case["dtype"],
        device=device,
    )
    with torch.no_grad():
        args[0] += case["offset"]
        if case["channels_last"]:
            fmt = torch.channels_last if len(case["shape"]) == 4 else torch.channels_last_3d
            args[0] = args[0].detach().to(memory_format=fmt).requires_grad_(True)
    # Every group is checked forward (a group of equal values normalises to exactly the bias,
    # as in float64). Gradients where every group of the normalised input has at least 3
    # distinct values: with one or two, the normalised values are 0 or +-1 whatever x is, every
    # input gradient is 0 by structure, and what is left is rounding of cancelling terms
    # (eager's too), not comparable to 0.
    normalised = torch.relu(args[0]) if op == "relu_group_norm" else args[0]
    _check(op, args, case["dtype"], _fewest_distinct_values(normalised, case["groups"]) > 2)


@given(case=conv_cases(transposed=True))
def test_conv_transpose3d_relu_group_norm_fuzz(device, case):
    case = dict(case)
    torch.manual_seed(case.pop("seed"))
    dtype = case["dtype"]
    args = conv_transpose_args(**case, device=device)
    # Gradients as test_norm_ops_fuzz checks them: where every group of the normalised conv
    # output has at least 3 distinct values (a convolution that reads only padding gives its
    # bias, one value per channel).
    normalised = torch.relu(_conv_output(F.conv_transpose3d, args))
    backward = _fewest_distinct_values(normalised, case["num_groups"]) > 2
    _check("conv_transpose3d_relu_group_norm", args, dtype, backward)


@given(case=conv_cases(transposed=False))
def test_conv3d_group_norm_mean_fuzz(device, case):
    case = dict(case)
    torch.manual_seed(case.pop("seed"))
    dtype = case["dtype"]
    args = conv3d_args(**case, device=device)
    normalised = _conv_output(F.conv3d, args)
    _check(
        "conv3d_group_norm_mean",
        args,
        dtype,
        _fewest_distinct_values(normalised, case["num_groups"]) > 2,
    )


def _conv_output(conv, args):
    """The convolution of a conv operator's args, in float64."""
    conv_args = [a.detach().double() if isinstance(a, torch.Tensor) else a for a in args]
    if conv is F.conv3d:  # (input, weight, bias, stride, padding, dilation, groups, ...)
        return conv(*conv_args[:7])
    return conv(*conv_args[:8])  # (..., stride, padding, output_padding, groups, dilation)
