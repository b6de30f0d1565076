"""Conditions beyond values on regular inputs: non-finite inputs propagate as the original
modules propagate them, many calls leave memory flat, and CUDA graphs capture and replay
both drop-ins (forward, and forward+backward) with eager's results, and the operators give
the same results on several CUDA streams at once as on the default stream."""

from __future__ import annotations

import gc
import os

import pytest
import torch
import torch.nn.functional as F

from helpers import assert_close_scaled, assert_same_run, drop_in_pair, requires_cuda

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


def _stream_inputs(k):
    """The inputs of side stream k's work (its own values, on the default stream)."""
    g = torch.Generator().manual_seed(1000 + k)

    def rand(*shape, mean=0.0):
        return (torch.randn(shape, generator=g, dtype=torch.float64) + mean).float().cuda()

    return {
        # Large enough that each stream's kernels are still running when the next stream's
        # are queued.
        "x": rand(4, 32, 12, 16, 20),
        "w": rand(32, mean=1.0),
        "b": rand(32),
        "grad": rand(4, 32, 12, 16, 20),
        "grad_n": rand(4),
        "ConvTranspose3dReLUGroupNorm": rand(4, 4, 8, 9, 10),
        "Conv3dGroupNormMean": rand(4, 3, 12, 14, 16),
    }


def _stream_work(inputs, modules):
    """Every fused operator forward and backward on one stream's inputs: {what: tensor}.
    Gradients come from torch.autograd.grad, not .backward(): the modules are shared by all
    streams, and accumulating into their .grad from several streams would mix them."""
    out = {}
    x = inputs["x"].detach().requires_grad_(True)
    w = inputs["w"].detach().requires_grad_(True)
    b = inputs["b"].detach().requires_grad_(True)
    y = torch.ops.fused.relu_group_norm(x, 8, w, b, 1e-5)
    out["relu_group_norm"] = y.detach()
    grads = torch.autograd.grad(y, [x, w, b], inputs["grad"])
    out.update({f"relu_group_norm grad {n}": g for n, g in zip("xwb", grads)})
    m = torch.ops.fused.group_norm_mean(x, 8, w, b, 1e-5)
    out["group_norm_mean"] = m.detach()
    grads = torch.autograd.grad(m, [x, w, b], inputs["grad_n"])
    out.update({f"group_norm_mean grad {n}": g for n, g in zip("xwb", grads)})
    for name, module in modules.items():
        xi = inputs[name].detach().requires_grad_(True)
        params = dict(module.named_parameters())
        y = module(xi)
        out[name] = y.detach()
        grads = torch.autograd.grad(y, [xi, *params.values()], torch.ones_like(y))
        out.update({f"{name} grad {n}": g for n, g in zip(["input", *params], grads)})
    return out


@requires_cuda
@pytest.mark.tf32_off
def test_ops_on_several_streams_match_the_default_stream():
    """Four side streams (torch.cuda.Stream) each run every fused operator and both drop-ins,
    forward and backward, on their own inputs, with their launches interleaved so that the
    streams' kernels overlap on the GPU; each stream's results equal those of the same inputs
    run on the default stream alone (so the operators launch on the current stream, and
    their workspaces and statistics are not shared between concurrent calls)."""
    modules = {name: _pair(name, "cuda")[1] for name in DROP_INS}
    inputs = [_stream_inputs(k) for k in range(4)]
    expected = [_stream_work(i, modules) for i in inputs]
    torch.cuda.synchronize()

    streams = [torch.cuda.Stream() for _ in inputs]
    for rounds in range(2):
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())  # the inputs are ready
        results = []
        for s, i in zip(streams, inputs):
            with torch.cuda.stream(s):
                results.append(_stream_work(i, modules))
        for s in streams:
            torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        for k, (got, want) in enumerate(zip(results, expected)):
            assert got.keys() == want.keys()
            for what in want:
                where = f"round {rounds}, stream {k}: {what}"
                if what.startswith("ConvTranspose3dReLUGroupNorm grad"):
                    # cuDNN's backward convolutions: another stream may get another float32
                    # algorithm, which differs by up to ~5e-4 of the largest magnitude
                    # (see test_cuda_graph_capture_and_replay).
                    assert_close_scaled(got[what], want[what], 5e-4, what=where)
                else:
                    assert_same_run(got[what], want[what], what=where)
        # Each stream's inputs give their own results (the comparison above is not between
        # copies of one computation).
        assert not torch.equal(results[0]["relu_group_norm"], results[1]["relu_group_norm"])
