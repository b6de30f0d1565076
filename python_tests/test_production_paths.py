"""Every dispatch path the operators can take in production, run end to end: for each path
(what ``fused_ops.dispatch_path`` answers), under PyTorch's default flags and with TF32 off,
in every dtype the path takes, at the headline-like channel counts C in {8, 16, 24, 128}, in
the layouts the path depends on, from ``torch.rand`` and ``torch.randn`` inputs (GroupNorm
affine and conv bias always random): the path the case is meant to reach (so that a dispatch
change is noticed), then the output and the gradient of every tensor argument against the
float64 composite (helpers.check_against_reference), and the forward without autograd (where
the one-pass forward may run another kernel: the tensor-core one in float32).

CPU_PATHS and CUDA_PATHS list every path the sources can return, with where each comes
from; test_every_path_is_covered fails when one of them has no case here.
"""

from __future__ import annotations

import itertools
import os
import re
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Tuple

import pytest
import torch
import torch.nn.functional as F

import fused_ops
from helpers import (
    REFERENCES,
    REPO_DIR,
    _with_low_precision_conv,
    assert_close_to_ref,
    check_against_reference,
    conv3d_args,
    conv_transpose_args,
    cuda_marks,
    fused_op,
    norm_args,
    reference,
)

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
DTYPE_NAMES = {F32: "float32", F64: "float64", F16: "float16", BF16: "bfloat16"}
# As test_numerics_contract.MODES: torch.backends.cudnn.allow_tf32 in each mode ("default" is
# PyTorch's default; conftest's autouse fixture sets it from the tf32_off marker).
MODES = {"default": True, "tf32_off": False}
CHANNELS = (8, 16, 24, 128)  # GroupNorm channels (the conv operators' output channels)
DISTS = ("rand", "randn")

Combos = FrozenSet[Tuple[torch.dtype, str]]
EVERY_DTYPE_BOTH_MODES: Combos = frozenset(itertools.product(DTYPE_NAMES, MODES))
NOT_FLOAT32_BOTH_MODES: Combos = frozenset((d, m) for d in (F64, F16, BF16) for m in MODES)
FLOAT32_BOTH_MODES: Combos = frozenset((F32, m) for m in MODES)

# ---------------------------------------------------------------------------------------
# The paths, from the sources: (dtype, mode) pairs that reach each one.
#
# Norm kernels: "relu_group_norm" / "relu_group_norm_channels_last"
# (ops/norm/relu_group_norm.cpp, relu_group_norm_kernel_name: a dense channels-last input on
# CUDA when C is a multiple of 16 bytes' elements, read in place; on the CPU always the
# first); "group_norm_mean" / "group_norm_mean_channels_last" (ops/norm/group_norm_mean.cpp,
# group_norm_mean_kernel_name / norm_host.h, reads_channels_last: the same, and on the CPU
# every dense channels-last input). A conv operator's GroupNorm reads its conv output, which
# is in the input's layout (run_conv3d), except where the float32 CUDA rewrites of a
# transposed convolution leave it NDHWC: without autograd (Case.inference_path), and with it
# for an NCDHW input (the GroupNorm then writes the NCDHW copy that is saved:
# Case.training_path, LAYOUT_COMBOS).
# Convolutions (ops/conv/conv_stage.cpp, select_conv_path / conv_path_name), joined to the
# norm kernel by " -> " (conv_transpose3d_relu_group_norm_path in
# ops/conv/conv_transpose3d_relu_group_norm.cpp, conv3d_group_norm_mean_path in
# ops/conv/conv3d_group_norm_mean.cpp). "aten_float32" is conv3d_group_norm_mean's float32 on
# CUDA only; "transposed_as_forward[_split_tf32]" transposed convolutions on CUDA only; so
# "aten_float32 -> relu_group_norm" and "transposed_as_forward* -> group_norm_mean*" cannot
# occur, nor "aten_float32" on the CPU. "onepass" (conv3d_group_norm_mean_path) is CUDA only.

