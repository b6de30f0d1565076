"""conv_transpose3d_relu_group_norm on the split-TF32 tensor-core convolution (CUDA, float32,
TF32 off): the path it takes, and its values and gradients against float64 over shapes,
paddings, dilations, layouts and misaligned data; falls back to cuDNN outside its family.
Its convolutions (forward, input and weight gradients) run our wgmma kernels on sm_90 devices
and CUTLASS's sm80 ones elsewhere; on an sm_90 device the tests below run the sm80 ones too, in
a subprocess (FUSED_OPS_SPLIT_TF32_WGMMA=0). The weight gradient's wgmma kernel takes W (the
input's width) a multiple of 4: the w* cases."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import fused_ops
from helpers import check_against_reference, conv_transpose_args, cuda_marks

SPLIT_TF32 = "transposed_as_forward_split_tf32 -> relu_group_norm"

pytestmark = cuda_marks()


@pytest.fixture(autouse=True)
def tf32_off():
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved


def _path(args):
    return fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *args)


def _draw_away_from_relu_kinks(args, rel=1e-6):
    """Draws x (torch.rand, in place) until no pre-ReLU conv output lies within rel * max|y|
    of zero. There float32 and the float64 reference may take opposite sides of ReLU (both
    correct to rounding), and the gradients then differ by O(1): seen once in 400 draws of
    k2_no_bias (a conv output of 1e-7 of the largest). The kernels' errors stay far below
    rel (float32 rounding: a few 1e-7 of the largest output)."""
    x, w, b, stride, padding, output_padding, groups, dilation = args[:8]
    for _ in range(20):
        with torch.no_grad():
            x.copy_(torch.rand_like(x))
            y = torch.nn.functional.conv_transpose3d(
                x.double(), w.double(), None if b is None else b.double(), stride, padding,
                output_padding, groups, dilation,
            )  # fmt: skip
        if (y.abs() > rel * y.abs().max()).all():
            return
    pytest.fail("no draw of x keeps the conv output away from zero")


# (input shape, C_out, kernel, GroupNorm groups, other arguments)
CASES = {
    "k3": ((2, 8, 5, 6, 7), 16, 3, 4, {}),
    "k3_pad1": ((1, 4, 4, 5, 6), 8, 3, 2, dict(padding=1)),
    "k312_dilated": ((2, 12, 3, 4, 5), 8, (3, 1, 2), 2, dict(padding=(1, 0, 1), dilation=2)),
    "k2_no_bias": ((1, 16, 6, 6, 6), 32, 2, 8, dict(conv_bias=False)),
    "k1": ((3, 4, 3, 3, 3), 4, 1, 1, {}),
    "k5_pad2_no_affine": ((1, 8, 4, 4, 4), 12, 5, 3, dict(padding=2, gn_affine=False)),
    "wide": ((2, 64, 6, 6, 6), 128, 3, 8, {}),
    # C_in (36) not a multiple of the 32-channel K block; C_out (200) two 128-channel tiles,
    # the second partly padding; the input gradient's 36 output channels one 64-channel tile
    "c36_c200": ((1, 36, 5, 6, 7), 200, 3, 8, dict(padding=1)),
    # W a multiple of 4: the weight gradient on Hopper's wgmma kernel (x read NCDHW); W = 40 is
    # two 32-position K blocks per row, C_in 36 and C_out 200 partial channel tiles
    "w8_k3": ((2, 8, 5, 6, 8), 16, 3, 4, {}),
    "w8_k312_dilated": ((2, 12, 3, 4, 8), 8, (3, 1, 2), 2, dict(padding=(1, 0, 1), dilation=2)),
    "w40_c36_c200": ((1, 36, 3, 4, 40), 200, 3, 8, dict(padding=1)),
}  # fmt: skip


def _channels_last(x):
    return x.detach().to(memory_format=torch.channels_last_3d).requires_grad_()


def _misaligned_channels_last(x):
    """x's values in channels-last storage that starts 4 bytes past an allocation."""
    n, c, d, h, w = x.shape
    storage = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)[1:]
    view = storage.view(n, d, h, w, c).permute(0, 4, 1, 2, 3)
    view.copy_(x.detach())
    assert view.data_ptr() % 16 != 0 and view.is_contiguous(memory_format=torch.channels_last_3d)
    return view.requires_grad_()


