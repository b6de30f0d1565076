"""Helpers of the fused_ops Python tests (the one home of references, tolerances and
argument builders; conftest.py holds the fixtures only).

* ``DEVICES``: "cpu" and "cuda"; the cuda variant carries the ``cuda`` marker and is
  skipped with a reason (``no CUDA GPU: ...``) when there is no GPU or the loaded library has
  no CUDA kernels.
* Independent float64 references built from PyTorch composites (F.conv_transpose3d,
  F.conv3d, F.relu, F.group_norm, .mean), and comparison helpers with per-dtype tolerances.
* Random parameters: GroupNorm weight/bias and conv bias are ALWAYS random (GroupNorm's
  default init makes conv3d_group_norm_mean's output independent of its input).
"""

from __future__ import annotations

import functools
import os
from typing import Dict, List, Optional, Sequence

# Deterministic cuBLAS if some test turns on torch.use_deterministic_algorithms (must be set
# before CUDA initialises).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import pytest
import torch
import torch.nn.functional as F

import fused_ops
from fused_ops import reference as reference_models
from fused_ops.testing import randomise_  # noqa: F401 (re-exported for the tests)

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

OPS = [
    "relu_group_norm",
    "group_norm_mean",
    "conv_transpose3d_relu_group_norm",
    "conv3d_group_norm_mean",
]


# ---------------------------------------------------------------------------------------
# Devices


@functools.lru_cache(maxsize=None)
def cuda_skip_reason() -> Optional[str]:
    """Why CUDA tests cannot run here, or None if they can."""
    if not torch.cuda.is_available():
        details = (
            f"torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"built with CUDA {torch.version.cuda}, device_count={torch.cuda.device_count()})"
        )
        return f"no CUDA GPU: {details}"
    if not torch._C._dispatch_has_kernel_for_dispatch_key("fused::relu_group_norm", "CUDA"):
        return (
            "no CUDA GPU: a GPU is present but the loaded library "
            f"({fused_ops.library_path}) was built without CUDA kernels"
        )
    return None


def cuda_marks():
    reason = cuda_skip_reason()
    return [pytest.mark.cuda, pytest.mark.skipif(reason is not None, reason=reason or "")]


def runs_wgmma() -> bool:
    """Whether the current CUDA device runs the split-TF32 and TF32 convolutions on our Hopper
    wgmma kernels (fused_ops.split_tf32_conv_kernel; sm_90 and a build with CUTLASS)."""
    return fused_ops.split_tf32_conv_kernel() == "wgmma"


def requires_cuda(fn):
    """Decorator of CUDA-only tests."""
    for mark in cuda_marks():
        fn = mark(fn)
    return fn


DEVICES = ["cpu", pytest.param("cuda", marks=cuda_marks())]


