"""The one-pass CUDA kernels of conv3d_group_norm_mean (the convolution's output never
written): which calls run them (fused_ops.dispatch_path), and their values against float64
over random parameter sets inside and outside their family, in every dtype."""

from __future__ import annotations

import random

import pytest
import torch

import fused_ops
from helpers import assert_close_to_ref, conv3d_args, reference, requires_cuda

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
def test_outside_the_family_runs_cudnn():
    """A reduction longer than the family's bound (C_in * k^3 = 20 * 27 > 512) runs cuDNN."""
    args = conv3d_args((2, 20, 6, 7, 8), 8, 3, 4, device="cuda", requires_grad=False)
    path, _ = _check(args, torch.float32)
    assert path == "aten_float32 -> group_norm_mean"


@requires_cuda
def test_path_with_and_without_autograd():
    """A call that autograd records saves the conv output for backward (cuDNN path)."""
    args = conv3d_args((2, 3, 8, 9, 10), 24, 3, 8, device="cuda", requires_grad=True)
    assert fused_ops.dispatch_path(OP, *args) == "aten_float32 -> group_norm_mean"
    with torch.no_grad():
        assert fused_ops.dispatch_path(OP, *args) == "onepass"
    model = fused_ops.Conv3dGroupNormMean(3, 24, 3, 8).cuda()
    x = torch.rand(2, 3, 8, 9, 10, device="cuda")
    with torch.inference_mode():
        out = model(x)
    assert out.shape == (2,)


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
def test_empty_and_large_batch():
    args = conv3d_args((0, 3, 6, 7, 8), 12, 3, 4, device="cuda", requires_grad=False)
    with torch.no_grad():
        assert torch.ops.fused.conv3d_group_norm_mean(*args).shape == (0,)
    # More samples than resident blocks: the persistent grid walks every tile.
    args = conv3d_args((600, 2, 5, 6, 7), 8, 3, 2, device="cuda", requires_grad=False)
    _check(args, torch.float32)
