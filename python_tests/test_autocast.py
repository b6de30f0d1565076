"""Under torch.autocast the drop-ins follow the original modules: the same result dtype
(float32 on CUDA, where GroupNorm is an autocast float32 op; the autocast dtype on the CPU,
where it is not), the convolution in the autocast dtype, and values and gradients as close
to the original's as the low-precision convolution allows. The Autocast kernels are
registered in C++ (registration/autocast.cpp), so a scripted model sees them too."""

from __future__ import annotations

import pytest
import torch

from helpers import drop_in_pair, requires_torchscript

LOW = [torch.bfloat16, torch.float16]

MODELS = {
    "ConvTranspose3dReLUGroupNorm": (
        dict(in_channels=4, out_channels=8, kernel_size=3, groups=2, bias=True),
        (2, 4, 5, 6, 7),
    ),
    "Conv3dGroupNormMean": (
        dict(in_channels=3, out_channels=8, kernel_size=3, num_groups=4),
        (3, 3, 6, 7, 8),
    ),
}
# Fused vs original under autocast, relative to the largest magnitude: both round the
# convolution to the autocast dtype (the same ATen call); GroupNorm runs in float32 in the
# fused op (on the CPU the original's runs in the autocast dtype).
TOL = {torch.bfloat16: 3e-2, torch.float16: 4e-3}


def _pair(name, device):
    init, shape = MODELS[name]
    return (*drop_in_pair(name, init, device), shape)


def _close(actual, expected, tol, what):
    scale = max(expected.detach().abs().max().item(), 1e-3)
    torch.testing.assert_close(
        actual.detach().double(), expected.detach().double(), rtol=tol, atol=tol * scale, msg=what
    )


@pytest.mark.parametrize("dtype", LOW, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_drop_in_follows_the_original(device, name, dtype):
    original, fused, shape = _pair(name, device)
    x = torch.rand(shape, device=device)
    x_ref = x.clone().requires_grad_(True)
    x_fused = x.clone().requires_grad_(True)
    with torch.autocast(device, dtype=dtype):
        expected = original(x_ref)
        got = fused(x_fused)
    assert got.dtype == expected.dtype == (torch.float32 if device == "cuda" else dtype)
    _close(got, expected, TOL[dtype], f"{name} output")
    grad = torch.randn_like(expected)
    expected.backward(grad)
    got.backward(grad)
    _close(x_fused.grad, x_ref.grad, TOL[dtype], f"{name} input grad")
    for (pname, p), q in zip(original.named_parameters(), fused.parameters()):
        assert q.grad is not None and q.grad.dtype == p.grad.dtype == torch.float32
        _close(q.grad, p.grad, TOL[dtype], f"{name} grad of {pname}")


@pytest.mark.parametrize("op", ["relu_group_norm", "group_norm_mean"])
def test_norm_ops_follow_group_norm(device, op):
    """GroupNorm under autocast: float32 on CUDA; on the CPU its input's dtype (with float32
    weight and bias)."""
    x = torch.randn(2, 8, 5, 6, device=device)
    w = torch.rand(8, device=device) + 0.5
    b = torch.randn(8, device=device)
    low = torch.bfloat16
    for inp in (x, x.to(low)):
        with torch.autocast(device, dtype=low):
            got = getattr(torch.ops.fused, op)(inp, 4, w, b, 1e-5)
            y = torch.nn.functional.group_norm(
                torch.relu(inp) if op == "relu_group_norm" else inp, 4, w, b
            )
            expected = y.mean(dim=[1, 2, 3]) if op == "group_norm_mean" else y
        assert got.dtype == expected.dtype, (inp.dtype, got.dtype, expected.dtype)
        _close(got, expected, TOL[low], f"{op} ({inp.dtype} input)")


def test_float64_is_left_alone(device):
    original, fused, shape = _pair("Conv3dGroupNormMean", device)
    fused = fused.double()
    x = torch.rand(shape, device=device, dtype=torch.float64)
    with torch.autocast(device, dtype=torch.bfloat16):
        assert fused(x).dtype == torch.float64


@requires_torchscript
def test_scripted_model_under_autocast():
    original, fused, shape = _pair("Conv3dGroupNormMean", "cpu")
    scripted = torch.jit.script(fused)
    x = torch.rand(shape)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = scripted(x)
        expected = original(x)
    assert got.dtype == expected.dtype == torch.bfloat16
    _close(got, expected, TOL[torch.bfloat16], "scripted output")