CPU_PATHS: Dict[str, Combos] = {
    # relu_group_norm.cpp: relu_group_norm_path
    "relu_group_norm": EVERY_DTYPE_BOTH_MODES,
    # group_norm_mean.cpp: group_norm_mean_kernel_name (contiguous input)
    "group_norm_mean": EVERY_DTYPE_BOTH_MODES,
    # group_norm_mean.cpp: reads_channels_last (every channels-last input on the CPU)
    "group_norm_mean_channels_last": EVERY_DTYPE_BOTH_MODES,
    # conv_stage.cpp: select_conv_path -> kAten (every CPU convolution)
    "aten -> relu_group_norm": EVERY_DTYPE_BOTH_MODES,
    "aten -> group_norm_mean": EVERY_DTYPE_BOTH_MODES,
    # ... with a channels-last input (the conv output keeps the input's layout: run_conv3d)
    "aten -> group_norm_mean_channels_last": EVERY_DTYPE_BOTH_MODES,
}

TRANSPOSED_AS_FORWARD_COMBOS = frozenset(
    {
        (F32, "default"),
        (F16, "default"),
        (F16, "tf32_off"),
        (BF16, "default"),
        (BF16, "tf32_off"),
    }
)

CUDA_PATHS: Dict[str, Combos] = {
    "relu_group_norm": EVERY_DTYPE_BOTH_MODES,
    # channels_last_norm_cuda_supported: C a multiple of 16 / element size, <= 2048
    "relu_group_norm_channels_last": EVERY_DTYPE_BOTH_MODES,
    "group_norm_mean": EVERY_DTYPE_BOTH_MODES,
    "group_norm_mean_channels_last": EVERY_DTYPE_BOTH_MODES,
    # select_conv_path, transposed: kAten for float64 always, and for anything that
    # rewritable_as_forward rejects (stride 2 here); a channels-last input's conv output is
    # channels-last
    "aten -> relu_group_norm": EVERY_DTYPE_BOTH_MODES,
    "aten -> relu_group_norm_channels_last": EVERY_DTYPE_BOTH_MODES,
    # kTransposedAsForward: half / bfloat16 in both modes; float32 only with TF32 allowed and
    # eager_transposed_is_tf32 (3x3x3, stride 1, no padding, one conv group). Its float32 output
    # is NDHWC, which the GroupNorm reads, also in training (it writes the NCDHW copy that is
    # saved: conv_transpose3d_relu_group_norm.cpp, saves_copy_in_normalise); the half types'
    # output is in the input's layout.
    "transposed_as_forward -> relu_group_norm": TRANSPOSED_AS_FORWARD_COMBOS - {(F32, "default")},
    "transposed_as_forward -> relu_group_norm_channels_last": TRANSPOSED_AS_FORWARD_COMBOS,
    # kTransposedAsForwardSplitTf32: float32 with TF32 off, split_tf32_runs_transposed (one conv
    # group, C_in and C_out multiples of 4, a build with CUTLASS, compute capability 8.0+). NDHWC
    # output, as above; "-> relu_group_norm" only for C_out over the channels-last GroupNorm's
    # 2048 (channels_last_norm_cuda_supported), which no case here has.
    "transposed_as_forward_split_tf32 -> relu_group_norm_channels_last": frozenset(
        {(F32, "tf32_off")}
    ),
    # conv3d_group_norm_mean.cpp: conv3d_group_norm_mean_path, the one-pass family
    # (conv3d_group_norm_mean_onepass_plan.cpp: C_in / groups * k^3 <= 512), every dtype
    "onepass": EVERY_DTYPE_BOTH_MODES,
    # select_conv_path, kGroupNormMean: kAtenFloat32 for float32 on CUDA, else kAten
    "aten_float32 -> group_norm_mean": FLOAT32_BOTH_MODES,
    "aten_float32 -> group_norm_mean_channels_last": FLOAT32_BOTH_MODES,
    "aten -> group_norm_mean": NOT_FLOAT32_BOTH_MODES,
    "aten -> group_norm_mean_channels_last": NOT_FLOAT32_BOTH_MODES,
}

