"""The one-pass CUDA kernels of conv3d_group_norm_mean (the convolution's output never
written, forward and backward): which calls run them (fused_ops.dispatch_path), their values
and gradients against float64 over random parameter sets inside and outside their family, in
every dtype, what training saves, and determinism."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import torch

import fused_ops
from helpers import (
    assert_close_to_ref,
    check_against_reference,
    conv3d_args,
    detach_args,
    reference,
    requires_cuda,
    tensor_arg_indices,
)

OP = "conv3d_group_norm_mean"


def _random_case(rng: random.Random) -> dict:
    """A random conv3d_group_norm_mean problem: strides, paddings, dilations, conv groups,
    odd sizes, N = 1, one channel per GroupNorm group, channel counts past a block's chunk."""
    groups = rng.choice([1, 1, 2, 3])
    c_in = groups * rng.randint(1, 5)
    c_out = groups * rng.choice([1, 2, 3, 5, 8, 12, 24, 33, 40])
    num_groups = rng.choice([g for g in (1, 2, 3, 4, 6, 8, 12) if c_out % g == 0])
    k = [rng.randint(1, 3) for _ in range(3)]
    stride = [rng.randint(1, 2) for _ in range(3)]
    dilation = [rng.randint(1, 2) for _ in range(3)]
    padding = [rng.randint(0, 2) for _ in range(3)]
    size = []
    for i in range(3):
        reach = (k[i] - 1) * dilation[i] + 1
        size.append(max(reach - 2 * padding[i], 1) + rng.randint(0, 9))
    return dict(
        input_shape=(rng.randint(1, 3), c_in, *size),
        out_channels=c_out,
        kernel_size=k,
        num_groups=num_groups,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        conv_bias=rng.random() < 0.8,
        gn_affine=rng.random() < 0.8,
    )


# Tolerances against the float64 reference of the dtype-rounded arguments: the one-pass
# kernels' products are exact and their sums in float (double for double), so only the
# statistics' and the output's rounding remain.
TOLERANCE = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-10, 1e-10),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1e-2, 1e-2),
}


def _check(args, dtype):
    with torch.no_grad():
        path = fused_ops.dispatch_path(OP, *args)
        out = torch.ops.fused.conv3d_group_norm_mean(*args)
    ref, _ = reference(OP, args)
    rtol, atol = TOLERANCE[dtype]
    assert_close_to_ref(out, ref, dtype, rtol=rtol, atol=atol, what=f"{OP} ({path})")
    return path, out


@requires_cuda
@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("seed", range(12))
def test_random_problems(seed, dtype):
    rng = random.Random(seed)
    for _ in range(4):
        case = _random_case(rng)
        # Inputs as users pass them (torch.rand: a common offset) and zero-mean ones.
        args = conv3d_args(**case, dtype=dtype, device="cuda", requires_grad=False)
        if rng.random() < 0.5:
            args[0] = torch.rand_like(args[0])
        path, _ = _check(args, dtype)
        assert path == "onepass", case


@requires_cuda
def test_footprints_past_the_tensor_core_kernel_run_the_direct_kernel():
    """float32 with dilation 8: footprints the tensor-core kernel's two buffers cannot hold
    (cpp_tests/test_conv_ops.cpp checks the plan) run the direct kernel, not cuDNN."""
    args = conv3d_args((2, 2, 40, 40, 33), 24, 3, 8, dilation=8, device="cuda", requires_grad=False)
    path, _ = _check(args, torch.float32)
    assert path == "onepass"


@requires_cuda
def test_outside_the_family_runs_cudnn():
    """A reduction longer than the family's bound (C_in * k^3 = 20 * 27 > 512) runs cuDNN."""
    args = conv3d_args((2, 20, 6, 7, 8), 8, 3, 4, device="cuda", requires_grad=False)
    path, _ = _check(args, torch.float32)
    assert path == "aten_float32 -> group_norm_mean"


@requires_cuda
@pytest.mark.tf32_off  # (cuDNN's backward convolutions are TF32 under the default flags)
def test_outside_the_family_trains_through_cudnn():
    args = conv3d_args((2, 20, 6, 7, 8), 8, 3, 4, device="cuda", requires_grad=True)
    assert fused_ops.dispatch_path(OP, *args) == "aten_float32 -> group_norm_mean"
    check_against_reference(OP, args, grad_rtol=1e-4, grad_atol=5e-5)


@requires_cuda
def test_path_with_and_without_autograd():
    """Calls in the family run the one-pass kernels whether or not autograd records them."""
    args = conv3d_args((2, 3, 8, 9, 10), 24, 3, 8, device="cuda", requires_grad=True)
    assert fused_ops.dispatch_path(OP, *args) == "onepass"
    with torch.no_grad():
        assert fused_ops.dispatch_path(OP, *args) == "onepass"
    model = fused_ops.Conv3dGroupNormMean(3, 24, 3, 8).cuda()
    x = torch.rand(2, 3, 8, 9, 10, device="cuda")
    with torch.inference_mode():
        out = model(x)
    assert out.shape == (2,)


# Gradient tolerances (rtol, atol relative to the largest magnitude): the backward's sums run
# in float (double for double) over up to a few thousand terms.
GRAD_TOLERANCE = {
    torch.float32: (1e-4, 5e-5),
    torch.float64: (1e-9, 1e-10),
    torch.float16: (1e-2, 2e-3),
    torch.bfloat16: (4e-2, 1e-2),
}


@requires_cuda
@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("seed", range(12))
def test_backward_random_problems(seed, dtype):
    """Every gradient of the one-pass backward against float64, over the parameter surface."""
    rng = random.Random(1000 + seed)
    for _ in range(3):
        case = _random_case(rng)
        args = conv3d_args(**case, dtype=dtype, device="cuda", requires_grad=True)
        if rng.random() < 0.5:
            with torch.no_grad():
                args[0].uniform_(0.0, 1.0)  # torch.rand-like: a common offset
        assert fused_ops.dispatch_path(OP, *args) == "onepass", case
        rtol, atol = TOLERANCE[dtype]
        grad_rtol, grad_atol = GRAD_TOLERANCE[dtype]
        check_against_reference(
            OP, args, rtol=rtol, atol=atol, grad_rtol=grad_rtol, grad_atol=grad_atol
        )


