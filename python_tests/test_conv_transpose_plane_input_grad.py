"""The input gradient of ConvTranspose3dReLUGroupNorm on the plane-box wgmma kernel
(ops/conv/wgmma_plane_conv3d.cuh, sm_90 devices; by default with TF32 products,
FUSED_OPS_PLANE_CONV=1 asks for it with split ones too, "0" never): a
stride-1 forward convolution of the conv output's gradient whose activation boxes are copied
once per (32 channels, D tap) and read for every kH x kW tap, written NCDHW by tensor-map
stores that clip at the output's edges.

Against float64, in both TF32 modes: output widths that leave most of a 32-column tile past
Wo (8) or spill into a second one (36), heights that are not a multiple of the tile's rows,
input gradients with a partial 64-channel tile (36) and partial 32-channel chunks (module C_out
200: the box's channels past it are the tensor map's zeros), padding and dilation, N = 1; that
the backward ran the kernel; and that two runs give the same bits. These run it on dy in
memory (FUSED_OPS_NORM_GRAD_OPERAND=0); test_conv_transpose_norm_grad_operand.py, on dy
computed as the kernel loads it."""

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

PLANE_KERNEL = "wgmma_plane_conv3d_kernel"

# (input shape, C_out, kernel, GroupNorm groups, other arguments): TF32 off (split products).
SPLIT_CASES = {
    "w8_h6": ((2, 8, 5, 6, 8), 16, 3, 4, {}),
    "w36_n1": ((1, 12, 3, 5, 36), 16, 3, 4, {}),
    "w32_c64_c128": ((2, 64, 3, 9, 32), 128, 3, 8, {}),
    "w40_c36_c200_pad1": ((1, 36, 3, 4, 40), 200, 3, 8, dict(padding=1)),
    "w8_k312_dilated": ((2, 12, 3, 4, 8), 8, (3, 1, 2), 2, dict(padding=(1, 0, 1), dilation=2)),
}  # fmt: skip

# (input shape, C_out, GroupNorm groups): TF32 allowed; 3x3x3, stride 1, no padding (the family
# whose input gradient runs our kernels with TF32 products).
TF32_CASES = {
    "w32_h9": ((2, 16, 3, 9, 32), 32, 8),
    "w8_n1_c72": ((1, 72, 4, 6, 8), 16, 4),
    "w36_c36": ((2, 36, 3, 5, 36), 8, 2),
}


@pytest.fixture(autouse=True)
def plane_kernel(monkeypatch):
    monkeypatch.setenv("FUSED_OPS_PLANE_CONV", "1")  # (read per call)
    # dy in memory (the default; test_conv_transpose_norm_grad_operand.py: dy computed as the
    # kernel loads it, FUSED_OPS_NORM_GRAD_OPERAND=1).
    monkeypatch.setenv("FUSED_OPS_NORM_GRAD_OPERAND", "0")


@pytest.mark.parametrize("case", list(SPLIT_CASES))
def test_split_gradients_vs_float64(case, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    shape, c_out, k, groups, kw = SPLIT_CASES[case]
    torch.manual_seed(sum(map(ord, case)))
    args = conv_transpose_args(shape, c_out, k, groups, device="cuda", **kw)
    check_against_reference("conv_transpose3d_relu_group_norm", args)
    if runs_wgmma():
        out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
        assert any(PLANE_KERNEL in n for n in backward_kernel_names(out))


@pytest.mark.parametrize("case", list(TF32_CASES))
def test_tf32_gradients_vs_float64(case, monkeypatch):
    """Every gradient at most twice eager's error against float64 (on each model's own ReLU
    mask: testing.compare_relu_gradients_on_own_masks), as the library's other TF32 kernels."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    torch.manual_seed(sum(map(ord, case)))
    fused, x = check_conv_transpose_tf32_gradients(*TF32_CASES[case])
    if runs_wgmma():
        out = fused(x.clone().requires_grad_())
        assert any(PLANE_KERNEL in n for n in backward_kernel_names(out))


@pytest.mark.parametrize("tf32", [False, True], ids=["tf32_off", "tf32"])
def test_input_gradient_is_deterministic(tf32, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    torch.manual_seed(7)
    args = conv_transpose_args((2, 16, 3, 9, 32), 32, 3, 8, device="cuda")
    grad_out = None
    grads = []
    for _ in range(2):
        out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
        grad_out = torch.randn_like(out) if grad_out is None else grad_out
        grads.append(torch.autograd.grad(out, args[0], grad_out)[0])
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("tf32", [False, True], ids=["tf32_off", "tf32"])
@pytest.mark.parametrize("setting", [None, "0"], ids=["default", "off"])
def test_switch(setting, tf32, monkeypatch):
    """By default the plane kernel runs with TF32 products only; FUSED_OPS_PLANE_CONV=0 keeps
    the im2col kernel in both modes."""
    if not runs_wgmma():
        pytest.skip("the wgmma kernels run on sm_90 devices (and builds with CUTLASS)")
    if setting is None:
        monkeypatch.delenv("FUSED_OPS_PLANE_CONV")
    else:
        monkeypatch.setenv("FUSED_OPS_PLANE_CONV", setting)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    torch.manual_seed(3)
    args = conv_transpose_args((2, 16, 3, 9, 32), 32, 3, 8, device="cuda")
    names = backward_kernel_names(torch.ops.fused.conv_transpose3d_relu_group_norm(*args))
    plane = any(PLANE_KERNEL in n for n in names)
    assert plane == (setting is None and tf32), names
    assert plane or any("split_tf32_wgmma_conv3d_kernel" in n for n in names), names
