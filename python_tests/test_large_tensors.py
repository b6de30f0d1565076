"""Tensors of more than 2^31 elements (CUDA only): relu_group_norm and group_norm_mean,
forward and backward, on a bfloat16 input of ~2.15-2.29 billion elements (4.3-4.6 GB; every
offset past 2^31 elements, and 2^32 bytes, must be computed in 64 bits), against a float64
PyTorch reference computed one (n, g) group at a time (GroupNorm's statistics and gradients
within a group depend on that group only, so F.group_norm with one group over the group's
channels is the whole reference there), which fits in memory.

A test holds at most four such tensors at once (input, output, output gradient, input
gradient: ~18 GB) plus the reference of one group (< 3 GB), and skips unless 40 GiB of GPU
memory are free when it starts.
"""

from __future__ import annotations

import gc
import math

import pytest
import torch
import torch.nn.functional as F

import fused_ops
from helpers import cuda_skip_reason

NEEDED_FREE_BYTES = 40 * 2**30
GROUPS = 16
EPS = 1e-5

# (N, C, D, H, W): N * C * D * H * W > 2^31. 16 groups of 2 channels, 64 (n, g) groups of
# 33.6M (35.7M) elements. HxW a multiple of 8 runs the 128-bit kernels; an odd HxW the
# scalar ones.
SHAPES = {
    "vectorized": (4, 32, 16, 1024, 1025),
    "scalar": (4, 32, 17, 1023, 1027),
}


def _skip_reason():
    reason = cuda_skip_reason()
    if reason is not None:
        return reason
    total = torch.cuda.get_device_properties(0).total_memory
    if total < NEEDED_FREE_BYTES:
        return (
            f"needs {NEEDED_FREE_BYTES / 2**30:.0f} GiB of GPU memory; "
            f"{torch.cuda.get_device_name(0)} has {total / 2**30:.1f} GiB"
        )
    return None


pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or ""),
]


@pytest.fixture
def free_gpu_memory():
    """Skips unless NEEDED_FREE_BYTES are free now; returns the cached memory afterwards."""
    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    if free < NEEDED_FREE_BYTES:
        pytest.skip(
            f"needs {NEEDED_FREE_BYTES / 2**30:.0f} GiB of free GPU memory, "
            f"{free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB"
        )
    yield
    gc.collect()
    torch.cuda.empty_cache()


def _big_input(shape):
    """A bfloat16 input with per-(n, c) scale and offset, so that statistics or values read
    from another group, sample or channel would be visibly wrong."""
    N, C = shape[:2]
    assert math.prod(shape) > 2**31
    x = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
    scale = torch.rand(N, C, 1, 1, 1, device="cuda") * 1.5 + 0.5
    offset = torch.randn(N, C, 1, 1, 1, device="cuda")
    x.mul_(scale.to(torch.bfloat16)).add_(offset.to(torch.bfloat16))
    return x


def _affine(C):
    """Random GroupNorm weight and bias (bfloat16, as the input), requiring grad."""
    w = (torch.rand(C, device="cuda") + 0.5).to(torch.bfloat16).requires_grad_(True)
    b = torch.randn(C, device="cuda").to(torch.bfloat16).requires_grad_(True)
    return w, b


class _Comparison:
    """A bfloat16 result against its float64 reference, piece by piece:
    |actual - expected| <= 2^-7 |expected| + 1e-3 * (largest |expected| over all pieces).
    2^-7 is two bfloat16 rounding units (the kernels compute in float32 and double and round
    once); the absolute part covers float32 arithmetic near zero (~1e-6 of the largest
    magnitude), and is taken over the whole tensor because a group's gradient can vanish
    (e.g. group_norm_mean's input gradient in a group whose channels have equal weights). A
    value read from the wrong place is off by the order of the largest magnitude."""

    RTOL = 2**-7
    ATOL = 1e-3

    def __init__(self, what):
        self.what = what
        self.scale = 0.0
        self.worst = None  # (excess over RTOL * |expected|, |difference|, where)

    def add(self, actual, expected, where=""):
        assert actual.dtype == torch.bfloat16, f"{self.what} {where}: {actual.dtype}"
        assert actual.shape == expected.shape, f"{self.what} {where}: {actual.shape}"
        actual = actual.detach().to(torch.float64)
        assert torch.isfinite(actual).all(), f"{self.what} {where}: non-finite values"
        diff = (actual - expected).abs()
        excess = (diff - self.RTOL * expected.abs()).max().item()
        self.scale = max(self.scale, expected.abs().max().item())
        if self.worst is None or excess > self.worst[0]:
            self.worst = (excess, diff.max().item(), where)

    def check(self):
        excess, diff, where = self.worst
        assert excess <= self.ATOL * self.scale, (
            f"{self.what}{' at ' + where if where else ''}: |actual - expected| exceeds "
            f"2^-7 |expected| by {excess:.3e} (max |actual - expected| {diff:.3e}), more than "
            f"1e-3 of the largest |expected| ({self.scale:.3e})"
        )