def _torchscript_probe(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@functools.lru_cache(maxsize=None)
def torchscript_skip_reason() -> Optional[str]:
    """Why TorchScript tests cannot run with this PyTorch, or None if they can."""
    jit = getattr(torch, "jit", None)
    if jit is None or not all(hasattr(jit, a) for a in ("script", "save", "load")):
        return f"torch.jit (TorchScript) is not available in PyTorch {torch.__version__}"
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scripted = jit.script(_torchscript_probe)
        if not torch.equal(scripted(torch.zeros(2)), torch.ones(2)):
            return f"torch.jit.script gives wrong results in PyTorch {torch.__version__}"
    except Exception as e:  # pragma: no cover - depends on a future PyTorch
        return f"torch.jit.script does not work in PyTorch {torch.__version__}: {e!r}"
    return None


def requires_torchscript(fn):
    reason = torchscript_skip_reason()
    return pytest.mark.skipif(reason is not None, reason=reason or "")(fn)


# ---------------------------------------------------------------------------------------
# Independent float64 references (PyTorch composites)


def _spatial_mean(y: torch.Tensor) -> torch.Tensor:
    return y.mean(dim=list(range(1, y.dim()))) if y.dim() > 1 else y


def _group_norm(x, num_groups, weight, bias, eps):
    # PyTorch 2.11's CUDA group_norm backward fails ("tensor does not have a device") with a
    # bias but no weight: give it the equivalent weight of ones then.
    if weight is None and bias is not None:
        weight = torch.ones(x.shape[1], dtype=x.dtype, device=x.device)
    return F.group_norm(x, num_groups, weight, bias, eps)


def ref_relu_group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    return _group_norm(F.relu(input), num_groups, weight, bias, eps)


def ref_group_norm_mean(input, num_groups, weight=None, bias=None, eps=1e-5):
    return _spatial_mean(_group_norm(input, num_groups, weight, bias, eps))


def _with_low_precision_conv(y: torch.Tensor, conv, args, dtype: Optional[torch.dtype]):
    """y (a float64 convolution output) replaced, in the forward pass only, by the same
    convolution computed by ATen in `dtype` (from the args rounded to `dtype`); identity in
    the backward pass. This is what a computation in `dtype` sees: its ReLU mask and
    statistics come from the rounded convolution."""
    if dtype is None:
        return y
    low = [a.detach().to(dtype) if isinstance(a, torch.Tensor) else a for a in args]
    y_low = conv(*low).to(y.dtype)
    return y + (y_low - y.detach())


def ref_conv_transpose3d_relu_group_norm(
    input,
    weight,
    conv_bias,
    stride,
    padding,
    output_padding,
    groups,
    dilation,
    num_groups,
    gn_weight,
    gn_bias,
    eps,
    low_precision_conv=None,
):
    conv_args = (input, weight, conv_bias, stride, padding, output_padding, groups, dilation)
    y = F.conv_transpose3d(*conv_args)
    y = _with_low_precision_conv(y, F.conv_transpose3d, conv_args, low_precision_conv)
    return _group_norm(F.relu(y), num_groups, gn_weight, gn_bias, eps)


def ref_conv3d_group_norm_mean(
    input,
    weight,
    conv_bias,
    stride,
    padding,
    dilation,
    groups,
    num_groups,
    gn_weight,
    gn_bias,
    eps,
    low_precision_conv=None,
):
    conv_args = (input, weight, conv_bias, stride, padding, dilation, groups)
    y = F.conv3d(*conv_args)
    y = _with_low_precision_conv(y, F.conv3d, conv_args, low_precision_conv)
    return _spatial_mean(_group_norm(y, num_groups, gn_weight, gn_bias, eps))


REFERENCES = {
    "relu_group_norm": ref_relu_group_norm,
    "group_norm_mean": ref_group_norm_mean,
    "conv_transpose3d_relu_group_norm": ref_conv_transpose3d_relu_group_norm,
    "conv3d_group_norm_mean": ref_conv3d_group_norm_mean,
}


def fused_op(name: str):
    return getattr(torch.ops.fused, name)


def double_leaf_copy(arg):
    """A float64 leaf copy of a tensor argument (requires_grad as the original); others as is."""
    if isinstance(arg, torch.Tensor):
        return arg.detach().to(torch.float64).requires_grad_(arg.requires_grad)
    return arg


def reference(
    name: str,
    args: Sequence,
    device: Optional[str] = None,
    low_precision_conv: Optional[torch.dtype] = None,
):
    """The float64 reference output of op `name`, from float64 copies of `args`.

    Returns (output, float64 args) so that gradients can be read from the args. The reference
    runs on `device` (default: the args' device). For the conv operators,
    `low_precision_conv` (a dtype) takes the convolution's output from ATen's convolution in
    that dtype (see _with_low_precision_conv); the rest is float64.
    """
    dargs = [double_leaf_copy(a) for a in args]
    if device is not None:
        dargs = [
            a.detach().to(device).requires_grad_(a.requires_grad)
            if isinstance(a, torch.Tensor)
            else a
            for a in dargs
        ]
    kwargs = {}
    if low_precision_conv is not None and name.startswith("conv"):
        kwargs["low_precision_conv"] = low_precision_conv
    return REFERENCES[name](*dargs, **kwargs), dargs


# ---------------------------------------------------------------------------------------
# Tolerances and comparisons

# (rtol, atol) of a result of the given dtype against the float64 reference. atol is
# relative to the reference's largest magnitude (at least 1e-3), so one tolerance serves
# outputs of order 1 and gradients of very different scales alike.
TOLERANCES: Dict[torch.dtype, tuple] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (4e-2, 4e-2),
}