@requires_cuda
def test_backward_dilated_padded_thin_boxes():
    """Dilation 3 with padding 3: the plan's boxes are thinner than the dilation along some
    dim (cpp_tests/test_conv_ops.cpp checks the plan), where the outputs a box owns are not a
    contiguous run (the first tap inside the input of an output whose first taps fall in the
    padding cycles through [0, dilation)). Every gradient against float64."""
    args = conv3d_args(
        (2, 8, 32, 32, 32), 16, 3, 4, padding=3, dilation=3, device="cuda", requires_grad=True
    )
    assert fused_ops.dispatch_path(OP, *args) == "onepass"
    check_against_reference(OP, args, grad_rtol=1e-4, grad_atol=5e-5)


# Stride-1 problems whose input gradient comes from the lag tables (cpp_tests/test_conv_ops.cpp
# checks that their plans take them): tap ranges cut short by every border, padding past the
# kernel's reach, dilation along H and W, conv groups, mixed kernel sizes, 1 to 4 input
# channels per group, tiles past W = 32 and H = 8 and D columns of 12, 8, 4, 2 and 1 (their first
# and last planes' own tap ranges).
LAG_CASES = {
    "headline-like": dict(
        input_shape=(2, 3, 8, 9, 10), out_channels=24, kernel_size=3, num_groups=8
    ),
    "padded-dilated": dict(
        input_shape=(2, 3, 7, 9, 11),
        out_channels=24,
        kernel_size=3,
        num_groups=4,
        padding=(2, 1, 3),
        dilation=(1, 2, 2),
    ),
    "groups": dict(
        input_shape=(1, 4, 6, 7, 5),
        out_channels=24,
        kernel_size=3,
        num_groups=6,
        groups=2,
        padding=1,
    ),
    "mixed-kernel": dict(
        input_shape=(2, 4, 23, 19, 40),
        out_channels=12,
        kernel_size=(3, 1, 2),
        num_groups=3,
        padding=(0, 2, 1),
    ),
    "one-channel": dict(
        input_shape=(3, 1, 15, 10, 33), out_channels=6, kernel_size=3, num_groups=2
    ),
    "thin-d": dict(input_shape=(2, 2, 4, 6, 9), out_channels=16, kernel_size=3, num_groups=4),
    # Padding 1 along D: only the input's first and last planes have their own tap range, in
    # columns of 12 (the first) and 8 (the last), each corrected by one own row; H of 37 and W
    # of 35: tiles whose positions the kernel regroups by pattern, and tiles past the input.
    "padded-deep": dict(
        input_shape=(2, 3, 20, 37, 35), out_channels=24, kernel_size=3, num_groups=4, padding=1
    ),
    # No padding, D of 24 (the headline's): two columns of 12, each with a pair of own rows.
    "deep-unpadded": dict(
        input_shape=(2, 3, 24, 5, 6), out_channels=24, kernel_size=3, num_groups=4
    ),
    # 40 samples' tables take two launches (at most 34 a launch at C_in/groups = 3, k = 3).
    "two-chunks": dict(input_shape=(40, 3, 6, 6, 6), out_channels=24, kernel_size=3, num_groups=8),
    "thin-d-padded": dict(
        input_shape=(2, 2, 5, 6, 9), out_channels=16, kernel_size=3, num_groups=4, padding=(1, 0, 2)
    ),
    # Tables combined from per-segment ones (fewer segments than samples), conv groups of 6
    # channels straddling GroupNorm groups of 4: 2 segments each.
    "straddling-segments": dict(
        input_shape=(12, 2, 6, 7, 9),
        out_channels=12,
        kernel_size=3,
        num_groups=3,
        groups=2,
        padding=1,
    ),
    # Two launches of 121 items on an H100's 132 SMs (242 = 121 samples x 2 conv groups;
    # cpp_tests checks the plan): the second starts at conv group 1, each conv group's tables
    # combined from its 2 segments.
    "odd-chunks-groups": dict(
        input_shape=(121, 2, 6, 6, 6), out_channels=12, kernel_size=3, num_groups=3, groups=2
    ),
    # 24 one-channel segments (GroupNorm groups of 1) for 96 samples in one launch: the
    # combination's alphas (2048 at a time: 80 items of 24 segments) take two tiles, the second
    # of 16 items.
    "many-segments": dict(
        input_shape=(96, 1, 7, 5, 6), out_channels=24, kernel_size=(3, 1, 1), num_groups=24
    ),
}


@requires_cuda
@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", list(LAG_CASES))
def test_backward_lag_input_gradient(name, dtype, monkeypatch):
    """The gradients of a backward that does not want the weight's against float64: the input
    gradient from the lag tables, then from the recomputing kernel
    (FUSED_OPS_CONV3D_LAG_INPUT_GRAD=0; float64 runs it either way), on torch.rand inputs with
    a large common offset (the tables act on x minus its mean: the offset must not cost
    accuracy)."""
    _check_with_kernels_on_and_off(
        LAG_CASES[name], dtype, "FUSED_OPS_CONV3D_LAG_INPUT_GRAD", monkeypatch, frozen_weight=True
    )


def _check_with_kernels_on_and_off(case, dtype, switch, monkeypatch, frozen_weight=False):
    """The gradients of `case` (a conv weight that needs none where frozen_weight) against
    float64, with the kernels the environment variable `switch` turns off on ("1"), then off
    ("0"), on torch.rand inputs plus a large common offset."""
    torch.manual_seed(0)
    args = conv3d_args(**case, dtype=dtype, device="cuda", requires_grad=True)
    if frozen_weight:
        args[1].requires_grad_(False)
    with torch.no_grad():
        args[0].uniform_(0.0, 1.0).add_(8.0)
    rtol, atol = TOLERANCE[dtype]
    grad_rtol, grad_atol = GRAD_TOLERANCE[dtype]
    for setting in ("1", "0"):
        monkeypatch.setenv(switch, setting)
        assert fused_ops.dispatch_path(OP, *args) == "onepass"
        check_against_reference(
            OP, args, rtol=rtol, atol=atol, grad_rtol=grad_rtol, grad_atol=grad_atol
        )


