"""The backward of ConvTranspose3dReLUGroupNorm without the conv output's gradient in memory
(sm_90 devices, builds with CUTLASS): the GroupNorm backward gives per-(n, c) coefficients, and
both convolutions of the backward (the input gradient on the plane-box kernel,
ops/conv/wgmma_plane_conv3d.cuh; the weight gradient, ops/conv/split_tf32_wgmma_wgrad.cuh)
compute dy = x > 0 ? c1 g + c2 x + c3 : 0 from the output gradient g and the saved conv output
x as they load them (ops/conv/norm_grad_operand.cuh). The conv bias's gradient comes from the
GroupNorm's sums pass. Opted into with FUSED_OPS_NORM_GRAD_OPERAND=1 (slower than writing dy at
the headline); by default the backward writes dy.

Against float64 in both TF32 modes, over shapes where the kernels' runs of positions cross the
rows (narrow widths), partial channel tiles and chunks (36, 200 channels), padding and
dilation, N = 1; that the backward ran these kernels and no elementwise pass; the same
gradients as the written-dy path; bitwise-equal runs; less peak memory than the written-dy
path by about dy's size."""

from __future__ import annotations

import pytest
import torch

from helpers import (
    backward_kernel_names,
    check_against_reference,
    check_conv_transpose_tf32_gradients,
    conv_transpose_args,
    cuda_marks,
    runs_wgmma,
)

pytestmark = cuda_marks()

SWITCH = "FUSED_OPS_NORM_GRAD_OPERAND"
PLANE_KERNEL = "wgmma_plane_conv3d_kernel"
WGRAD_KERNEL = "split_tf32_wgmma_wgrad_kernel"
DY_PASS = "relu_backward_input_channels_last_kernel"

# (input shape, C_out, kernel, GroupNorm groups, other arguments): TF32 off (split products).
# Every conv output has a multiple of 4 positions (the kernels' tensor maps).
SPLIT_CASES = {
    "w8_h6": ((2, 8, 5, 6, 8), 16, 3, 4, {}),
    "w36_n1": ((1, 12, 4, 5, 36), 16, 3, 4, {}),
    "w32_c64_c128": ((2, 64, 4, 9, 32), 128, 3, 8, {}),
    "w40_c36_c200_pad1": ((1, 36, 3, 4, 40), 200, 3, 8, dict(padding=1)),
    "w8_k312_dilated": ((2, 12, 3, 4, 8), 8, (3, 1, 2), 2, dict(padding=(1, 0, 1), dilation=2)),
    "no_bias_no_affine": ((2, 8, 4, 6, 8), 16, 3, 4, dict(conv_bias=False, gn_affine=False)),
}  # fmt: skip

# (input shape, C_out, GroupNorm groups): TF32 allowed, 3x3x3, stride 1, no padding.
TF32_CASES = {
    "w32_h9": ((2, 16, 4, 9, 32), 32, 8),
    "w8_n1_c72": ((1, 72, 4, 6, 8), 16, 4),
    "w36_c36": ((2, 36, 4, 5, 36), 8, 2),
}


@pytest.fixture(autouse=True)
def norm_grad_operand(monkeypatch):
    monkeypatch.setenv(SWITCH, "1")  # (read per call)


def _assert_ran_from_norm(names):
    if not runs_wgmma():
        return
    assert any(PLANE_KERNEL in n for n in names), names
    assert any(WGRAD_KERNEL in n for n in names), names
    assert not any(DY_PASS in n for n in names), names


@pytest.mark.parametrize("case", list(SPLIT_CASES))
def test_split_gradients_vs_float64(case, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    shape, c_out, k, groups, kw = SPLIT_CASES[case]
    torch.manual_seed(sum(map(ord, case)))
    args = conv_transpose_args(shape, c_out, k, groups, device="cuda", **kw)
    check_against_reference("conv_transpose3d_relu_group_norm", args)
    out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
    _assert_ran_from_norm(backward_kernel_names(out))


@pytest.mark.parametrize("case", list(TF32_CASES))
def test_tf32_gradients_vs_float64(case, monkeypatch):
    """Every gradient at most twice eager's error against float64 (on each model's own ReLU
    mask: testing.compare_relu_gradients_on_own_masks), as the library's other TF32 kernels."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    torch.manual_seed(sum(map(ord, case)))
    fused, x = check_conv_transpose_tf32_gradients(*TF32_CASES[case])
    _assert_ran_from_norm(backward_kernel_names(fused(x.clone().requires_grad_())))


def _gradients(args, grad_out):
    args = [a.detach().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    return torch.autograd.grad(out, inputs, grad_out)


@pytest.mark.parametrize("tf32", [False, True], ids=["tf32_off", "tf32"])
def test_same_gradients_as_written_dy(tf32, monkeypatch):
    """The same dy values (relu_group_norm_input_grad, once per value either way) through the
    same products: the gradients agree with the path that writes dy to within the rounding of
    the sums' order (the conv bias's: from the sums pass here, from dy's tiles there)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    torch.manual_seed(11)
    args = conv_transpose_args((2, 16, 4, 9, 32), 32, 3, 8, device="cuda")
    out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
    grad_out = torch.randn_like(out)
    fused = _gradients(args, grad_out)
    monkeypatch.setenv(SWITCH, "0")
    written = _gradients(args, grad_out)
    assert len(fused) == len(written) == 5
    for a, b in zip(fused, written):
        scale = b.abs().max().item()
        assert (a - b).abs().max().item() <= 1e-5 * scale + 1e-12


@pytest.mark.parametrize("tf32", [False, True], ids=["tf32_off", "tf32"])
def test_gradients_are_deterministic(tf32, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    torch.manual_seed(7)
    args = conv_transpose_args((2, 16, 4, 9, 32), 32, 3, 8, device="cuda")
    out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
    grad_out = torch.randn_like(out)
    first, second = _gradients(args, grad_out), _gradients(args, grad_out)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@pytest.mark.parametrize("tf32", [False, True], ids=["tf32_off", "tf32"])
def test_switch_and_peak_memory(tf32, monkeypatch):
    """By default (and with FUSED_OPS_NORM_GRAD_OPERAND=0) the elementwise pass runs (dy
    written); with "1" none does, and the backward's peak memory is lower by about dy's size."""
    if not runs_wgmma():
        pytest.skip("the wgmma kernels run on sm_90 devices (and builds with CUTLASS)")
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    torch.manual_seed(5)
    args = conv_transpose_args((4, 32, 12, 16, 32), 64, 3, 8, device="cuda")
    out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
    grad_out = torch.randn_like(out)
    dy_bytes = out.numel() * out.element_size()
    peaks = {}
    for setting in ["1", "0", None]:
        if setting is None:
            monkeypatch.delenv(SWITCH)
        else:
            monkeypatch.setenv(SWITCH, setting)
        out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        names = backward_kernel_names(out, grad_out)
        peaks[setting] = torch.cuda.max_memory_allocated() - base
        assert any(DY_PASS in n for n in names) == (setting != "1"), names
        del out
        for a in args:
            if isinstance(a, torch.Tensor):
                a.grad = None
    assert peaks["1"] <= peaks["0"] - dy_bytes // 2, peaks
    assert peaks[None] == peaks["0"], peaks
