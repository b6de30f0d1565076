"""fused_ops.backward_path: the debug query that names the kernels of
conv_transpose3d_relu_group_norm's backward (how the conv output's gradient dy comes to the
convolutions, and which kernels run the input and weight gradients).

On the CPU: ATen's convolutions, and the operator's argument checks. On CUDA: the answer in each
configuration the backward distinguishes (TF32 allowed or not, the GroupNorm's operand switched
on, a dtype or a stride outside our kernels), and, whatever the device runs, that the profile of
a training step agrees with it: dy written by the GroupNorm backward's NDHWC pass unless the
answer says it is not, our input-gradient and weight-gradient kernels exactly where it names
them."""

from __future__ import annotations

import pytest
import torch

import fused_ops
from helpers import backward_kernel_names, conv_transpose_args, requires_cuda, runs_wgmma

OP = "conv_transpose3d_relu_group_norm"
SWITCH = "FUSED_OPS_NORM_GRAD_OPERAND"
# Kernels (profiler keys) of our convolutions and of the GroupNorm backward's NDHWC dy pass.
INPUT_GRAD_KERNELS = ("split_tf32_wgmma_conv3d_kernel", "wgmma_plane_conv3d_kernel")
WEIGHT_GRAD_KERNEL = "split_tf32_wgmma_wgrad_kernel"
DY_NDHWC_PASS = "relu_backward_input_channels_last_kernel"
OUR_KERNELS = ("tf32_wgmma", "split_tf32_wgmma")


def _parse(path):
    """(dy, input_grad, weight_grad) of a backward_path answer."""
    dy, convs = path.split(" -> ")
    (key_in, input_grad), (key_w, weight_grad) = (c.split("=") for c in convs.split(", "))
    assert (key_in, key_w) == ("input_grad", "weight_grad"), path
    return dy, input_grad, weight_grad


def test_cpu_runs_aten():
    for dtype in (torch.float32, torch.float64):
        args = conv_transpose_args((2, 4, 3, 4, 5), 8, 3, 4, dtype=dtype)
        assert fused_ops.backward_path(OP, *args) == "dy -> input_grad=aten, weight_grad=aten"


def test_rejects_bad_arguments_and_other_operators():
    args = conv_transpose_args((2, 4, 3, 4, 5), 8, 3, 4)
    args[8] = 3  # num_groups that does not divide the 8 channels
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        fused_ops.backward_path(OP, *args)
    with pytest.raises(ValueError, match="conv3d_group_norm_mean"):
        fused_ops.backward_path("conv3d_group_norm_mean")


# (input shape, C_out, GroupNorm groups, dtype, TF32 allowed, GroupNorm operand switched on,
# other arguments; the answer where our wgmma kernels run (sm_90), or None where it is only
# checked against the profile).
CASES = {
    "tf32": ((2, 16, 8, 8, 8), 32, 8, torch.float32, True, False, {},
             "dy_ndhwc_tf32 -> input_grad=tf32_wgmma, weight_grad=tf32_wgmma"),
    "split_tf32": ((2, 16, 8, 8, 8), 32, 8, torch.float32, False, False, {},
                   "dy_ndhwc -> input_grad=split_tf32, weight_grad=split_tf32_wgmma"),
    "from_norm_split_tf32": ((2, 16, 8, 8, 8), 32, 8, torch.float32, False, True, {},
                             "dy_from_norm -> input_grad=split_tf32_wgmma, "
                             "weight_grad=split_tf32_wgmma"),
    "from_norm_tf32": ((2, 16, 8, 8, 8), 32, 8, torch.float32, True, True, {},
                       "dy_from_norm -> input_grad=tf32_wgmma, weight_grad=tf32_wgmma"),
    # 6 input channels: the input gradient's convolution (6 output channels) is not our TF32
    # kernel's; the switch has no effect where both kernels do not take the shapes.
    "tf32_c6": ((2, 6, 8, 8, 8), 16, 4, torch.float32, True, True, {}, None),
    "float64": ((2, 16, 4, 4, 4), 32, 8, torch.float64, True, True, {},
                "dy -> input_grad=aten, weight_grad=aten"),
    "stride2": ((2, 16, 4, 4, 4), 32, 8, torch.float32, False, True,
                dict(stride=2, padding=1, output_padding=1),
                "dy -> input_grad=aten, weight_grad=aten"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
@requires_cuda
def test_answer_matches_the_profile(case, monkeypatch):
    shape, c_out, groups, dtype, tf32, operand, kw, expected = CASES[case]
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    monkeypatch.setenv(SWITCH, "1" if operand else "0")
    torch.manual_seed(0)
    args = conv_transpose_args(shape, c_out, 3, groups, dtype=dtype, device="cuda", **kw)
    path = fused_ops.backward_path(OP, *args)
    if expected is not None and runs_wgmma():
        assert path == expected
    dy, input_grad, weight_grad = _parse(path)
    names = backward_kernel_names(torch.ops.fused.conv_transpose3d_relu_group_norm(*args))

    def ran(*kernels):
        return any(k in n for n in names for k in kernels)

    assert ran(DY_NDHWC_PASS) == (dy in ("dy_ndhwc", "dy_ndhwc_tf32")), (path, names)
    assert ran(WEIGHT_GRAD_KERNEL) == (weight_grad in OUR_KERNELS), (path, names)
    if input_grad in OUR_KERNELS or (input_grad == "split_tf32" and runs_wgmma()):
        assert ran(*INPUT_GRAD_KERNELS), (path, names)
    elif input_grad in ("aten", "cudnn_ndhwc"):
        assert not ran(*INPUT_GRAD_KERNELS), (path, names)