# Stride-1 problems whose weight gradient comes from the Gram kernels (cpp_tests/test_conv_ops.cpp
# checks which plans take them): the lag cases (those with more than 3 input channels per
# group or a padded W past 32 fall back to the recomputing kernel), a W of exactly 32 lanes,
# thin classes (dilation 2 along D and H: classes of two planes or rows), kernels of 1 and 2
# taps, 1 input channel, kernels of one tap along D or W, fewer output columns than the W lags'
# reach, 80 samples of the headline's size (two launches of the pieces' sums), chunks along H
# and D that cut the classes, and edge classes in separate groups.
GRAM_CASES = {
    **LAG_CASES,
    "full-width": dict(input_shape=(2, 3, 6, 5, 32), out_channels=24, kernel_size=3, num_groups=8),
    "dilated-classes": dict(
        input_shape=(2, 2, 9, 8, 12),
        out_channels=12,
        kernel_size=3,
        num_groups=4,
        padding=(1, 2, 0),
        dilation=(2, 2, 3),
    ),
    "small-kernels": dict(
        input_shape=(3, 3, 5, 6, 7),
        out_channels=8,
        kernel_size=(2, 1, 3),
        num_groups=2,
        padding=(1, 0, 1),
    ),
    "two-launches": dict(
        input_shape=(80, 3, 24, 32, 32), out_channels=24, kernel_size=3, num_groups=8
    ),
    "one-channel-narrow": dict(
        input_shape=(3, 1, 15, 10, 30), out_channels=6, kernel_size=3, num_groups=2
    ),
    "kernel-2x2x1": dict(
        input_shape=(2, 2, 6, 7, 9),
        out_channels=8,
        kernel_size=(2, 2, 1),
        num_groups=4,
        padding=(0, 1, 0),
    ),
    # Wo = 3 output columns, fewer than the W lags' reach (9): lanes that are both kinds of edge.
    "wide-lag-narrow-output": dict(
        input_shape=(2, 3, 4, 6, 12),
        out_channels=6,
        kernel_size=(1, 3, 2),
        num_groups=3,
        padding=(0, 1, 0),
        dilation=(1, 1, 9),
    ),
    "one-channel-whole-rows": dict(
        input_shape=(2, 1, 4, 5, 32), out_channels=4, kernel_size=(1, 2, 3), num_groups=2
    ),
    # A padded H of 47 (two H chunks of 24 rows) and D of 42 (bulk chunks of 5 planes, whose
    # borders cut the D-classes; two edge chunks of 21 planes).
    "tall-and-deep": dict(
        input_shape=(2, 3, 40, 45, 20), out_channels=12, kernel_size=3, num_groups=4, padding=1
    ),
    # Edge classes of 8 rows (dilation 8 along H) in two groups: the four together would be
    # taller than a bulk unit's 20 rows.
    "edge-groups-apart": dict(
        input_shape=(2, 3, 6, 40, 10),
        out_channels=6,
        kernel_size=3,
        num_groups=3,
        dilation=(1, 8, 1),
    ),
}


@requires_cuda
@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", list(GRAM_CASES))
def test_backward_gram_weight_gradient(name, dtype, monkeypatch):
    """Every gradient against float64: the weight gradient from the Gram kernels (and the
    input gradient from the lag tables where they take the problem), then from the recomputing
    kernel (FUSED_OPS_CONV3D_GRAM_WEIGHT_GRAD=0; float64 runs it either way), on torch.rand
    inputs with a large common offset (the sums act on x minus its mean)."""
    _check_with_kernels_on_and_off(
        GRAM_CASES[name], dtype, "FUSED_OPS_CONV3D_GRAM_WEIGHT_GRAD", monkeypatch
    )


@requires_cuda
def test_backward_partial_requires_grad():
    """Only some arguments need gradients: the kernels skip the others."""
    base = conv3d_args((2, 4, 7, 8, 9), 16, 3, 4, padding=1, device="cuda", requires_grad=False)
    for i in tensor_arg_indices(base):
        args = list(base)
        args[i] = args[i].detach().clone().requires_grad_(True)
        assert fused_ops.dispatch_path(OP, *args) == "onepass"
        check_against_reference(OP, args, grad_rtol=1e-4, grad_atol=5e-5)


@requires_cuda
def test_training_saves_statistics_only():
    """At the headline's channel counts, what autograd saves besides the arguments is the
    per-(n, g) and per-(n, c) statistics and x's sums per (n, input channel) and tap (float64):
    no tensor of the convolution output's size."""
    args = conv3d_args((4, 3, 12, 16, 16), 24, 3, 8, device="cuda", requires_grad=True)
    argument_ptrs = {a.data_ptr() for a in args if isinstance(a, torch.Tensor)}
    extra_bytes = []

    def pack(t):
        if t.data_ptr() not in argument_ptrs:
            extra_bytes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = torch.ops.fused.conv3d_group_norm_mean(*args)
    N, C, G, C_in, taps = 4, 24, 8, 3, 27
    assert sum(extra_bytes) == (2 * N * G + N * C) * 4 + N * C_in * (taps + 1) * 8, extra_bytes
    out.sum().backward()
    assert all(a.grad is not None for a in args if isinstance(a, torch.Tensor))


# Training forwards whose channel means the tensor-core kernel's plan takes exactly (float32):
# the headline's shape with a large common offset, strides 2-3 with dilation and padding, conv
# groups, rows of 150 and 1100 (the sums' columns in passes of 32), more than 3 taps along D
# and H (passes of 3 x 3 tap pairs), 40 rows (batches of 16 rows whose taps' rows are runs from
# the batch's edges, and a last batch of 8), and N * C_in past two blocks per SM (one block per
# (n, b): the smaller problems split D across blocks).
EXACT_MEAN_CASES = {
    "headline-offset": dict(
        input_shape=(2, 3, 24, 32, 32), out_channels=24, kernel_size=3, num_groups=8
    ),
    "strided-dilated": dict(
        input_shape=(2, 3, 9, 10, 11),
        out_channels=8,
        kernel_size=(2, 3, 2),
        num_groups=4,
        stride=(2, 3, 1),
        padding=(1, 0, 2),
        dilation=(2, 1, 3),
    ),
    "groups": dict(
        input_shape=(3, 4, 7, 9, 12),
        out_channels=12,
        kernel_size=3,
        num_groups=3,
        groups=2,
        stride=2,
    ),
    "long-rows": dict(
        input_shape=(2, 2, 4, 5, 150),
        out_channels=8,
        kernel_size=(1, 2, 3),
        num_groups=2,
        stride=(1, 1, 3),
    ),
    "rows-over-1024": dict(
        input_shape=(1, 2, 3, 3, 1100),
        out_channels=4,
        kernel_size=(1, 1, 3),
        num_groups=2,
        padding=(0, 0, 1),
    ),
    "many-taps": dict(
        input_shape=(2, 1, 9, 11, 7),
        out_channels=8,
        kernel_size=(5, 4, 2),
        num_groups=2,
        padding=(2, 1, 0),
        stride=(1, 2, 1),
    ),
    "tall-rows": dict(
        input_shape=(2, 2, 5, 40, 12),
        out_channels=8,
        kernel_size=3,
        num_groups=4,
        padding=(0, 1, 0),
    ),
    "one-block-per-channel": dict(
        input_shape=(96, 3, 5, 6, 9), out_channels=8, kernel_size=3, num_groups=4, padding=1
    ),
}