def assert_close_to_ref(
    actual: torch.Tensor,
    expected: torch.Tensor,
    dtype: torch.dtype = None,
    rtol: float = None,
    atol: float = None,
    what: str = "",
):
    dtype = dtype or actual.dtype
    default_rtol, default_atol = TOLERANCES[dtype]
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    actual64 = actual.detach().to(device=expected.device, dtype=torch.float64)
    expected = expected.detach().to(torch.float64)
    assert torch.isfinite(actual64).all(), f"{what}: non-finite values"
    scale = max(expected.abs().max().item() if expected.numel() else 0.0, 1e-3)
    torch.testing.assert_close(
        actual64, expected, rtol=rtol, atol=atol * scale, msg=lambda m: f"{what} ({dtype}): {m}"
    )


def max_abs_err(actual: Optional[torch.Tensor], ref: torch.Tensor) -> float:
    """The largest |actual - ref| in float64 (actual None: an absent gradient, i.e. zero)."""
    if actual is None:
        actual = torch.zeros_like(ref)
    return (actual.detach().double() - ref.detach().to(actual.device)).abs().max().item()


def assert_same_run(actual: torch.Tensor, expected: torch.Tensor, what: str = ""):
    """Two runs of the same kernels on the same data: bitwise equal on the CPU; on CUDA
    within 1e-5 of the largest magnitude (backward kernels there may reduce in a
    nondeterministic order unless torch.use_deterministic_algorithms(True))."""
    if expected.device.type == "cpu":
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, msg=lambda m: f"{what}: {m}")
    else:
        scale = max(expected.abs().max().item() if expected.numel() else 0.0, 1e-3)
        torch.testing.assert_close(
            actual, expected, rtol=1e-5, atol=1e-5 * scale, msg=lambda m: f"{what}: {m}"
        )


def assert_close_scaled(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str = ""):
    """|actual - expected| <= tol * |expected| + tol * max|expected| elementwise."""
    scale = max(expected.abs().max().item() if expected.numel() else 0.0, 1e-3)
    torch.testing.assert_close(
        actual, expected, rtol=tol, atol=tol * scale, msg=lambda m: f"{what}: {m}"
    )


def tensor_arg_indices(args: Sequence) -> List[int]:
    return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]


def check_against_reference(
    name: str,
    args: Sequence,
    *,
    backward: bool = True,
    dtype: torch.dtype = None,
    rtol=None,
    atol=None,
    grad_rtol=None,
    grad_atol=None,
    grad_tols=None,
    ref_device: Optional[str] = None,
    low_precision_conv: Optional[torch.dtype] = None,
):
    """Runs torch.ops.fused.<name>(*args) and its float64 reference and compares the outputs
    and (if backward) the gradients of every tensor argument that requires grad, for a
    random grad_output. `grad_tols` maps an argument index to the (rtol, atol) of its
    gradient. Returns the fused output."""
    out = fused_op(name)(*args)
    ref, dargs = reference(name, args, device=ref_device, low_precision_conv=low_precision_conv)
    dtype = dtype or out.dtype
    assert_close_to_ref(out, ref, dtype, rtol, atol, what=f"{name} output")
    if backward and out.requires_grad:
        grad_out = torch.randn(out.shape, dtype=out.dtype, device=out.device)
        leaves = [i for i in tensor_arg_indices(args) if args[i].requires_grad]
        grads = torch.autograd.grad(out, [args[i] for i in leaves], grad_out)
        ref_grads = torch.autograd.grad(
            ref,
            [dargs[i] for i in leaves],
            grad_out.to(device=ref.device, dtype=torch.float64),
            allow_unused=True,
        )
        for i, g, rg in zip(leaves, grads, ref_grads):
            if rg is None:
                rg = torch.zeros_like(dargs[i])
            g_rtol = grad_rtol if grad_rtol is not None else rtol
            g_atol = grad_atol if grad_atol is not None else atol
            if grad_tols and i in grad_tols:
                g_rtol, g_atol = grad_tols[i]
            assert_close_to_ref(g, rg, dtype, g_rtol, g_atol, what=f"{name} grad of argument {i}")
    return out


# ---------------------------------------------------------------------------------------
# Argument builders


