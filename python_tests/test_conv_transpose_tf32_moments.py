"""conv_transpose3d_relu_group_norm's inference forward with TF32 allowed (PyTorch's default) on
Hopper, forced with FUSED_OPS_TF32_WGMMA=1 (read per call; by default only where the
convolution is long enough): the forward rewrite of the transposed convolution runs our wgmma
kernel with plain TF32 products (x rounded to TF32 by its transpose, the activations copied by
the tensor memory accelerator's im2col mode) instead of cuDNN's, its epilogue computes the
GroupNorm's statistics ("+relu_moments"), and the whole forward is pipelined (conv_stage.cpp,
run_tf32_conv_relu_group_norm): the convolution runs in up to two launches over consecutive
rows, each transposing x for the next and writing the output of the samples completed before
it (conv_side_work.cuh). Checked: the path, the output against float64 (at most twice eager's
error, which is TF32's too), bitwise repeatability, shapes of one launch and of several (with
samples straddling launches), where it runs by default (the headline shape) and where it does
not (by default on small shapes, an NDHWC input, training, other GPUs: cuDNN's)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fused_ops
from helpers import conv_transpose_args, cuda_marks, runs_wgmma

pytestmark = cuda_marks()

TF32_MOMENTS = "transposed_as_forward+relu_moments -> relu_group_norm_channels_last"
TF32_CUDNN = "transposed_as_forward -> relu_group_norm_channels_last"


@pytest.fixture(autouse=True)
def tf32_allowed_and_opted_in(monkeypatch):
    monkeypatch.setenv("FUSED_OPS_TF32_WGMMA", "1")
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    yield
    torch.backends.cudnn.allow_tf32 = saved


# (input shape, C_out, GroupNorm groups): 3x3x3, stride 1, no padding (eager's TF32 family).
# The kernel's parts of 64 rows straddle samples where a sample's positions are not a
# multiple of 64 (all but the last); C_in below / not a multiple of the 32 channels a K block
# copies; C_out below, between and above the 64- and 128-channel tiles; N = 1; more tiles than
# the clusters (the 34^3 cases: on an H100's 132 SMs, the pipeline's 2 launches, a sample
# straddling their boundary, and for N = 5 samples transposed and normalised by the side work);
# positions not a multiple of 4 (5 x 6 x 7 in, 7 x 8 x 9 out: one launch, without side work).
CASES = {
    "k3": ((2, 8, 5, 6, 7), 16, 4),
    "n1_cin4": ((1, 4, 6, 5, 4), 8, 2),
    "cin36_cout68": ((2, 36, 4, 5, 6), 68, 4),
    "cout200": ((2, 12, 5, 5, 5), 200, 8),
    "cin64_cout128": ((3, 64, 9, 10, 11), 128, 8),
    "many_tiles": ((2, 16, 32, 32, 32), 32, 8),
    "launches_n5": ((5, 16, 32, 32, 32), 32, 8),
    # The 128-channel tiles (whose epilogue walks the staged columns for the moments) over two
    # launches.
    "launches_cout128": ((3, 16, 32, 32, 32), 128, 8),
    "rows_multiple_of_64": ((2, 8, 6, 6, 6), 16, 4),  # 8^3 = 512 positions a sample
}


def _args(case):
    shape, c_out, groups = CASES[case]
    args = conv_transpose_args(shape, c_out, 3, groups, device="cuda", requires_grad=False)
    g = torch.Generator(device="cuda").manual_seed(sum(map(ord, case)))
    args[0] = torch.rand(shape, device="cuda", generator=g)  # non-negative: a common offset
    return args


def _float64(args):
    x, w, b, stride, padding, output_padding, groups, dilation, num_groups, gw, gb, eps = args
    d = lambda t: None if t is None else t.double()  # noqa: E731
    y = F.conv_transpose3d(d(x), d(w), d(b), stride, padding, output_padding, groups, dilation)
    return F.group_norm(F.relu(y), num_groups, d(gw), d(gb), eps)


def _eager(args):
    x, w, b, stride, padding, output_padding, groups, dilation, num_groups, gw, gb, eps = args
    y = F.conv_transpose3d(x, w, b, stride, padding, output_padding, groups, dilation)
    return F.group_norm(F.relu(y), num_groups, gw, gb, eps)


def _rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("case", list(CASES))
def test_inference_forward_vs_float64(case):
    args = _args(case)
    with torch.no_grad():
        assert fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *args) == (
            TF32_MOMENTS if runs_wgmma() else TF32_CUDNN
        )
        out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
        again = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
        eager = _eager(args)
    ref = _float64(args)
    assert out.is_contiguous() and out.shape == ref.shape
    assert torch.equal(out, again), "two runs differ"
    fused_err, eager_err = _rel(out, ref), _rel(eager, ref)
    # TF32's rounding of the operands (2^-11 relative): eager's error is of that order too.
    assert fused_err <= 2 * eager_err and fused_err < 2e-3, (fused_err, eager_err)


def test_cudnn_by_default_on_small_shapes(monkeypatch):
    args = _args("k3")
    monkeypatch.delenv("FUSED_OPS_TF32_WGMMA")
    with torch.no_grad():
        assert fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *args) == TF32_CUDNN


def test_wgmma_by_default_at_the_headline(monkeypatch):
    """The headline shape (16, 64, 32^3) -> 128 channels: long enough a convolution that the
    pipelined forward runs without being forced (and "0" forces cuDNN's)."""
    if not runs_wgmma():
        pytest.skip("the wgmma kernels run on Hopper only")
    args = conv_transpose_args((16, 64, 32, 32, 32), 128, 3, 8, device="cuda", requires_grad=False)
    monkeypatch.delenv("FUSED_OPS_TF32_WGMMA")
    with torch.no_grad():
        assert fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *args) == TF32_MOMENTS
        monkeypatch.setenv("FUSED_OPS_TF32_WGMMA", "0")
        assert fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *args) == TF32_CUDNN