# ---------------------------------------------------------------------------------------
# Argument builders: (C, dtype, device) -> the operator's arguments (requiring grad).


def _num_groups(C: int) -> int:
    return 4 if C == 8 else 8  # the headlines' 8 groups; 2 channels per group at C = 8


def _transposed_in_channels(C: int) -> int:
    return max(4, C // 2)  # 4, 8, 12, 64 (the headline's 64 -> 128): multiples of 4


SHAPES: Dict[str, Callable[..., list]] = {
    "norm": lambda C, **kw: norm_args((2, C, 4, 5, 6), _num_groups(C), **kw),
    # 3x3x3, stride 1: the headline ConvTranspose3d's family (TF32 rewrite, split-TF32)
    "conv_transpose": lambda C, **kw: conv_transpose_args(
        (2, _transposed_in_channels(C), 4, 4, 4), C, 3, _num_groups(C), **kw
    ),
    # stride 2: not rewritable as a forward convolution (ATen's transposed convolution)
    "conv_transpose_stride2": lambda C, **kw: conv_transpose_args(
        (2, _transposed_in_channels(C), 3, 4, 4),
        C,
        3,
        _num_groups(C),
        stride=2,
        padding=1,
        output_padding=1,
        **kw,
    ),
    # The headline Conv3d's 3 input channels, 3x3x3: reduction 81, in the one-pass family
    "conv3d": lambda C, **kw: conv3d_args((2, 3, 6, 6, 6), C, 3, _num_groups(C), **kw),
    # 24 input channels, 3x3x3: reduction 648 > 512, outside the one-pass family
    "conv3d_wide": lambda C, **kw: conv3d_args((2, 24, 6, 6, 6), C, 3, _num_groups(C), **kw),
}

NORM = ("relu_group_norm", "group_norm_mean")
CT, C3 = "conv_transpose3d_relu_group_norm", "conv3d_group_norm_mean"
CONTIGUOUS, CHANNELS_LAST = ("contiguous",), ("channels_last",)

# (device, path) -> (op, SHAPES key, layouts). Layouts: those that reach the path (where the
# path depends on the layout), both for the split-TF32 convolution (its own NDHWC kernels,
# with layout conversions on the way in and out).
ROUTES: Dict[Tuple[str, str], Tuple[str, str, Tuple[str, ...]]] = {
    ("cpu", "relu_group_norm"): ("relu_group_norm", "norm", CONTIGUOUS),
    ("cpu", "group_norm_mean"): ("group_norm_mean", "norm", CONTIGUOUS),
    ("cpu", "group_norm_mean_channels_last"): ("group_norm_mean", "norm", CHANNELS_LAST),
    ("cpu", "aten -> relu_group_norm"): (CT, "conv_transpose_stride2", CONTIGUOUS),
    ("cpu", "aten -> group_norm_mean"): (C3, "conv3d", CONTIGUOUS),
    ("cpu", "aten -> group_norm_mean_channels_last"): (C3, "conv3d", CHANNELS_LAST),
    ("cuda", "relu_group_norm"): ("relu_group_norm", "norm", CONTIGUOUS),
    ("cuda", "relu_group_norm_channels_last"): ("relu_group_norm", "norm", CHANNELS_LAST),
    ("cuda", "group_norm_mean"): ("group_norm_mean", "norm", CONTIGUOUS),
    ("cuda", "group_norm_mean_channels_last"): ("group_norm_mean", "norm", CHANNELS_LAST),
    ("cuda", "aten -> relu_group_norm"): (CT, "conv_transpose_stride2", CONTIGUOUS),
    ("cuda", "aten -> relu_group_norm_channels_last"): (
        CT,
        "conv_transpose_stride2",
        CHANNELS_LAST,
    ),
    ("cuda", "transposed_as_forward -> relu_group_norm"): (CT, "conv_transpose", CONTIGUOUS),
    ("cuda", "transposed_as_forward -> relu_group_norm_channels_last"): (
        CT,
        "conv_transpose",
        CONTIGUOUS + CHANNELS_LAST,
    ),
    ("cuda", "transposed_as_forward_split_tf32 -> relu_group_norm_channels_last"): (
        CT,
        "conv_transpose",
        CONTIGUOUS + CHANNELS_LAST,
    ),
    ("cuda", "onepass"): (C3, "conv3d", CONTIGUOUS),
    ("cuda", "aten_float32 -> group_norm_mean"): (C3, "conv3d_wide", CONTIGUOUS),
    ("cuda", "aten_float32 -> group_norm_mean_channels_last"): (C3, "conv3d_wide", CHANNELS_LAST),
    ("cuda", "aten -> group_norm_mean"): (C3, "conv3d_wide", CONTIGUOUS),
    ("cuda", "aten -> group_norm_mean_channels_last"): (C3, "conv3d_wide", CHANNELS_LAST),
}
PATHS = {"cpu": CPU_PATHS, "cuda": CUDA_PATHS}
# Routes whose (dtype, mode) combos depend on the layout: (device, path, layout) -> the combos
# of PATHS[device][path] that reach the path in that layout (an NCDHW input reaches the
# channels-last GroupNorm through a float32 NDHWC conv output only).
LAYOUT_COMBOS: Dict[Tuple[str, str, str], Combos] = {
    ("cuda", "transposed_as_forward -> relu_group_norm_channels_last", "contiguous"): frozenset(
        {(F32, "default")}
    ),
}

# ---------------------------------------------------------------------------------------
# Tolerances (rtol, atol relative to the largest magnitude), those of the existing tests of
# the same path and dtype. Unlisted: helpers.TOLERANCES (test_ops.py's float32 / float64
# tests, its low-precision tests of the norm operators, test_conv_transpose_split_tf32.py,
# test_conv3d_onepass.test_outside_the_family_runs_cudnn's forward).

# The one-pass kernels: test_conv3d_onepass.TOLERANCE (output) and GRAD_TOLERANCE.
ONEPASS_TOL = {F32: (1e-5, 1e-5), F64: (1e-10, 1e-10), F16: (2e-3, 2e-3), BF16: (1e-2, 1e-2)}
ONEPASS_GRAD_TOL = {F32: (1e-4, 5e-5), F64: (1e-9, 1e-10), F16: (1e-2, 2e-3), BF16: (4e-2, 1e-2)}
# A conv operator in half / bfloat16, against the reference whose convolution is ATen's in
# that dtype (low_precision_conv): test_ops.LOW_PRECISION_TOL's conv operators.
LOW_PRECISION_CONV_TOL = {F16: (2e-2, 2e-2), BF16: (8e-2, 8e-2)}
# A float32 convolution that cuDNN may round to TF32 (TF32 allowed, ATen's convolution or
# its forward rewrite): test_ops.test_transposed_conv_as_forward_tf32's 2e-2, which is
# LOW_PRECISION_TOL[float16]'s too (TF32 keeps float16's 10-bit mantissa).
TF32_CONV_TOL = (2e-2, 2e-2)
# cuDNN's float32 backward convolutions under conv3d_group_norm_mean (a GroupNorm + mean
# gradient summed over every position): test_outside_the_family_trains_through_cudnn.
CUDNN_FLOAT32_GRAD_TOL = (1e-4, 5e-5)


def _transposed_as_forward(input, weight, bias, stride, padding, output_padding, groups, dilation):
    """conv_stage.cpp's transposed_as_forward: a stride-1 transposed convolution as the forward
    one it equals (taps flipped, channel axes swapped per conv group, padding
    (k - 1) * dilation - padding), the same ATen call the path makes."""
    c_in, c_out_per_group, *k = weight.shape
    w = weight.reshape(groups, c_in // groups, c_out_per_group, *k).transpose(1, 2)
    w = w.reshape(groups * c_out_per_group, c_in // groups, *k).flip(2, 3, 4)
    forward_padding = [(kk - 1) * d - p for kk, d, p in zip(k, dilation, padding)]
    return F.conv3d(input, w, bias, 1, forward_padding, dilation, groups)


def ref_transposed_as_forward_relu_group_norm(
    input, weight, conv_bias, stride, padding, output_padding, groups, dilation, num_groups,
    gn_weight, gn_bias, eps, low_precision_conv=None,
):  # fmt: skip
    """helpers.ref_conv_transpose3d_relu_group_norm whose `low_precision_conv` convolution is
    the forward rewrite that transposed_as_forward runs (not eager's transposed one): with TF32
    allowed the two round differently, and the ReLU mask of one differs from the other's for
    outputs within that rounding of 0 (which moves gradients by O(1) there)."""
    conv_args = (input, weight, conv_bias, stride, padding, output_padding, groups, dilation)
    y = F.conv_transpose3d(*conv_args)
    y = _with_low_precision_conv(y, _transposed_as_forward, conv_args, low_precision_conv)
    return F.group_norm(F.relu(y), num_groups, gn_weight, gn_bias, eps)


@dataclass(frozen=True)
class Case:
    device: str
    path: str
    op: str
    shape: str
    dtype: torch.dtype
    mode: str
    channels: int
    layout: str
    dist: str

    @property
    def id(self) -> str:
        path = self.path.replace(" -> ", "+")
        return (
            f"{self.device}-{path}-{DTYPE_NAMES[self.dtype]}-{self.mode}-C{self.channels}-"
            f"{self.layout}-{self.dist}"
        )

    @property
    def may_round_to_tf32(self) -> bool:
        """cuDNN's float32 convolutions may use TF32 (the forward ones too, except
        conv3d_group_norm_mean's aten_float32 and the split-TF32 kernels)."""
        return self.device == "cuda" and self.dtype == F32 and MODES[self.mode]

    def build(self) -> list:
        """The case's arguments; for the ReLU operator, drawn again (from the seeded generator)
        until every output of its convolution is clear of ReLU's kink (_clear_of_relu_kink)."""
        for _ in range(20):
            args = self._draw()
            if self.op != CT or _clear_of_relu_kink(args):
                return args
        raise AssertionError(f"{self.id}: no draw kept the convolution clear of ReLU's kink")

    def _draw(self) -> list:
        args = SHAPES[self.shape](self.channels, dtype=self.dtype, device=self.device)
        x = args[0].detach()
        if self.dist == "rand":  # non-negative, as users' inputs: a common offset
            x = torch.rand(x.shape, dtype=F64).to(dtype=self.dtype, device=self.device)
        if self.layout == "channels_last":
            x = x.to(memory_format=torch.channels_last_3d)
            assert not x.is_contiguous()
        args[0] = x.requires_grad_(True)
        return args

    def check_kwargs(self) -> dict:
        """check_against_reference's tolerances (and reference convolution) for this case."""
        if self.path == "onepass":
            rtol, atol = ONEPASS_TOL[self.dtype]
            grad_rtol, grad_atol = ONEPASS_GRAD_TOL[self.dtype]
            return dict(rtol=rtol, atol=atol, grad_rtol=grad_rtol, grad_atol=grad_atol)
        if self.op in NORM or self.dtype == F64:
            return {}
        if self.dtype in LOW_PRECISION_CONV_TOL:
            rtol, atol = LOW_PRECISION_CONV_TOL[self.dtype]
            return dict(rtol=rtol, atol=atol, low_precision_conv=self.dtype)
        if self.op == CT:
            if not self.may_round_to_tf32:
                return {}
            # The reference's convolution is the path's own in float32 under the same flags
            # (eager's for aten; the forward rewrite for transposed_as_forward:
            # Case.reference_override), so that its ReLU mask is the fused one's: a float64
            # convolution flips it for outputs within TF32's rounding of 0, which moves
            # gradients by O(1) there (why test_transposed_conv_as_forward_tf32 checks the
            # forward only).
            return dict(rtol=TF32_CONV_TOL[0], atol=TF32_CONV_TOL[1], low_precision_conv=F32)
        if self.device == "cpu":
            return {}
        kwargs = dict(grad_rtol=CUDNN_FLOAT32_GRAD_TOL[0], grad_atol=CUDNN_FLOAT32_GRAD_TOL[1])
        if self.may_round_to_tf32:
            # aten_float32 keeps float32 products forward; its input and weight gradients are
            # cuDNN's backward convolutions under the current flags (conv_stage.cpp,
            # conv3d_backward): TF32 where allowed.
            kwargs["grad_tols"] = {0: TF32_CONV_TOL, 1: TF32_CONV_TOL}
        return kwargs

    @property
    def training_path(self) -> str:
        """The path with autograd: `path`, where for an NCDHW input the split-TF32 convolution
        on the wgmma kernel computes the GroupNorm's statistics too ("+relu_moments", as in
        inference_path: its output is read as computed, and the saved NCDHW copy written by the
        GroupNorm)."""
        conv, norm = (self.path.split(" -> ") + [""])[:2]
        if (
            conv == "transposed_as_forward_split_tf32"
            and self.layout == "contiguous"
            and fused_ops.split_tf32_conv_kernel() == "wgmma"
        ):
            return conv + "+relu_moments -> " + norm
        return self.path

    @property
    def inference_path(self) -> str:
        """The path without autograd: the float32 CUDA rewrites of a transposed convolution
        leave their output NDHWC (the CPU's keeps the input's layout), which the GroupNorm
        reads in place (conv_stage.cpp, ConvOutputLayout::kAsComputed); on the wgmma kernel
        the split-TF32 one computes the GroupNorm's statistics too (conv_emits_relu_moments:
        the shapes here have 216 output positions per sample, at least 128)."""
        conv = self.path.split(" -> ")[0]
        if (
            self.device == "cuda"
            and self.op == CT
            and self.dtype == F32
            and conv.startswith("transposed_as_forward")
        ):
            if (
                conv == "transposed_as_forward_split_tf32"
                and fused_ops.split_tf32_conv_kernel() == "wgmma"
            ):
                conv += "+relu_moments"
            return conv + " -> relu_group_norm_channels_last"
        return self.path

    @property
    def reference_override(self):
        """The reference to use instead of helpers.REFERENCES[op], or None."""
        if (
            self.device == "cuda"
            and self.path.startswith("transposed_as_forward -> ")
            and self.dtype == F32
        ):
            return ref_transposed_as_forward_relu_group_norm
        return None


def _clear_of_relu_kink(args) -> bool:
    """Whether every output of the (float64) transposed convolution of conv_transpose3d's args
    is at least 1e-6 of the largest away from 0. Closer, a float32 convolution (the fused
    one's or eager's) may round it to the other side of 0, and ReLU's gradient there is 0 in
    one and 1 in the other: an O(1) change of the gradients that is no one's error (seen: a
    float64 output of 6e-8 from 0 that the split-TF32 convolution put on the other side)."""
    conv_args = [a.detach().double() if isinstance(a, torch.Tensor) else a for a in args[:8]]
    y = F.conv_transpose3d(*conv_args).abs()
    return bool((y >= 1e-6 * y.max()).all())


def _cases() -> List[Case]:
    cases = []
    for (device, path), (op, shape, layouts) in ROUTES.items():
        combos = sorted(PATHS[device].get(path, ()), key=lambda c: (DTYPE_NAMES[c[0]], c[1]))
        for (dtype, mode), channels, layout, dist in itertools.product(
            combos, CHANNELS, layouts, DISTS
        ):
            if (dtype, mode) in LAYOUT_COMBOS.get((device, path, layout), {(dtype, mode)}):
                cases.append(Case(device, path, op, shape, dtype, mode, channels, layout, dist))
    return cases


CASES = _cases()


def _param(case: Case):
    marks = list(cuda_marks()) if case.device == "cuda" else []
    if case.mode == "tf32_off":
        marks.append(pytest.mark.tf32_off)
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_path_values_and_gradients(case: Case, monkeypatch):
    assert torch.backends.cudnn.allow_tf32 == MODES[case.mode]  # (conftest's fixture)
    if case.reference_override is not None:
        monkeypatch.setitem(REFERENCES, case.op, case.reference_override)
    torch.manual_seed(zlib.crc32(case.id.encode()))
    args = case.build()
    assert fused_ops.dispatch_path(case.op, *args) == case.training_path
    kwargs = case.check_kwargs()
    check_against_reference(case.op, args, **kwargs)
    # Without autograd: the inference path (the one-pass forward without autograd may take the
    # tensor-core kernel: test_conv3d_onepass.TOLERANCE holds it to the same bounds).
    with torch.no_grad():
        assert fused_ops.dispatch_path(case.op, *args) == case.inference_path
        out = fused_op(case.op)(*args)
    ref, _ = reference(case.op, args, low_precision_conv=kwargs.get("low_precision_conv"))
    assert_close_to_ref(
        out, ref, case.dtype, kwargs.get("rtol"), kwargs.get("atol"), what=f"{case.op} no_grad"
    )


# ---------------------------------------------------------------------------------------
# Coverage


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_path_is_covered(device):
    """The cases reach every path of PATHS[device], in every (dtype, mode) it takes, at every
    channel count and input distribution (the CUDA list is checked without a GPU too)."""
    cases = [c for c in CASES if c.device == device]
    assert {c.path for c in cases} == set(PATHS[device])
    for path, combos in PATHS[device].items():
        covered = {(c.dtype, c.mode, c.channels, c.dist) for c in cases if c.path == path}
        expected = {(d, m, ch, di) for (d, m) in combos for ch in CHANNELS for di in DISTS}
        assert covered == expected, path


def _literals_of(relative_path: str, function: str) -> set:
    """The string literals in the definition of `function` in a C++ source file."""
    with open(os.path.join(REPO_DIR, relative_path)) as f:
        source = f.read()
    start = re.search(rf"^\S.*\b{function}\(", source, re.MULTILINE)
    assert start, f"no definition of {function} in {relative_path}"
    body = source[start.start() : source.index("\n}", start.start())]
    return set(re.findall(r'"([^"]*)"', body))


@pytest.mark.skipif(
    not os.path.isdir(os.path.join(REPO_DIR, "ops")), reason="no source tree (ops/) to read"
)
def test_path_names_match_the_sources():
    """The names PATHS is built from are those the C++ sources return: a new convolution path
    (conv_path_name) or GroupNorm kernel name fails here until it is listed (and covered)."""
    conv_names = _literals_of("ops/conv/conv_stage.cpp", "conv_path_name") - {"unknown"}
    norm_names = _literals_of("ops/norm/group_norm_mean.cpp", "group_norm_mean_kernel_name")
    norm_names |= _literals_of("ops/norm/relu_group_norm.cpp", "relu_group_norm_kernel_name")
    onepass = _literals_of("ops/conv/conv3d_group_norm_mean.cpp", "conv3d_group_norm_mean_path")
    listed = set(CPU_PATHS) | set(CUDA_PATHS)
    listed_conv = {p.split(" -> ")[0] for p in listed if " -> " in p}
    listed_norm = {p.split(" -> ")[-1] for p in listed if p != "onepass"}
    assert listed_conv == conv_names
    assert listed_norm == norm_names
    assert "onepass" in onepass and "onepass" in listed