def rand_param(shape, dtype, device, requires_grad=False, mean=0.0, std=1.0):
    t = (torch.randn(shape, dtype=torch.float64) * std + mean).to(dtype=dtype, device=device)
    return t.requires_grad_(requires_grad)


def norm_args(
    shape,
    num_groups,
    *,
    affine=True,
    weight=None,
    bias=None,
    eps=1e-5,
    dtype=torch.float32,
    device="cpu",
    requires_grad=True,
):
    """Arguments of relu_group_norm / group_norm_mean with a random input and random affine.
    `weight`/`bias` override `affine` (True: random, False: None)."""
    C = shape[1]
    weight = affine if weight is None else weight
    bias = affine if bias is None else bias
    x = rand_param(shape, dtype, device, requires_grad)
    w = rand_param((C,), dtype, device, requires_grad, mean=1.0, std=0.5) if weight else None
    b = rand_param((C,), dtype, device, requires_grad, std=0.5) if bias else None
    return [x, num_groups, w, b, eps]


def _t(v):
    return [v] * 3 if isinstance(v, int) else list(v)


def _conv_parameters(out_channels, conv_bias, gn_affine, dtype, device, requires_grad):
    """Random conv bias, GroupNorm weight and bias (or None where absent)."""

    def param(**kw):
        return rand_param((out_channels,), dtype, device, requires_grad, **kw)

    cb = param(std=0.3) if conv_bias else None
    gw = param(mean=1.0, std=0.5) if gn_affine else None
    gb = param(std=0.5) if gn_affine else None
    return cb, gw, gb