def _input_sums_reference(x, kernel_size, stride, padding, dilation):
    """The training forward's input_sums in float64: per (n, input channel), X[k], the sum of x
    over the positions tap k reads (one per output; a convolution with one-hot kernels), then
    x's total."""
    N, C = x.shape[:2]
    taps = kernel_size[0] * kernel_size[1] * kernel_size[2]
    one_hot = torch.eye(taps, dtype=torch.float64, device=x.device).reshape(taps, 1, *kernel_size)
    x64 = x.detach().double()
    per_tap = torch.nn.functional.conv3d(
        x64.reshape(N * C, 1, *x.shape[2:]), one_hot, None, stride, padding, dilation
    )
    X = per_tap.sum(dim=(2, 3, 4)).reshape(N, C, taps)
    return torch.cat([X, x64.sum(dim=(2, 3, 4)).reshape(N, C, 1)], dim=2)


@requires_cuda
@pytest.mark.parametrize("name", list(EXACT_MEAN_CASES))
def test_training_forward_channel_means_exact(name):
    """The training forward's channel means (which the backward centres dy on: an error there
    sums over every output) against float64: exact but for the final rounding to float32, on
    inputs with a large common offset, while the tensor-core kernel computes the rest; and the
    x sums it keeps for the backward (input_sums), against float64."""
    torch.manual_seed(0)
    args = conv3d_args(**EXACT_MEAN_CASES[name], device="cuda", requires_grad=False)
    with torch.no_grad():
        args[0].uniform_(0.0, 1.0).add_(8.0)
    x, w, b, stride, padding, dilation, groups = args[:7]
    out, mean, rstd, channel_mean, input_sums = (
        torch.ops.fused._conv3d_group_norm_mean_onepass_forward(*args)
    )
    # Sums in double of float32 values: only their order differs from the reference's.
    expected = _input_sums_reference(x, tuple(w.shape[2:]), stride, padding, dilation)
    assert input_sums.dtype == torch.float64
    torch.testing.assert_close(input_sums, expected, rtol=1e-12, atol=1e-9)
    y = torch.nn.functional.conv3d(
        x.double(), w.double(), b.double(), stride, padding, dilation, groups
    )
    reference = y.mean(dim=(2, 3, 4))
    # float32 rounding of the mean only: within a few ulps of its magnitude.
    torch.testing.assert_close(channel_mean.double(), reference, rtol=3e-7, atol=1e-7)
    # The output: the inference forward's (the same kernel) but for the means' rounding.
    torch.testing.assert_close(
        out, torch.ops.fused.conv3d_group_norm_mean(*args), rtol=1e-5, atol=1e-6
    )


# The backward's centring of x from the forward's sums (mu for the lag tables, the Gram kernels'
# window sums Sc = X - S * mu) and without them: the headline's shape, padding (window boxes
# partly in the padding), dilation with conv groups.
INPUT_SUMS_CASES = {
    "headline": dict(input_shape=(2, 3, 24, 32, 32), out_channels=24, kernel_size=3, num_groups=8),
    "padded": dict(
        input_shape=(2, 2, 9, 8, 12), out_channels=12, kernel_size=3, num_groups=4, padding=1
    ),
    "dilated-groups": dict(
        input_shape=(3, 4, 10, 9, 11),
        out_channels=12,
        kernel_size=(3, 2, 3),
        num_groups=3,
        groups=2,
        dilation=(2, 1, 2),
        padding=(2, 0, 1),
    ),
}


