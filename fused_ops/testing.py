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

__all__ = [
    "randomise_",
    "ErrorReport",
    "compare_with_original",
    "relative_l2_error",
    "ReluMaskReport",
    "compare_relu_gradients_on_own_masks",
]


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


def _error_report(eager, fused, eager_reference, fused_reference=None) -> ErrorReport:
    """Both runs' errors (each against its reference; by default the same one)."""
    return ErrorReport(
        eager_error=relative_l2_error(eager, eager_reference),
        fused_error=relative_l2_error(
            fused, eager_reference if fused_reference is None else fused_reference
        ),
        max_abs_diff=(fused.double() - eager.double()).abs().max().item() if eager.numel() else 0.0,
        allclose_1e5=bool(torch.allclose(fused, eager, atol=1e-5, rtol=1e-5)),
    )


def _runs_and_report(original, fused, x, grad, grad_output_seed):
    """compare_with_original's runs ({"eager", "fused"}: the tensors _run returns) and report."""
    reference = copy.deepcopy(original).double()
    runs = {
        "eager": _run(original, x, grad, grad_output_seed),
        "fused": _run(fused, x, grad, grad_output_seed),
    }
    ref = _run(reference, x.double(), grad, grad_output_seed)
    report = {
        what: _error_report(runs["eager"][what], runs["fused"][what], r) for what, r in ref.items()
    }
    return runs, report


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
    return _runs_and_report(original, fused, x, grad, grad_output_seed)[1]


@dataclass
class ReluMaskReport:
    """ConvTranspose3dReLUGroupNorm against float64 with ReLU's mask told apart (see
    compare_relu_gradients_on_own_masks): per model ("eager", "fused") the relative L2 error of
    its float32 convolution output, how many of its outputs have the other sign than
    float64's (ReLU "flips"), and each gradient's error against float64 arithmetic on that
    model's own mask; and ``plain``, compare_with_original's report of the same runs (against
    the float64 forward's own mask)."""

    conv_error: Dict[str, float]
    flips: Dict[str, int]
    gradients: Dict[str, ErrorReport]
    plain: Dict[str, ErrorReport]


def _conv_output_of_fused(fused: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    conv, gn = fused.conv_transpose, fused.group_norm
    return torch.ops.fused._conv_transpose3d_relu_group_norm_forward(
        x, conv.weight, conv.bias, conv.stride, conv.padding, conv.output_padding, conv.groups,
        conv.dilation, gn.num_groups, gn.weight, gn.bias, gn.eps,
    )[1]  # fmt: skip


def compare_relu_gradients_on_own_masks(
    original: torch.nn.Module,
    fused: torch.nn.Module,
    x: torch.Tensor,
    grad_output_seed: int = 1,
) -> ReluMaskReport:
    """For ``ConvTranspose3d -> ReLU -> GroupNorm`` (``reference.ConvTranspose3dReLUGroupNorm``
    and its drop-in, same parameters), under the current precision flags.

    A float32 convolution output within its rounding error of zero can land on the other
    side of zero than the float64 one; ReLU then passes the gradient there in one run and
    blocks it in the other, an O(1) difference at that element that no float32 computation
    can avoid (it cannot know the float64 sign). A handful of such elements dominate the
    gradients' error against plain float64 at large sizes, and how many there are is luck.
    So this measures the two things apart: each model's convolution output error (which sets
    the expected number of flips) and flip count, and its gradients against float64
    arithmetic that takes the model's own float32 mask (the backward's own accuracy), for the
    backward of ``sum(out * g)`` with compare_with_original's ``g``; and, from the same runs,
    compare_with_original's report."""
    import torch.nn.functional as F

    with torch.no_grad():
        conv64 = copy.deepcopy(original.conv_transpose).double()(x.double())
        conv32 = {"eager": original.conv_transpose(x), "fused": _conv_output_of_fused(fused, x)}
    gen = torch.Generator(device=x.device).manual_seed(grad_output_seed)
    g = torch.randn(conv64.shape, generator=gen, device=x.device, dtype=torch.float64)
    runs, plain = _runs_and_report(original, fused, x, True, grad_output_seed)
    reference_runs = {}
    for name in ("eager", "fused"):
        mask = (conv32[name] > 0).double()
        ref_model = copy.deepcopy(original).double()
        conv, gn = ref_model.conv_transpose, ref_model.group_norm
        x64 = x.detach().double().requires_grad_(True)
        out = F.group_norm(conv(x64) * mask, gn.num_groups, gn.weight, gn.bias, gn.eps)
        out.backward(g)
        reference_runs[name] = {"grad input": x64.grad}
        for pname, p in ref_model.named_parameters():
            reference_runs[name][f"grad {pname}"] = p.grad
    gradients = {
        what: _error_report(
            runs["eager"][what], runs["fused"][what], eager_ref, reference_runs["fused"][what]
        )
        for what, eager_ref in reference_runs["eager"].items()
    }
    return ReluMaskReport(
        conv_error={k: relative_l2_error(v, conv64) for k, v in conv32.items()},
        flips={k: int(((v > 0) != (conv64 > 0)).sum()) for k, v in conv32.items()},
        gradients=gradients,
        plain=plain,
    )