LAYOUTS = {
    "contiguous": lambda x: x,
    "channels_last": _channels_last,
    "misaligned": _misaligned_channels_last,
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(CASES))
def test_values_and_gradients_vs_float64(case, layout):
    shape, c_out, k, groups, kw = CASES[case]
    torch.manual_seed(hash((case, layout)) % 2**31)
    args = conv_transpose_args(shape, c_out, k, groups, device="cuda", **kw)
    args[0] = LAYOUTS[layout](args[0])
    # torch.rand-like inputs (non-negative: the conv output gets a common offset).
    _draw_away_from_relu_kinks(args)
    # The conv output (saved for backward) is in the input's layout, and the GroupNorm reads a
    # channels-last one in place; for an NCDHW input it reads the convolution's NDHWC output
    # (with the statistics that the convolution computes, where it does) and writes the saved
    # NCDHW copy.
    conv = "transposed_as_forward_split_tf32"
    if layout == "contiguous" and _emits_relu_moments(args):
        conv += "+relu_moments"
    assert _path(args) == conv + " -> relu_group_norm_channels_last"
    check_against_reference("conv_transpose3d_relu_group_norm", args)


def _conv_output_positions(args):
    x, w, _, stride, padding, output_padding, _, dilation = args[:8]
    sizes = [
        (i - 1) * s - 2 * p + d * (k - 1) + op + 1
        for i, s, p, d, k, op in zip(
            x.shape[2:], stride, padding, dilation, w.shape[2:], output_padding
        )
    ]
    return sizes[0] * sizes[1] * sizes[2]


def _emits_relu_moments(args):
    """Whether the inference forward's convolution computes the GroupNorm's statistics in its
    epilogue (conv_stage.cpp, conv_emits_relu_moments): the wgmma kernel, at least 128 output
    positions per sample (a block's 128 rows then hold at most two samples)."""
    return fused_ops.split_tf32_conv_kernel() == "wgmma" and _conv_output_positions(args) >= 128


# The inference forward (no autograd): the conv output stays NDHWC; where _emits_relu_moments,
# the GroupNorm takes its statistics from the convolution ("+relu_moments"). Row tiles of 128
# positions straddle samples where the positions per sample are not a multiple of 128.
INFERENCE_CASES = {
    "straddling_n3": ((3, 8, 5, 6, 7), 16, 3, 4, {}),  # 504 positions per sample
    "whole_tiles": ((2, 8, 6, 6, 6), 16, 3, 8, {}),  # 512 = 4 tiles per sample
    "exactly_128": ((3, 4, 2, 2, 6), 8, 3, 2, {}),  # 4 x 4 x 8 = 128: a tile per sample
    "below_128": ((2, 8, 2, 2, 2), 16, 3, 4, {}),  # 64: the GroupNorm's own statistics
    "wide": CASES["wide"],  # 128 channels: one 128 x 128 tile's columns
    "c36_c200": CASES["c36_c200"],  # two channel tiles, the second partly padding
    "k312_dilated_n5": ((5, 12, 5, 6, 5), 8, (3, 1, 2), 2, dict(padding=(1, 0, 1), dilation=2)),
    "no_bias_n4": ((4, 16, 4, 5, 6), 32, 3, 8, dict(conv_bias=False)),  # 336 positions
}  # fmt: skip


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", list(INFERENCE_CASES))
def test_inference_forward_vs_float64(case, layout):
    shape, c_out, k, groups, kw = INFERENCE_CASES[case]
    torch.manual_seed(hash((case, layout, "inference")) % 2**31)
    args = conv_transpose_args(shape, c_out, k, groups, device="cuda", requires_grad=False, **kw)
    args[0] = LAYOUTS[layout](args[0]).detach()
    _draw_away_from_relu_kinks(args)
    conv = "transposed_as_forward_split_tf32" + (
        "+relu_moments" if _emits_relu_moments(args) else ""
    )
    assert _path(args) == conv + " -> relu_group_norm_channels_last"
    out = check_against_reference("conv_transpose3d_relu_group_norm", args, backward=False)
    # Deterministic: the statistics' sums have a fixed order.
    assert torch.equal(torch.ops.fused.conv_transpose3d_relu_group_norm(*args), out)