@requires_cuda
@pytest.mark.parametrize("name", list(INPUT_SUMS_CASES))
def test_backward_from_input_sums(name):
    """The one-pass backward op given the forward's input_sums and given None (x summed again):
    every gradient against float64 both ways, on torch.rand inputs plus a large common offset
    (the sums centre x: the offset must not cost accuracy)."""
    torch.manual_seed(0)
    args = conv3d_args(**INPUT_SUMS_CASES[name], device="cuda", requires_grad=True)
    with torch.no_grad():
        args[0].uniform_(0.0, 1.0).add_(8.0)
    ref, dargs = reference(OP, args)
    grad_out = torch.randn(ref.shape, dtype=torch.float32, device="cuda")
    leaves = tensor_arg_indices(args)
    ref_grads = torch.autograd.grad(ref, [dargs[i] for i in leaves], grad_out.double())
    x, w, cb, stride, padding, dilation, groups, num_groups, gw, gb, eps = args
    with torch.no_grad():
        out, mean, rstd, channel_mean, input_sums = (
            torch.ops.fused._conv3d_group_norm_mean_onepass_forward(*args)
        )
        assert input_sums.shape == (x.shape[0], x.shape[1], w[0].numel() // w.shape[1] + 1)
        results = {}
        for label, sums in [("with input_sums", input_sums), ("without", None)]:
            grads = torch.ops.fused._conv3d_group_norm_mean_onepass_backward(
                grad_out, x, w, cb, mean, rstd, channel_mean, sums, stride, padding, dilation,
                groups, num_groups, gw, [True] * 5,
            )  # fmt: skip
            # (grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias) in the
            # order of the leaves x, w, cb, gw, gb
            for i, g, rg in zip(leaves, grads, ref_grads):
                assert_close_to_ref(
                    g, rg, torch.float32, *GRAD_TOLERANCE[torch.float32],
                    what=f"{label}: grad of argument {i}",
                )  # fmt: skip
            results[label] = grads
    # The same mu up to rounding, so gradients within float32 noise of each other.
    for a, b in zip(results["with input_sums"], results["without"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6 * b.abs().max().item())


@requires_cuda
def test_backward_rejects_input_sums_of_another_shape():
    args = conv3d_args((2, 3, 6, 7, 8), 16, 3, 4, device="cuda", requires_grad=False)
    out, mean, rstd, channel_mean, input_sums = (
        torch.ops.fused._conv3d_group_norm_mean_onepass_forward(*args)
    )
    for bad, match in [
        (input_sums[:, :, :-1], r"expected input_sums of shape \[2, 3, 28\]"),
        (input_sums.float(), "expected input_sums of dtype Double"),
    ]:
        with pytest.raises(RuntimeError, match=match):
            torch.ops.fused._conv3d_group_norm_mean_onepass_backward(
                torch.ones_like(out), args[0], args[1], args[2], mean, rstd, channel_mean, bad,
                *args[3:9], [True] * 5,
            )  # fmt: skip


def _training_step(args, grad_out):
    leaves = [args[i] for i in tensor_arg_indices(args)]
    out = torch.ops.fused.conv3d_group_norm_mean(*args)
    return (out, *torch.autograd.grad(out, leaves, grad_out))


@requires_cuda
def test_concurrent_gradients_give_the_same_bits(monkeypatch):
    """The lag input gradient and the Gram weight gradient run at once
    (FUSED_OPS_CONCURRENT_GRADS=1: the Gram kernels on a side stream, the workspaces apart, each
    chunked for its concurrent budget: at 64 samples 3 lag chunks and 4 Gram launches, where one
    after the other they take 2 and 1) give bitwise the output and gradients of one after the
    other (the default)."""
    torch.manual_seed(0)
    args = conv3d_args((64, 3, 24, 32, 32), 24, 3, 8, device="cuda", requires_grad=True)
    with torch.no_grad():
        args[0].uniform_(0.0, 1.0)
    grad_out = torch.randn(64, device="cuda")
    results = []
    for setting in ("1", "0", "1"):
        monkeypatch.setenv("FUSED_OPS_CONCURRENT_GRADS", setting)
        results.append(_training_step(args, grad_out))
    for concurrent, sequential, again in zip(*results):
        assert torch.equal(concurrent, sequential)
        assert torch.equal(concurrent, again)


@requires_cuda
def test_concurrent_gradients_in_a_cuda_graph(monkeypatch):
    """With FUSED_OPS_CONCURRENT_GRADS=1, a training step captured in a CUDA graph (the side
    stream joins the capture at its fork and leaves it at its join) replays, on new inputs, to
    the bits of the step run eagerly."""
    monkeypatch.setenv("FUSED_OPS_CONCURRENT_GRADS", "1")
    torch.manual_seed(0)
    args = conv3d_args((8, 3, 24, 32, 32), 24, 3, 8, device="cuda", requires_grad=True)
    grad_out = torch.randn(8, device="cuda")
    warm_up = torch.cuda.Stream()
    warm_up.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm_up):
        for _ in range(2):
            _training_step(args, grad_out)
    torch.cuda.current_stream().wait_stream(warm_up)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _training_step(args, grad_out)
    for _ in range(2):
        with torch.no_grad():
            args[0].copy_(torch.rand_like(args[0]))
        graph.replay()
        eager = _training_step(args, grad_out)
        for replayed, expected in zip(captured, eager):
            assert torch.equal(replayed, expected)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_backward_deterministic(dtype):
    """Two backward runs give bitwise-identical gradients (no atomics)."""
    args = conv3d_args((5, 3, 13, 17, 19), 24, 3, 8, padding=1, dtype=dtype, device="cuda")
    grad_out = torch.randn(5, dtype=dtype, device="cuda")
    leaves = [args[i] for i in tensor_arg_indices(args)]
    first = torch.autograd.grad(torch.ops.fused.conv3d_group_norm_mean(*args), leaves, grad_out)
    again = torch.autograd.grad(torch.ops.fused.conv3d_group_norm_mean(*args), leaves, grad_out)
    for a, b in zip(first, again):
        assert torch.equal(a, b)


@requires_cuda
def test_onepass_ops_opcheck():
    """The internal one-pass operators' schemas, Meta kernels and fake-tensor behaviour."""
    args = conv3d_args((2, 3, 6, 7, 8), 16, 3, 4, device="cuda", requires_grad=False)
    torch.library.opcheck(torch.ops.fused._conv3d_group_norm_mean_onepass_forward, args)
    out, mean, rstd, channel_mean, input_sums = (
        torch.ops.fused._conv3d_group_norm_mean_onepass_forward(*args)
    )
    for sums in (input_sums, None):
        backward_args = [torch.randn_like(out), args[0], args[1], args[2], mean, rstd,
                         channel_mean, sums, args[3], args[4], args[5], args[6], args[7], args[8],
                         [True, True, True, True, True]]  # fmt: skip
        torch.library.opcheck(
            torch.ops.fused._conv3d_group_norm_mean_onepass_backward, backward_args
        )


@requires_cuda
def test_onepass_ops_reject_problems_outside_the_family():
    args = conv3d_args((2, 20, 6, 7, 8), 8, 3, 4, device="cuda", requires_grad=False)
    with pytest.raises(RuntimeError, match="one-pass kernels' family"):
        torch.ops.fused._conv3d_group_norm_mean_onepass_forward(*args)
    cpu_args = conv3d_args((2, 3, 6, 7, 8), 8, 3, 4, requires_grad=False)
    with pytest.raises(RuntimeError, match="one-pass kernels' family"):
        torch.ops.fused._conv3d_group_norm_mean_onepass_forward(*cpu_args)


@requires_cuda
@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=lambda d: str(d).split(".")[-1])
def test_deterministic_and_layouts(dtype):
    """Bitwise equal across runs; channels-last and non-contiguous inputs give the same
    values as contiguous ones."""
    args = conv3d_args(
        (3, 3, 24, 32, 32), 24, 3, 8, dtype=dtype, device="cuda", requires_grad=False
    )
    args[0] = torch.rand_like(args[0])
    _, out = _check(args, dtype)
    with torch.no_grad():
        again = torch.ops.fused.conv3d_group_norm_mean(*args)
        cl = list(args)
        cl[0] = args[0].to(memory_format=torch.channels_last_3d)
        out_cl = torch.ops.fused.conv3d_group_norm_mean(*cl)
    assert torch.equal(out, again)
    assert torch.equal(out, out_cl)


@requires_cuda
@pytest.mark.parametrize("shape", [(2, 3, 5, 6, 8), (1, 4, 6, 5, 32), (2, 2, 4, 4, 12)])
def test_whole_row_loads_match_the_general_loads(shape):
    """Where every box row is a whole input row (no padding along W, one box across it) and x
    is 16-byte aligned, the tensor-core kernel loads rows by 16-byte copies
    (conv_input_box.cuh: load_full_input_rows_async; W = 12 leaves lanes idle); an input 4
    bytes off alignment takes the per-element loads. Same footprint, same bits."""
    args = conv3d_args(shape, 24, 3, 8, device="cuda", requires_grad=False)
    args[0] = torch.rand_like(args[0])
    misaligned = torch.empty(args[0].numel() + 1, device="cuda")[1:].view_as(args[0])
    misaligned.copy_(args[0])
    assert misaligned.data_ptr() % 16 != 0 and args[0].data_ptr() % 16 == 0
    path, out = _check(args, torch.float32)
    assert path == "onepass"
    with torch.no_grad():
        general = torch.ops.fused.conv3d_group_norm_mean(misaligned, *args[1:])
    assert torch.equal(out, general)