def test_ndhwc_input_and_training_run_cudnn():
    """An NDHWC input is not rounded by a transpose, so cuDNN's convolution runs; so does a
    forward that autograd records, whose GroupNorm reads cuDNN's NDHWC output and writes the
    saved conv output in the input's layout."""
    args = _args("k3")
    cl = list(args)
    cl[0] = args[0].to(memory_format=torch.channels_last_3d)
    with torch.no_grad():
        assert fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *cl) == TF32_CUDNN
    args[0].requires_grad_(True)
    assert fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *args) == TF32_CUDNN


def test_tf32_off_keeps_split_products():
    """With TF32 off the same call takes the split-TF32 kernel (float32-grade products)."""
    args = _args("k3")
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        path = fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *args)
    assert path.startswith("transposed_as_forward_split_tf32")


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["float32", "float16", "bfloat16"]
)
@pytest.mark.parametrize("c_out", [16, 6], ids=["C16", "C6"])
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
def test_cudnn_path_adds_the_conv_bias_in_the_group_norm(dtype, c_out, layout, monkeypatch):
    """On cuDNN's path (TF32 for float32, and the half types) the conv bias is not in the
    convolution's output: the channels-last GroupNorm adds it as it reads that output
    (relu(y + b)), or, where that kernel does not take the channel count (C = 6: not a multiple
    of its 16-byte vectors), the output gets it first, as ATen would add it. Large biases (so
    that a lost one shows), against float64: at most twice eager's error."""
    monkeypatch.setenv("FUSED_OPS_TF32_WGMMA", "0")
    args = conv_transpose_args(
        (2, 8, 5, 6, 7), c_out, 3, 2, dtype=dtype, device="cuda", requires_grad=False
    )
    g = torch.Generator(device="cuda").manual_seed(c_out)
    args[0] = torch.rand(args[0].shape, device="cuda", generator=g).to(dtype)
    args[2] = torch.randn(c_out, device="cuda", generator=g).to(dtype)
    if layout == "ndhwc":
        args[0] = args[0].to(memory_format=torch.channels_last_3d)
    with torch.no_grad():
        path = fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *args)
        out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
        eager = _eager(args)
        without = list(args)
        without[2] = None
        unbiased = torch.ops.fused.conv_transpose3d_relu_group_norm(*without)
    assert path.startswith("transposed_as_forward -> relu_group_norm"), path
    ref = _float64(args)
    fused_err, eager_err = _rel(out, ref), _rel(eager, ref)
    assert fused_err <= 2 * eager_err, (fused_err, eager_err)
    assert _rel(unbiased, ref) > 10 * fused_err  # (the bias matters here)


