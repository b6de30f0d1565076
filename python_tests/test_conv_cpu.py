"""CPU passes of fused::conv3d_group_norm_mean that run by chunks of the batch
(ops/conv/conv_stage.cpp: cpu_batch_chunks): the forward without autograd (the values of the
forward that runs the batch whole, the one a training step takes, and accurate against
float64) and the backward (every gradient at least as close to float64 as eager PyTorch's),
for chunks of equal and unequal sizes and for channels-last inputs."""

from __future__ import annotations

import copy

import pytest
import torch

from helpers import (
    assert_close_scaled,
    assert_close_to_ref,
    conv3d_args,
    detach_args,
    forward_backward,
    fused_op,
    make_pair,
    reference,
)

# Conv3d 3 -> 24, k3: 1.9 MB of convolution output per sample, so chunks of 4 samples (at least
# 4, about 8 MiB each).
SHAPES = {
    "three_chunks": (10, 3, 24, 32, 32),  # 3, 3 and 4 samples
    "two_chunks": (5, 3, 24, 32, 32),  # 2 and 3 samples
    "whole": (4, 3, 24, 32, 32),  # one chunk: the batch whole
}


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_conv3d_group_norm_mean_by_chunks(name, channels_last):
    args = conv3d_args(SHAPES[name], 24, 3, 8, requires_grad=False)
    if channels_last:
        args[0] = args[0].contiguous(memory_format=torch.channels_last_3d)
    op = fused_op("conv3d_group_norm_mean")
    with torch.no_grad():
        out = op(*args)
    # With autograd recording, the forward runs the batch whole (its conv output is saved).
    whole = op(*detach_args(args, requires_grad=True)).detach()
    assert_close_scaled(out, whole, 1e-6, what=f"{name}: by chunks vs whole")
    ref, _ = reference("conv3d_group_norm_mean", args)
    assert_close_to_ref(out, ref, what=f"{name} output")


def _relative_error(actual, expected):
    return ((actual.double() - expected).abs().max() / expected.abs().max()).item()


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_conv3d_group_norm_mean_backward_by_chunks(name, channels_last):
    shape = SHAPES[name]
    original, fused, _ = make_pair("conv3d_group_norm_mean")
    x = torch.rand(shape)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    with torch.profiler.profile() as prof:
        out, g, gx, grads = forward_backward(fused, x)
    calls = sum(e.count for e in prof.key_averages() if e.key == "aten::convolution_backward")
    assert calls == {"three_chunks": 3, "two_chunks": 2, "whole": 1}[name]
    _, _, eager_gx, eager_grads = forward_backward(original, x, g)
    _, _, ref_gx, ref_grads = forward_backward(copy.deepcopy(original).double(), x.double(), g)
    if channels_last:
        assert gx.is_contiguous(memory_format=torch.channels_last_3d)
    pairs = [("input", gx, eager_gx, ref_gx)]
    pairs += [(n, grads[n], eager_grads[n], ref_grads[n]) for n in ref_grads]
    for what, actual, eager, ref in pairs:
        # At these sizes a float32 parameter gradient sums ~10^5 terms: held to eager's error.
        assert _relative_error(actual, ref) <= 2 * _relative_error(eager, ref) + 1e-6, what