# (input shape, C_out, kernel, GroupNorm groups, other arguments) of problems whose float32
# forward on wgmma copies its footprints with the tensor memory accelerator
# (OnePassPlan::tma_footprint; cpp_tests/test_conv_ops.cpp checks the plans): padding
# along every dim (a multiple of 4 along W: the copies' first column stays 16-byte aligned), two
# boxes along W, conv groups (the box's channels from the group's first), dilation, N = 1.
TMA_CASES = {
    "padded": ((2, 3, 5, 6, 24), 16, 3, 8, dict(padding=(1, 2, 4))),
    "two_boxes_along_w": ((2, 2, 4, 5, 72), 8, 3, 4, {}),
    "conv_groups": ((2, 6, 4, 6, 32), 24, 3, 8, dict(groups=3)),
    "dilated_n1": ((1, 4, 7, 8, 40), 16, 3, 8, dict(dilation=2)),
}  # fmt: skip


@requires_cuda
@pytest.mark.parametrize("name", list(TMA_CASES))
def test_tensor_map_footprints_match_the_asynchronous_copies(name, monkeypatch):
    """Where the float32 forward on wgmma copies each footprint with the tensor memory
    accelerator (x 16-byte aligned), against float64; an input 4 bytes off alignment, and the
    copies switched off (FUSED_OPS_ONEPASS_TMA=0), load the same footprint layout by
    asynchronous copies: same bits."""
    shape, c_out, k, num_groups, kw = TMA_CASES[name]
    args = conv3d_args(shape, c_out, k, num_groups, **kw, device="cuda", requires_grad=False)
    args[0] = torch.rand_like(args[0])
    misaligned = torch.empty(args[0].numel() + 1, device="cuda")[1:].view_as(args[0])
    misaligned.copy_(args[0])
    path, out = _check(args, torch.float32)
    assert path == "onepass"
    with torch.no_grad():
        copied = torch.ops.fused.conv3d_group_norm_mean(misaligned, *args[1:])
        monkeypatch.setenv("FUSED_OPS_ONEPASS_TMA", "0")
        switched_off = torch.ops.fused.conv3d_group_norm_mean(*args)
    assert torch.equal(out, copied)
    assert torch.equal(out, switched_off)


# (input shape, C_out, kernel, GroupNorm groups, other arguments) of problems whose float32
# forward on wgmma loads its values in windows (OnePassPlan::windows: kW = 3 with stride and
# dilation 1 along W, boxes along W a multiple of 6 wide; cpp_tests/test_conv_ops.cpp checks the
# plans and the taps' order): 27 kernel rows (7 triples per quad of lanes, quad 3's last one
# padding: 3 pairs of triples and an odd last one with a padding slot), padding along every dim
# (asynchronous copies), conv groups of 4 input channels (36 rows: 9 triples per quad), stride
# and dilation along D and H, N = 1 with boxes overhanging the output, 30 rows (8 triples: pairs
# only), 3 and 12 rows (1 triple: no pair; 3: a pair and an odd one); chunks of 8, 16, 24 and
# 40 channels.
WINDOW_CASES = {
    "c_out_8": ((2, 3, 6, 8, 32), 8, 3, 4, {}),
    "even_triples": ((2, 5, 4, 5, 26), 16, (2, 3, 3), 8, {}),
    "one_triple": ((2, 1, 4, 5, 14), 8, (1, 3, 3), 4, {}),
    "three_triples": ((2, 4, 4, 5, 14), 8, (1, 3, 3), 4, {}),
    "padded": ((2, 3, 5, 7, 12), 24, 3, 8, dict(padding=1)),
    "conv_groups": ((1, 8, 4, 5, 20), 40, 3, 8, dict(groups=2)),
    "strided_dilated": ((2, 3, 9, 11, 26), 16, 3, 8, dict(stride=(2, 2, 1), dilation=(2, 1, 1))),
    "n1_overhanging": ((1, 3, 7, 9, 38), 16, 3, 8, {}),
}  # fmt: skip


@requires_cuda
@pytest.mark.parametrize("name", list(WINDOW_CASES))
def test_window_loads_against_float64(name, monkeypatch):
    """Where the float32 forward on wgmma loads its values in windows (the plans:
    cpp_tests/test_conv_ops.cpp; on wgmma the profile names the kernel that ran), against
    float64, with autograd (its training forward) and without; and with the windows switched off
    (FUSED_OPS_ONEPASS_WINDOWS=0: the same products in another order), against float64 too.
    (Both outputs may be the same bits: out[n] is one float32 per sample, whose rounding can
    hide the orders' difference.) Inputs from torch.rand, random GroupNorm affine and conv
    bias."""
    shape, c_out, k, num_groups, kw = WINDOW_CASES[name]
    args = conv3d_args(shape, c_out, k, num_groups, **kw, device="cuda", requires_grad=False)
    args[0] = torch.rand_like(args[0])
    path, _ = _check(args, torch.float32)
    assert path == "onepass"
    wgmma = fused_ops.onepass_products_kernel() == "wgmma"
    if wgmma:  # (onepass_tensor_core_kernel<NT, wgmma, windows>)
        assert _tensor_core_kernels(args) == {"true, true"}
    check_against_reference(
        OP, detach_args(args, requires_grad=True), grad_rtol=1e-4, grad_atol=5e-5
    )
    monkeypatch.setenv("FUSED_OPS_ONEPASS_WINDOWS", "0")
    _check(args, torch.float32)
    if wgmma:
        assert _tensor_core_kernels(args) == {"true, false"}


def _tensor_core_kernels(args) -> set:
    """The template arguments after NT of the one-pass tensor-core kernels that a forward
    without autograd launches (from the CUDA profile's kernel names)."""
    with (
        torch.no_grad(),
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof,
    ):
        torch.ops.fused.conv3d_group_norm_mean(*args)
        torch.cuda.synchronize()
    kernel = "onepass_tensor_core_kernel<"
    return {
        e.key.split(kernel, 1)[1].split(">", 1)[0].split(", ", 1)[1]
        for e in prof.key_averages()
        if kernel in e.key
    }


