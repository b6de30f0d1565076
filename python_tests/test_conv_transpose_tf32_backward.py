"""ConvTranspose3dReLUGroupNorm's training step with TF32 allowed (PyTorch's default) on CUDA.

Its input gradient is a forward convolution of the conv output's gradient. On Hopper it runs
our wgmma kernel with plain TF32 products (conv_stage.cpp, transposed_as_forward_backward),
where the kernel takes the shape (a sample of at least 128 positions, channels multiples of
4): written NCDHW by the epilogue's tensor-map stores for an NCDHW input whose samples have a
multiple of 4 positions (a 32-position box that runs past a sample stored element by element),
else NDHWC (then transposed for an NCDHW input). The conv output's gradient is rounded to TF32
for it and for the weight gradient (our kernels' tensor cores would drop its low bits; cuDNN's
kernels were less accurate on it unrounded too) by the GroupNorm backward as it writes it, which
also sums it per channel before rounding it: the conv bias's gradient, with no pass of its own.
Elsewhere cuDNN's convolutions run.

Checked against float64 on each model's own ReLU mask (testing.compare_relu_gradients_on_own_
masks: TF32's conv output error flips a few ReLUs, in eager and fused alike): every gradient at
most twice eager's error (cuDNN's TF32), over samples that straddle the boxes, N = 1, input
channel counts that leave a partial channel tile, both layouts, with and without a conv bias;
and, on Hopper, that the backward ran our kernel."""

from __future__ import annotations

import pytest
import torch

import fused_ops
from fused_ops import testing
from helpers import backward_kernel_names, cuda_marks, drop_in_pair, relu_gradient_failures

pytestmark = cuda_marks()

# (input shape, out_channels, GroupNorm groups); 3x3x3, stride 1, no padding: the family whose
# transposed convolution eager runs with TF32 (conv_stage.cpp).
CASES = {
    "straddling_n3": ((3, 8, 6, 7, 6), 16, 4),  # 252 positions a sample: boxes run past it
    "whole_boxes": ((2, 16, 8, 8, 8), 32, 8),  # 512 positions
    "n1_cin72": ((1, 72, 4, 4, 8), 16, 4),  # the input gradient's 72 channels: a 128 tile
    "cin36_straddling": ((2, 36, 4, 6, 6), 8, 2),  # 144 positions; 36 channels of a 64 tile
    "positions_not_multiple_of_4": ((2, 8, 5, 6, 7), 16, 4),  # 210: NDHWC, transposed
}


@pytest.fixture(autouse=True)
def tf32_allowed(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # (restored after the test)


def _models_and_input(case, bias, layout):
    shape, c_out, groups = CASES[case]
    torch.manual_seed(sum(map(ord, case)) + bias)
    init = dict(in_channels=shape[1], out_channels=c_out, kernel_size=3, groups=groups, bias=bias)
    original, fused = drop_in_pair("ConvTranspose3dReLUGroupNorm", init, "cuda")
    x = torch.rand(shape, device="cuda")  # non-negative: a common offset in the conv output
    if layout == "ndhwc":
        x = x.to(memory_format=torch.channels_last_3d)
    return original, fused, x


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
@pytest.mark.parametrize("case", list(CASES))
def test_gradients_vs_float64(case, layout, bias):
    original, fused, x = _models_and_input(case, bias, layout)
    report = testing.compare_relu_gradients_on_own_masks(original, fused, x)
    expected = {"grad input", "grad conv_transpose.weight", "grad group_norm.weight"}
    expected |= {"grad group_norm.bias"} | ({"grad conv_transpose.bias"} if bias else set())
    assert expected <= set(report.gradients), sorted(report.gradients)
    failures = relu_gradient_failures(report)
    conv = report.conv_error
    if not conv["fused"] <= 2 * conv["eager"] + 2e-7:
        failures.append(f"conv output: {conv}")
    assert not failures, "\n".join(failures)


def _backward_kernel_names(fused, x):
    """The CUDA kernels (profiler keys) of fused(x)'s backward for a random output gradient."""
    return backward_kernel_names(fused(x.requires_grad_(True)))


def test_input_gradient_runs_the_wgmma_kernel():
    """The profile of a step: on Hopper the backward's convolutions are our wgmma kernels (the
    input gradient's and the weight gradient's), no cuDNN convolution."""
    if fused_ops.split_tf32_conv_kernel() != "wgmma":
        pytest.skip("the wgmma kernels run on sm_90 devices (and builds with CUTLASS)")
    _, fused, x = _models_and_input("whole_boxes", False, "ncdhw")
    names = _backward_kernel_names(fused, x)
    # (the plane-box kernel where it takes the shape: test_conv_transpose_plane_input_grad.py)
    assert any(
        "split_tf32_wgmma_conv3d_kernel" in n or "wgmma_plane_conv3d_kernel" in n for n in names
    ), names
    assert any("split_tf32_wgmma_wgrad_kernel" in n for n in names), names
    assert not any("implicit_gemm" in n or "cudnn" in n.lower() for n in names), names


@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "tf32_off"])
def test_conv_bias_gradient_is_the_group_norm_backwards_channel_sums(tf32, monkeypatch):
    """Where the backward's convolutions read the conv output's gradient NDHWC (the rewrites of
    conv_stage.cpp), the conv bias's gradient comes from the GroupNorm backward that writes it
    (channel_sums_kernel over its tiles' sums), and where they compute it from the GroupNorm's
    coefficients, from its sums pass (affine_param_grads_kernel over the rows' sums of dy); not
    from a reduction over it afterwards; its values are test_gradients_vs_float64's."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    _, fused, x = _models_and_input("whole_boxes", True, "ncdhw")
    m, gn = fused.conv_transpose, fused.group_norm
    conv_args = (m.weight, m.bias, m.stride, m.padding, m.output_padding, m.groups, m.dilation)
    args = (x, *conv_args, gn.num_groups, gn.weight, gn.bias, gn.eps)
    path = fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *args)
    if not path.startswith("transposed_as_forward"):
        pytest.skip(f"the convolution runs {path!r} on this device (not an NDHWC rewrite)")
    names = _backward_kernel_names(fused, x)
    written = any("relu_backward_input_channels_last_kernel" in n for n in names)
    sums = "channel_sums_kernel" if written else "affine_param_grads_kernel"
    assert any(sums in n for n in names), names
    assert not any("at::native::reduce_kernel" in n for n in names), names  # (ATen's sum)
    assert m.bias.grad is not None and torch.isfinite(m.bias.grad).all()