def conv_transpose_args(
    input_shape,
    out_channels,
    kernel_size,
    num_groups,
    *,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
    conv_bias=True,
    gn_affine=True,
    eps=1e-5,
    dtype=torch.float32,
    device="cpu",
    requires_grad=True,
):
    """Arguments of conv_transpose3d_relu_group_norm (random input, weights, biases)."""
    c_in = input_shape[1]
    k = _t(kernel_size)
    x = rand_param(input_shape, dtype, device, requires_grad)
    fan = c_in * k[0] * k[1] * k[2] // groups
    w = rand_param((c_in, out_channels // groups, *k), dtype, device, requires_grad, std=fan**-0.5)
    cb, gw, gb = _conv_parameters(out_channels, conv_bias, gn_affine, dtype, device, requires_grad)
    return [x, w, cb, _t(stride), _t(padding), _t(output_padding), groups, _t(dilation),
            num_groups, gw, gb, eps]  # fmt: skip


def conv3d_args(
    input_shape,
    out_channels,
    kernel_size,
    num_groups,
    *,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    conv_bias=True,
    gn_affine=True,
    eps=1e-5,
    dtype=torch.float32,
    device="cpu",
    requires_grad=True,
):
    """Arguments of conv3d_group_norm_mean (random input, weights, biases)."""
    c_in = input_shape[1]
    k = _t(kernel_size)
    x = rand_param(input_shape, dtype, device, requires_grad)
    fan = c_in // groups * k[0] * k[1] * k[2]
    w = rand_param((out_channels, c_in // groups, *k), dtype, device, requires_grad, std=fan**-0.5)
    cb, gw, gb = _conv_parameters(out_channels, conv_bias, gn_affine, dtype, device, requires_grad)
    return [x, w, cb, _t(stride), _t(padding), _t(dilation), groups, num_groups, gw, gb, eps]


def detach_args(args, requires_grad=None):
    """Fresh leaf copies of the tensor arguments (same values)."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            rg = a.requires_grad if requires_grad is None else requires_grad
            a = a.detach().clone().requires_grad_(rg)
        out.append(a)
    return out


def convert_args(args, dtype=None, device=None, requires_grad=None):
    """Copies of the tensor arguments converted to dtype/device (leaves)."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            rg = a.requires_grad if requires_grad is None else requires_grad
            a = a.detach().to(dtype=dtype or a.dtype, device=device or a.device).requires_grad_(rg)
        out.append(a)
    return out


# ---------------------------------------------------------------------------------------
# Drop-in modules and the originals they replace (fused_ops.reference)

# Headline-like configurations at small sizes: (original class, fused class, init args,
# input shape).
MODELS = {
    "conv_transpose3d_relu_group_norm": (
        reference_models.ConvTranspose3dReLUGroupNorm,
        fused_ops.ConvTranspose3dReLUGroupNorm,
        dict(in_channels=8, out_channels=16, kernel_size=3, groups=4, bias=False),
        (2, 8, 6, 7, 5),
    ),
    "conv_transpose3d_relu_group_norm_conv_bias": (
        reference_models.ConvTranspose3dReLUGroupNorm,
        fused_ops.ConvTranspose3dReLUGroupNorm,
        dict(in_channels=6, out_channels=12, kernel_size=2, groups=12, bias=True),
        (1, 6, 5, 3, 7),
    ),
    "conv3d_group_norm_mean": (
        reference_models.Conv3dGroupNormMean,
        fused_ops.Conv3dGroupNormMean,
        dict(in_channels=3, out_channels=24, kernel_size=3, num_groups=8),
        (4, 3, 8, 9, 10),
    ),
    "conv3d_group_norm_mean_kernel_triple": (
        reference_models.Conv3dGroupNormMean,
        fused_ops.Conv3dGroupNormMean,
        dict(in_channels=4, out_channels=6, kernel_size=(3, 1, 2), num_groups=2),
        (3, 4, 5, 6, 7),
    ),
}


def drop_in_pair(cls_name, init, device="cpu", dtype=torch.float32):
    """(original, fused): fused_ops.reference.<cls_name>(**init) with random parameters
    (GroupNorm affine and conv bias too), and the drop-in fused_ops.<cls_name> with the same
    state_dict, both on device, in dtype."""
    original = randomise_(getattr(reference_models, cls_name)(**init))
    fused = getattr(fused_ops, cls_name)(**init)
    fused.load_state_dict(original.state_dict())
    return original.to(device=device, dtype=dtype), fused.to(device=device, dtype=dtype)


def relu_gradient_failures(report, slack=2e-7):
    """The gradients of a fused_ops.testing.compare_relu_gradients_on_own_masks report whose
    error against float64 is above twice eager's (+ slack: float32's rounding of the output,
    whatever eager reaches), as lines for an assertion message."""
    return [
        f"{what}: fused {e.fused_error:.3e}, eager {e.eager_error:.3e}"
        for what, e in report.gradients.items()
        if not e.fused_error <= 2 * e.eager_error + slack
    ]


def check_conv_transpose_tf32_gradients(shape, c_out, groups, device="cuda"):
    """ConvTranspose3dReLUGroupNorm (3x3x3, random affine) against eager on torch.rand input of
    `shape`, under the current TF32 flags: every gradient at most twice eager's error against
    float64, each on its model's own ReLU mask. Returns (fused, x) for further checks."""
    init = dict(in_channels=shape[1], out_channels=c_out, kernel_size=3, groups=groups)
    original, fused = drop_in_pair("ConvTranspose3dReLUGroupNorm", init, device)
    x = torch.rand(shape, device=device)
    report = fused_ops.testing.compare_relu_gradients_on_own_masks(original, fused, x)
    assert "grad input" in report.gradients
    failures = relu_gradient_failures(report)
    assert not failures, "\n".join(failures)
    return fused, x


def backward_kernel_names(out, grad=None):
    """The CUDA kernels (profiler keys) of out's backward for `grad` (random where None, drawn
    before the profile)."""
    grad = torch.randn_like(out) if grad is None else grad
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out.backward(grad)
        torch.cuda.synchronize()
    return [e.key for e in prof.key_averages()]


def make_pair(name, device="cpu", dtype=torch.float32):
    """(original, fused, input shape) of MODELS[name] (drop_in_pair)."""
    Original, _, init, input_shape = MODELS[name]
    return (*drop_in_pair(Original.__name__, init, device, dtype), input_shape)


def forward_backward(model, x, grad_out=None):
    """Output, grad_out, input grad and {param name: grad} of model(x) for a random
    grad_output (reused if given)."""
    x = x.detach().clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    out = model(x)
    if grad_out is None:
        grad_out = torch.randn(out.shape, dtype=out.dtype, device=out.device)
    out.backward(grad_out.to(out.dtype))
    # (torch.compile's wrapper names the parameters "_orig_mod.<name>")
    grads = {n.removeprefix("_orig_mod."): p.grad for n, p in model.named_parameters()}
    return out.detach(), grad_out, x.grad, grads
