"""Conditions beyond values on regular inputs: non-finite inputs propagate as the original
modules propagate them, many calls leave memory flat, and CUDA graphs capture and replay
both drop-ins (forward, and forward+backward) with eager's results."""

from __future__ import annotations

import gc
import os

import pytest
import torch
import torch.nn.functional as F

from helpers import assert_close_scaled, drop_in_pair, requires_cuda

DROP_INS = {
    "ConvTranspose3dReLUGroupNorm": (
        dict(in_channels=4, out_channels=8, kernel_size=3, groups=2, bias=True),
        (2, 4, 4, 5, 6),
    ),
    "Conv3dGroupNormMean": (
        dict(in_channels=3, out_channels=24, kernel_size=3, num_groups=8),
        (3, 3, 6, 7, 8),
    ),
}


def _pair(name, device):
    init, shape = DROP_INS[name]
    return (*drop_in_pair(name, init, device), shape)


def _with_non_finite(x):
    x = x.clone()
    flat = x.view(-1)
    flat[flat.numel() // 3] = float("nan")
    flat[2 * flat.numel() // 3] = float("inf")
    flat[-1] = float("-inf")
    return x


@pytest.mark.tf32_off
@pytest.mark.parametrize("name", list(DROP_INS))
def test_non_finite_input_propagates_like_the_original(device, name):
    original, fused, shape = _pair(name, device)
    x = _with_non_finite(torch.rand(shape, device=device))
    with torch.no_grad():
        expected, got = original(x), fused(x)
    assert torch.equal(got.isnan(), expected.isnan()), (got, expected)
    assert torch.equal(got.isinf(), expected.isinf())
    finite = expected.isfinite()
    torch.testing.assert_close(got[finite], expected[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["relu_group_norm", "group_norm_mean"])
def test_non_finite_input_norm_ops(device, op):
    x = _with_non_finite(torch.randn(2, 8, 5, 6, device=device))
    w = torch.rand(8, device=device) + 0.5
    b = torch.randn(8, device=device)
    got = getattr(torch.ops.fused, op)(x, 4, w, b, 1e-5)
    y = F.group_norm(torch.relu(x) if op == "relu_group_norm" else x, 4, w, b)
    expected = y.mean(dim=[1, 2, 3]) if op == "group_norm_mean" else y
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.isinf(), expected.isinf())


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc (Linux)")
def test_many_calls_leave_memory_flat(device):
    """10,000 calls (forward, and forward+backward every 10th) of every operator: host
    memory grows by less than 16 MiB after the warm-up, CUDA memory not at all."""
    x = torch.randn(2, 8, 4, 4, device=device, requires_grad=True)
    w = torch.rand(8, device=device) + 0.5
    _, fused, shape = _pair("Conv3dGroupNormMean", device)
    xc = torch.rand(1, 3, 4, 5, 6, device=device, requires_grad=True)

    def call(i):
        y = torch.ops.fused.relu_group_norm(x, 4, w, None, 1e-5)
        m = torch.ops.fused.group_norm_mean(x, 4, w, None, 1e-5)
        if i % 10 == 0:
            (y.sum() + m.sum() + fused(xc).sum()).backward()

    for i in range(500):
        call(i)
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        cuda_before = torch.cuda.memory_allocated()
    rss_before = _rss_bytes()
    for i in range(10_000):
        call(i)
    gc.collect()
    grown = _rss_bytes() - rss_before
    assert grown < 16 * 2**20, f"host memory grew by {grown / 2**20:.1f} MiB"
    if device == "cuda":
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == cuda_before


@requires_cuda
@pytest.mark.tf32_off
@pytest.mark.parametrize("name", list(DROP_INS))
def test_cuda_graph_capture_and_replay(name):
    """Forward (no grad) and forward+backward captured with torch.cuda.graph, replayed on new
    data: eager's results (so the ops make no host synchronisation or allocation that capture
    forbids)."""
    original, fused, shape = _pair(name, "cuda")
    static_x = torch.rand(shape, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up outside capture (cuDNN plans, allocator pools)
            with torch.no_grad():
                fused(static_x)
            fused(static_x).sum().backward()
    torch.cuda.current_stream().wait_stream(side)

    forward_graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(forward_graph):
        static_out = fused(static_x)
    fused.zero_grad(set_to_none=True)
    training_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(training_graph):
        static_loss = fused(static_x).sum()
        static_loss.backward()

    for _ in range(2):
        new_x = torch.rand(shape, device="cuda")
        static_x.copy_(new_x)
        forward_graph.replay()
        training_graph.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            expected = fused(new_x)
        torch.testing.assert_close(static_out, expected, rtol=1e-5, atol=1e-6)
        original.zero_grad(set_to_none=True)
        original(new_x).sum().backward()
        # The transposed convolution's gradients are cuDNN's, whose float32 algorithms (chosen
        # per call, e.g. by the workspace free during capture) differ by up to ~5e-4 of the
        # largest magnitude at these sizes (test_numerics_contract.py measures the spread).
        for (pname, p), q in zip(original.named_parameters(), fused.parameters()):
            assert_close_scaled(q.grad, p.grad, 5e-4, what=pname)