@requires_cuda
def test_many_tiles_per_block():
    """More tiles than resident blocks, over every digit of the tile index (boxes along each
    dim, W too: Wo = 68 takes two boxes; samples; channel chunks; two conv groups): each block
    steps through its tiles by carries (onepass_tensor_core_kernel's TileDigits), not
    divisions."""
    args = conv3d_args((40, 4, 12, 13, 70), 80, 3, 8, groups=2, device="cuda", requires_grad=False)
    args[0] = torch.rand_like(args[0])
    path, _ = _check(args, torch.float32)
    assert path == "onepass"


# (input shape, C_out, kernel, GroupNorm groups, other arguments) of float32 problems whose
# finalize kernel is launched as the tensor-core kernel's programmatic dependent: the
# headline's sample shape, more tiles than resident blocks over samples, channel chunks and
# conv groups, N = 1, one tile a sample.
DEPENDENT_FINALIZE_CASES = {
    "headline_n5": ((5, 3, 24, 32, 32), 24, 3, 8, {}),
    "many_tiles": ((40, 4, 12, 13, 70), 80, 3, 8, dict(groups=2)),
    "n1": ((1, 3, 9, 10, 11), 16, 3, 4, dict(padding=1)),
    "one_tile_a_sample": ((7, 2, 4, 4, 6), 8, 2, 2, {}),
}  # fmt: skip


@requires_cuda
@pytest.mark.parametrize("name", list(DEPENDENT_FINALIZE_CASES))
def test_dependent_finalize_matches_the_ordinary_launch(name, monkeypatch):
    """The finalize kernel launched as the tensor-core kernel's programmatic dependent (its
    blocks start before that kernel ends and wait for it) gives the bits of an ordinary launch
    (FUSED_OPS_ONEPASS_DEPENDENT_FINALIZE=0) in out and in every statistic the training
    forward saves, and float64's values and gradients."""
    shape, c_out, k, num_groups, kw = DEPENDENT_FINALIZE_CASES[name]
    args = conv3d_args(shape, c_out, k, num_groups, **kw, device="cuda", requires_grad=False)
    args[0] = torch.rand_like(args[0])
    path, out = _check(args, torch.float32)
    assert path == "onepass"
    forward = torch.ops.fused._conv3d_group_norm_mean_onepass_forward
    with torch.no_grad():
        dependent = forward(*args)
        monkeypatch.setenv("FUSED_OPS_ONEPASS_DEPENDENT_FINALIZE", "0")
        ordinary = forward(*args)
        out_ordinary = torch.ops.fused.conv3d_group_norm_mean(*args)
    assert torch.equal(out, out_ordinary)
    for a, b in zip(dependent, ordinary):
        assert (a is None and b is None) or torch.equal(a, b)
    monkeypatch.delenv("FUSED_OPS_ONEPASS_DEPENDENT_FINALIZE")
    check_against_reference(
        OP, detach_args(args, requires_grad=True), grad_rtol=1e-4, grad_atol=5e-5
    )


@requires_cuda
def test_finalize_in_a_cuda_graph():
    """Captured in a CUDA graph (where the finalize kernel is an ordinary launch), a forward
    without autograd replays, on new inputs, to the bits of the same forward run eagerly (a
    dependent launch)."""
    args = conv3d_args((8, 3, 12, 16, 18), 24, 3, 8, device="cuda", requires_grad=False)
    args[0] = torch.rand_like(args[0])
    op = torch.ops.fused.conv3d_group_norm_mean
    with torch.no_grad():
        warm_up = torch.cuda.Stream()
        warm_up.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warm_up):
            op(*args)
        torch.cuda.current_stream().wait_stream(warm_up)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = op(*args)
        for _ in range(3):
            args[0].copy_(torch.rand_like(args[0]))
            graph.replay()
            assert torch.equal(captured, op(*args))


@requires_cuda
@pytest.mark.parametrize(
    "c_in,kernel,c_out",
    [(4, (2, 2, 2), 40), (11, (1, 1, 3), 16), (4, (3, 3, 3), 24), (2, (4, 4, 4), 8)],
    ids=["K32", "K33", "K108", "K128"],
)
def test_reductions_across_weight_blocks(c_in, kernel, c_out):
    """Reductions of 32, 33, 108 and 128 taps (the tensor-core kernel's largest): on wgmma the
    weights sit in blocks of 32 taps, and the k steps walk from one block into the next;
    chunks of 8 (c_out 40 and 8), 16 and 24 channels."""
    args = conv3d_args((2, c_in, 7, 9, 12), c_out, kernel, 8, device="cuda", requires_grad=False)
    args[0] = torch.rand_like(args[0]) - 0.25
    path, _ = _check(args, torch.float32)
    assert path == "onepass"


@requires_cuda
def test_products_kernel_query():
    """Hopper (compute capability 9.0) runs the float32 forward's products on wgmma unless it is
    switched off; other GPUs with tensor cores on mma.sync; the CPU neither."""
    kernel = fused_ops.onepass_products_kernel()
    capability = torch.cuda.get_device_capability()
    if capability == (9, 0) and os.environ.get("FUSED_OPS_ONEPASS_WGMMA") != "0":
        assert kernel == "wgmma"
    elif capability >= (8, 0):
        assert kernel == "mma_sync"
    assert torch.ops.fused._conv3d_onepass_products_kernel(torch.empty(0)) == ""


_MMA_SYNC_SCRIPT = """
import sys, torch, fused_ops
sys.path.insert(0, {tests!r})
import test_conv3d_onepass as t
assert fused_ops.onepass_products_kernel() == "mma_sync", fused_ops.onepass_products_kernel()


def run(test, *args):  # (seeded as conftest seeds each test)
    torch.manual_seed(0)
    test(*args)


for seed in range(12):
    run(t.test_random_problems, seed, torch.float32)
for case in [(4, (2, 2, 2), 40), (11, (1, 1, 3), 16), (4, (3, 3, 3), 24), (2, (4, 4, 4), 8)]:
    run(t.test_reductions_across_weight_blocks, *case)
for shape in [(2, 3, 5, 6, 8), (1, 4, 6, 5, 32), (2, 2, 4, 4, 12)]:
    run(t.test_whole_row_loads_match_the_general_loads, shape)
run(t.test_many_tiles_per_block)
run(t.test_inputs_far_from_zero_as_accurate_as_eager)
for x_scale, spread in [(1e6, False), (1.0, True)]:  # (1e-6: a known miss, see the test)
    run(t.test_input_and_weight_scales_as_accurate_as_eager, x_scale, spread)
run(t.test_deterministic_and_layouts, torch.float32)
print("ok")
"""