def _grads(out, leaves, grad_output):
    return torch.autograd.grad(out, leaves, grad_output)


@pytest.mark.parametrize("c_out", [16, 6], ids=["C16", "C6"])
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
def test_training_forward_saves_the_conv_output_from_the_normalise_pass(c_out, layout, monkeypatch):
    """A training forward on cuDNN's path (float32, TF32) with a conv bias: for an NCDHW input
    and C = 16, the convolution runs NDHWC without the bias, and the channels-last GroupNorm adds
    it as it reads the output and writes the saved conv output (NCDHW, with the bias) in its
    normalise pass; C = 6 (a channel count that kernel does not take) and an NDHWC input save
    the output as before. The saved conv output against float64 (it holds the bias), and the
    output and every gradient: at most twice eager's error (plus 1e-4, a tenth of TF32's)."""
    monkeypatch.setenv("FUSED_OPS_TF32_WGMMA", "0")
    args = conv_transpose_args((2, 8, 5, 6, 7), c_out, 3, 2, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(c_out)
    x = torch.rand(args[0].shape, device="cuda", generator=g)
    if layout == "ndhwc":
        x = x.to(memory_format=torch.channels_last_3d)
    args[0] = x.requires_grad_()
    args[2] = torch.randn(c_out, device="cuda", generator=g).requires_grad_()
    path = fused_ops.dispatch_path("conv_transpose3d_relu_group_norm", *args)
    reads_channels_last = c_out % 4 == 0
    assert path == "transposed_as_forward -> relu_group_norm" + (
        "_channels_last" if reads_channels_last else ""
    ), path

    with torch.no_grad():
        _, saved, _, _ = torch.ops.fused._conv_transpose3d_relu_group_norm_forward(*args)
        d = [None if not isinstance(t, torch.Tensor) else t.double() for t in args[:3]]
        y64 = F.conv_transpose3d(d[0], d[1], d[2], *args[3:8])
    layout_format = torch.channels_last_3d if layout == "ndhwc" else torch.contiguous_format
    assert saved.is_contiguous(memory_format=layout_format)
    assert (saved.double() - y64).abs().max() <= 1e-2 * y64.abs().max()
    assert (saved.double() - y64 + d[2].view(1, -1, 1, 1, 1)).abs().max() > 0.1  # has the bias

    leaves = [args[i] for i in (0, 1, 2, 9, 10)]
    grad_output = torch.randn(saved.shape, device="cuda", generator=g)
    out = torch.ops.fused.conv_transpose3d_relu_group_norm(*args)
    fused = (out, *_grads(out, leaves, grad_output))
    eager_out = _eager(args)
    eager = (eager_out, *_grads(eager_out, leaves, grad_output))
    args64 = list(args)
    for i in (0, 1, 2, 9, 10):
        args64[i] = args[i].detach().double().requires_grad_()
    ref_out = _float64(args64)
    ref = (ref_out, *_grads(ref_out, [args64[i] for i in (0, 1, 2, 9, 10)], grad_output.double()))
    for what, f, e, r in zip(
        ("output", "x", "weight", "bias", "gn weight", "gn bias"), fused, eager, ref
    ):
        fused_err, eager_err = _rel(f, r), _rel(e, r)
        assert fused_err <= 2 * eager_err + 1e-4, (what, fused_err, eager_err)
