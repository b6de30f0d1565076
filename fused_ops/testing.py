"""Helpers to check a drop-in module against the module it replaces, against float64.

Used by the test suite and by ``benchmarks/numerics.py``; also handy to check the drop-ins
on your own models and inputs::

    from fused_ops import reference, testing
    original = testing.randomise_(reference.Conv3dGroupNormMean(3, 24, 3, 8)).cuda()
    fused = fused_ops.Conv3dGroupNormMean(3, 24, 3, 8).cuda()
    fused.load_state_dict(original.state_dict())
    for what, e in testing.compare_with_original(original, fused, x, grad=True).items():
        print(what, e.eager_error, e.fused_error)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Dict

import torch

__all__ = ["randomise_", "ErrorReport", "compare_with_original", "relative_l2_error"]


def randomise_(model: torch.nn.Module, seed: int = None) -> torch.nn.Module:
    """Random GroupNorm affine and conv bias, in place (returns the model).

    GroupNorm's default init (weight 1, bias 0) makes ``Conv3d -> GroupNorm -> mean`` return
    0 for every input, so a check with it cannot fail: always randomise first. Conv weights
    keep their (random) init, rescaled by 1 + 0.1 * randn.
    """
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p)
            if name.endswith("group_norm.weight"):
                p.copy_(1.0 + 0.5 * noise)
            elif name.endswith("bias"):
                p.copy_(0.5 * noise)
            else:
                p.mul_(1.0 + 0.1 * noise)
    return model


def relative_l2_error(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """||actual - reference|| / ||reference|| in float64."""
    reference = reference.detach().double()
    diff = actual.detach().to(device=reference.device, dtype=torch.float64) - reference
    return (diff.norm() / reference.norm().clamp_min(1e-300)).item()


@dataclass
class ErrorReport:
    """One output or gradient: both models' relative L2 error against float64, and how the
    drop-in differs from the original."""

    eager_error: float
    fused_error: float
    max_abs_diff: float
    allclose_1e5: bool  # torch.allclose(fused, original, atol=1e-5, rtol=1e-5)

    @property
    def ratio(self) -> float:
        return self.fused_error / max(self.eager_error, 1e-300)


def _run(model: torch.nn.Module, x: torch.Tensor, grad: bool, grad_output_seed: int):
    x = x.detach().clone().requires_grad_(grad)
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(grad):
        out = model(x)
        tensors = {"output": out.detach()}
        if grad:
            gen = torch.Generator(device=out.device).manual_seed(grad_output_seed)
            g = torch.randn(out.shape, generator=gen, device=out.device, dtype=torch.float64)
            out.backward(g.to(out.dtype))
            tensors["grad input"] = x.grad
            for name, p in model.named_parameters():
                tensors[f"grad {name}"] = p.grad
    return tensors


def compare_with_original(
    original: torch.nn.Module,
    fused: torch.nn.Module,
    x: torch.Tensor,
    grad: bool = False,
    grad_output_seed: int = 1,
) -> Dict[str, ErrorReport]:
    """Runs ``original`` and ``fused`` (same parameters) on ``x``, and a float64 copy of
    ``original`` on ``x`` in float64, under the current precision flags; returns an
    ErrorReport for the output and, with ``grad``, for the input gradient and every
    parameter gradient (backward of ``sum(out * g)`` for a random ``g``)."""
    reference = copy.deepcopy(original).double()
    runs = [
        _run(m, xin, grad, grad_output_seed)
        for m, xin in ((original, x), (fused, x), (reference, x.double()))
    ]
    eager, fused_t, ref = runs
    report = {}
    for what, r in ref.items():
        e, f = eager[what], fused_t[what]
        report[what] = ErrorReport(
            eager_error=relative_l2_error(e, r),
            fused_error=relative_l2_error(f, r),
            max_abs_diff=(f.double() - e.double()).abs().max().item() if e.numel() else 0.0,
            allclose_1e5=bool(torch.allclose(f, e, atol=1e-5, rtol=1e-5)),
        )
    return report