@requires_cuda
def test_mma_sync_products_where_wgmma_runs():
    """Where the products run on wgmma, the mma.sync ones (the kernel other GPUs run, though
    there with their own TF32 rounding instructions) pass the same float32 checks: in a
    subprocess with FUSED_OPS_ONEPASS_WGMMA=0 (read once per process)."""
    if fused_ops.onepass_products_kernel() != "wgmma":
        pytest.skip("the products do not run on wgmma here: the other tests run mma.sync")
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, FUSED_OPS_ONEPASS_WGMMA="0")
    r = subprocess.run(
        [sys.executable, "-c", _MMA_SYNC_SCRIPT.format(tests=tests)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def _assert_as_accurate_as_eager_without_tf32(args):
    """The forward's relative error against float64 is within 2x that of eager's float32
    convolution and GroupNorm with TF32 off (the numerics contract)."""
    ref, _ = reference(OP, args)
    x, w, b, stride, padding, dilation, groups, num_groups, gn_w, gn_b, eps = args
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        out = torch.ops.fused.conv3d_group_norm_mean(*args)
        y = torch.nn.functional.conv3d(x, w, b, stride, padding, dilation, groups)
        eager = torch.nn.functional.group_norm(y, num_groups, gn_w, gn_b, eps).mean(
            dim=(1, 2, 3, 4)
        )

    def error(o):
        return ((o.double() - ref).norm() / ref.norm()).item()

    assert error(out) <= 2 * error(eager) + 1e-7, (error(out), error(eager))


@requires_cuda
def test_inputs_far_from_zero_as_accurate_as_eager():
    """x = 50 + rand: each channel's conv output has a mean ~100x its spread, where moments
    taken carelessly cancel. The output's error against float64 stays within 2x that of
    eager's float32 convolution and GroupNorm (TF32 off): the numerics contract in that
    regime. (The tiles' M2 comes from deviations summed around a shift near each warp's mean,
    its mean or one lane's, not from sum - count * mean, whose rounding grows with the
    mean.)"""
    args = conv3d_args((4, 3, 12, 14, 32), 24, 3, 8, device="cuda", requires_grad=False)
    args[0] = 50.0 + torch.rand_like(args[0])
    _assert_as_accurate_as_eager_without_tf32(args)


# The one known miss of the numerics contract: at x_scale 1e-6 the forward without autograd is
# 3.2x eager's error (2.98e-7 against 9.36e-8, H200, 2026-11-29); at x_scale 1 and 1e6 its error
# was 3.07e-7 and 2.77e-7 (eager's 1.51e-7 and 4.67e-7). The training forward, which takes the
# channel means exactly from x's sums, was at 4.2e-8 at 1e-6. The error stayed the same to all
# printed digits with the products' low parts rounded to nearest, with the moments combined in
# another order and on mma.sync. A float64 model with the convolution output uniformly ~4.5e-7
# too small reproduces it (benchmarks/h200-2026-11-29-tile-barrier/notes.txt, section 4), and
# the tensor cores' accumulation does round toward zero (33 products of exact positive operands:
# 1.3e-6 too small on average; benchmarks/h200-2026-11-29-k-step-parts/notes.txt, section 2).
_INFERENCE_MEANS_MISS = pytest.mark.xfail(
    strict=True, reason="the forward without autograd at 3.2x eager's error here (see above)"
)


@requires_cuda
@pytest.mark.parametrize(
    "x_scale, spread",
    [
        pytest.param(1e-6, False, marks=_INFERENCE_MEANS_MISS),
        (1e6, False),
        (2.0**-40, False),
        (1.0, True),
    ],
)
def test_input_and_weight_scales_as_accurate_as_eager(x_scale, spread):
    """Inputs far from 1, weights whose channels differ by 2^20 in scale, and (spread) inputs
    whose magnitudes span 12 decades within every tile: the output's error against float64
    stays within 2x eager's (TF32 off). (A products kernel that scales or splits its operands
    into a narrower format, as split float16 would, has to keep this.) The conv bias and
    GroupNorm's eps scale with small inputs, which they would otherwise swamp: a kernel that
    dropped x would then pass (error ~1e-13 at 2^-40, against ~1.5 with them scaled)."""
    small = min(x_scale, 1.0)
    args = conv3d_args(
        (3, 3, 12, 14, 32), 24, 3, 8, device="cuda", requires_grad=False, eps=1e-5 * small**2
    )
    x = torch.rand_like(args[0]) * x_scale
    if spread:
        x = x * torch.pow(10.0, torch.empty_like(x).uniform_(-6.0, 6.0))
    channel_scales = torch.pow(2.0, torch.linspace(-10.0, 10.0, 24, device="cuda"))
    args[0] = x
    args[1] = args[1] * channel_scales.view(-1, 1, 1, 1, 1)
    args[2] = args[2] * channel_scales * small
    _assert_as_accurate_as_eager_without_tf32(args)


@requires_cuda
def test_non_finite_input_stays_in_its_sample():
    """A NaN (or infinity) in one sample's input makes that sample's output NaN, as eager's,
    and leaves the other samples' outputs (whose tiles never hold it) as they were."""
    args = conv3d_args((3, 3, 12, 14, 32), 24, 3, 8, device="cuda", requires_grad=False)
    args[0] = torch.rand_like(args[0])
    with torch.no_grad():
        clean = torch.ops.fused.conv3d_group_norm_mean(*args)
        for bad in (float("nan"), float("inf")):
            x = args[0].clone()
            x[1, 2, 5, 7, 9] = bad
            out = torch.ops.fused.conv3d_group_norm_mean(x, *args[1:])
            eager = reference(OP, [x, *args[1:]])[0]
            assert torch.isnan(out[1]) and torch.isnan(eager[1])
            assert torch.equal(out[[0, 2]], clean[[0, 2]])


@requires_cuda
def test_empty_and_large_batch():
    args = conv3d_args((0, 3, 6, 7, 8), 12, 3, 4, device="cuda", requires_grad=False)
    with torch.no_grad():
        assert torch.ops.fused.conv3d_group_norm_mean(*args).shape == (0,)
    # More samples than resident blocks: the persistent grid walks every tile.
    args = conv3d_args((600, 2, 5, 6, 7), 8, 3, 2, device="cuda", requires_grad=False)
    _check(args, torch.float32)
    args = conv3d_args((600, 2, 5, 6, 7), 8, 3, 2, device="cuda", requires_grad=True)
    check_against_reference(OP, args, grad_rtol=1e-4, grad_atol=5e-5)