@pytest.mark.parametrize(
    "where",
    [
        # sample 1: its rows 504..1007 start and end inside warps' 16 rows
        (1, 2, 3, 4, 5),
        # sample 0, reaching output row 496 (6, 7, 1): the first row of the warp whose rows
        # 496..511 straddle samples 0 and 1 (its sums of sample 1 must not take it as shift)
        (0, 2, 4, 5, 0),
    ],
    ids=["inside", "first_row_of_a_straddling_warp"],
)
def test_inference_forward_keeps_nan(where):
    """A NaN in x reaches the statistics of its sample (every output of that sample NaN), and
    only those, as in eager."""
    torch.manual_seed(5)
    args = conv_transpose_args((3, 8, 5, 6, 7), 16, 3, 4, device="cuda", requires_grad=False)
    args[0][where] = float("nan")
    out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
    ref = torch.nn.functional.group_norm(
        torch.relu(torch.nn.functional.conv_transpose3d(args[0], args[1], args[2])), 4, args[9],
        args[10], 1e-5,
    )  # fmt: skip
    assert torch.equal(out.isnan(), ref.isnan())
    for n in range(3):
        assert out[n].isnan().all() if n == where[0] else not out[n].isnan().any()


def test_matches_eager_module():
    """The drop-in contract with TF32 off: within atol = rtol = 1e-5 of eager's modules."""
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose3d(32, 64, 3).cuda()
    norm = torch.nn.GroupNorm(8, 64).cuda()
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.5)
        norm.bias.normal_(0.0, 0.5)
    x = torch.rand(2, 32, 10, 11, 12, device="cuda")
    expected = norm(torch.relu(conv(x)))
    args = [x, conv.weight, conv.bias, [1] * 3, [0] * 3, [0] * 3, 1, [1] * 3, 8, norm.weight,
            norm.bias, 1e-5]  # fmt: skip
    assert _path(args).startswith("transposed_as_forward_split_tf32")
    actual = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "why, shape, c_out, kw",
    [
        ("C_in not a multiple of 4", (1, 6, 4, 4, 4), 8, {}),
        ("C_out not a multiple of 4", (1, 8, 4, 4, 4), 6, {}),
        ("two conv groups", (1, 8, 4, 4, 4), 8, dict(groups=2)),
        ("stride 2", (1, 8, 4, 4, 4), 8, dict(stride=2)),
        ("output padding", (1, 8, 4, 4, 4), 8, dict(stride=2, output_padding=1)),
    ],
)
def test_outside_the_family_runs_cudnn(why, shape, c_out, kw):
    torch.manual_seed(1)
    args = conv_transpose_args(shape, c_out, 3, 2, device="cuda", **kw)
    assert _path(args) == "aten -> relu_group_norm", why
    check_against_reference("conv_transpose3d_relu_group_norm", args)


def test_empty_batch():
    args = conv_transpose_args((0, 8, 4, 4, 4), 8, 3, 2, device="cuda", requires_grad=False)
    assert _path(args) != SPLIT_TF32
    assert torch.ops.fused.conv_transpose3d_relu_group_norm(*args).shape == (0, 8, 6, 6, 6)


def test_split_tf32_conv_kernel_query():
    """Hopper (compute capability 9.0) runs the wgmma kernel unless it is switched off; other
    GPUs with tensor cores CUTLASS's sm80 one; the CPU neither."""
    kernel = fused_ops.split_tf32_conv_kernel()
    capability = torch.cuda.get_device_capability()
    if capability == (9, 0) and os.environ.get("FUSED_OPS_SPLIT_TF32_WGMMA") != "0":
        assert kernel == "wgmma"
    elif capability >= (8, 0):
        assert kernel == "mma_sync"
    assert torch.ops.fused._split_tf32_conv_kernel(torch.empty(0)) == ""


_SM80_SCRIPT = """
import sys, torch, fused_ops
sys.path.insert(0, {tests!r})
import test_conv_transpose_split_tf32 as t
assert fused_ops.split_tf32_conv_kernel() == "mma_sync", fused_ops.split_tf32_conv_kernel()
torch.backends.cudnn.allow_tf32 = False  # (the tests' autouse fixture)
for case in {cases!r}:
    for layout in ("contiguous", "channels_last"):
        t.test_values_and_gradients_vs_float64(case, layout)
t.test_matches_eager_module()
print("ok")
"""


def test_sm80_kernel_where_wgmma_runs():
    """Where the wgmma kernel runs, CUTLASS's sm80 kernel (what other GPUs run) passes the same
    checks: in a subprocess with FUSED_OPS_SPLIT_TF32_WGMMA=0 (read once per process)."""
    if fused_ops.split_tf32_conv_kernel() != "wgmma":
        pytest.skip("the wgmma kernel does not run here: the other tests run the sm80 one")
    tests = os.path.dirname(os.path.abspath(__file__))
    script = _SM80_SCRIPT.format(
        tests=tests, cases=["k3", "k312_dilated", "wide", "c36_c200", "w40_c36_c200"]
    )
    env = dict(os.environ, FUSED_OPS_SPLIT_TF32_WGMMA="0")
    r = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