def _assert_close_bf16(actual, expected, what):
    comparison = _Comparison(what)
    comparison.add(actual, expected)
    comparison.check()


def _group_slices(shape):
    """(n, channel slice) of every (n, g) group: x[n, channels] is contiguous."""
    N, C = shape[:2]
    cg = C // GROUPS
    return [(n, slice(g * cg, (g + 1) * cg)) for n in range(N) for g in range(GROUPS)]


def _leaf64(t):
    return t.detach().to(torch.float64).requires_grad_(True)


@pytest.mark.parametrize("layout", list(SHAPES))
def test_relu_group_norm_bfloat16_over_2_31_elements(layout, free_gpu_memory):
    shape = SHAPES[layout]
    x = _big_input(shape).requires_grad_(True)
    w, b = _affine(shape[1])
    y = torch.ops.fused.relu_group_norm(x, GROUPS, w, b, EPS)
    dy = torch.randn_like(y)
    dx, dw, db = torch.autograd.grad(y, [x, w, b], dy)
    y = y.detach()
    torch.cuda.synchronize()

    dw_ref = torch.zeros(shape[1], dtype=torch.float64, device="cuda")
    db_ref = torch.zeros_like(dw_ref)
    outputs = _Comparison(f"relu_group_norm output ({layout})")
    input_grads = _Comparison(f"relu_group_norm input gradient ({layout})")
    for n, cs in _group_slices(shape):
        xs, ws, bs = _leaf64(x[n, cs].unsqueeze(0)), _leaf64(w[cs]), _leaf64(b[cs])
        ys = F.group_norm(F.relu(xs), 1, ws, bs, EPS)
        where = f"n={n}, channels {cs.start}..{cs.stop - 1}"
        outputs.add(y[n, cs], ys.detach()[0], where)
        gx, gw, gb = torch.autograd.grad(ys, [xs, ws, bs], dy[n, cs].unsqueeze(0).double())
        input_grads.add(dx[n, cs], gx[0], where)
        dw_ref[cs] += gw
        db_ref[cs] += gb
        del xs, ys, gx
    outputs.check()
    input_grads.check()
    _assert_close_bf16(dw, dw_ref, f"relu_group_norm weight gradient ({layout})")
    _assert_close_bf16(db, db_ref, f"relu_group_norm bias gradient ({layout})")


@pytest.mark.parametrize("layout", [*SHAPES, "channels_last"])
def test_group_norm_mean_bfloat16_over_2_31_elements(layout, free_gpu_memory):
    """Contiguous inputs (the (N, C, HxW) kernels), and a channels_last_3d one, which the
    forward reads in place (group_norm_mean_channels_last_cuda.cu)."""
    shape = SHAPES["vectorized" if layout == "channels_last" else layout]
    N, C = shape[:2]
    elements_per_sample = math.prod(shape[1:])
    x = _big_input(shape)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last_3d)
    x.requires_grad_(True)
    w, b = _affine(C)
    kernel = "group_norm_mean_channels_last" if layout == "channels_last" else "group_norm_mean"
    assert fused_ops.dispatch_path("group_norm_mean", x, GROUPS, w, b, EPS) == kernel
    out = torch.ops.fused.group_norm_mean(x, GROUPS, w, b, EPS)
    grad_out = torch.randn_like(out)
    dx, dw, db = torch.autograd.grad(out, [x, w, b], grad_out)
    out = out.detach()
    torch.cuda.synchronize()

    # out[n] = sum over its groups of (sum of the group's normalised values) / (C * HxW).
    out_ref = torch.zeros(N, dtype=torch.float64, device="cuda")
    dw_ref = torch.zeros(C, dtype=torch.float64, device="cuda")
    db_ref = torch.zeros_like(dw_ref)
    input_grads = _Comparison(f"group_norm_mean input gradient ({layout})")
    for n, cs in _group_slices(shape):
        xs, ws, bs = _leaf64(x[n, cs].unsqueeze(0)), _leaf64(w[cs]), _leaf64(b[cs])
        part = F.group_norm(xs, 1, ws, bs, EPS).sum() / elements_per_sample
        out_ref[n] += part.detach()
        gx, gw, gb = torch.autograd.grad(part, [xs, ws, bs], grad_out[n].double())
        input_grads.add(dx[n, cs], gx[0], f"n={n}, channels {cs.start}..{cs.stop - 1}")
        dw_ref[cs] += gw
        db_ref[cs] += gb
        del xs, part, gx
    input_grads.check()
    _assert_close_bf16(out, out_ref, f"group_norm_mean output ({layout})")
    _assert_close_bf16(dw, dw_ref, f"group_norm_mean weight gradient ({layout})")
    _assert_close_bf16(db, db_ref, f"group_norm_mean bias gradient ({layout})")
