"""fused_ops: fused PyTorch operators for Conv3d / ConvTranspose3d + ReLU + GroupNorm patterns.

Importing this package loads the C++ library ``libfused_ops.so``, which registers the
operators with the PyTorch dispatcher as ``torch.ops.fused.*``:

* ``torch.ops.fused.relu_group_norm``: ``group_norm(relu(x))``
* ``torch.ops.fused.group_norm_mean``: ``group_norm(x).mean(all dims but 0)``, shape ``(N,)``
* ``torch.ops.fused.conv_transpose3d_relu_group_norm``:
  ``group_norm(relu(conv_transpose3d(x)))``
* ``torch.ops.fused.conv3d_group_norm_mean``: ``group_norm(conv3d(x)).mean(all dims but 0)``

The library is searched for, in this order:

1. the file named by the environment variable ``FUSED_OPS_LIBRARY``;
2. ``libfused_ops.so`` in this package's directory (where ``pip install .`` puts it);
3. in a source checkout only, ``<repo>/build/libfused_ops.so`` (``tools/build.sh``'s
   default build folder).

No other folder is guessed at: a missing library is an ImportError naming where it looked.
If the operators are already registered in this process (the library was loaded by other
means), nothing is loaded again. ``library_path`` says which file was loaded (``None`` if it
was loaded by other means and could not be identified).

This module also offers functional wrappers that accept ints or triples for the
convolution arguments (like ``torch.nn.functional.conv3d``) and the drop-in modules
:class:`ConvTranspose3dReLUGroupNorm` and :class:`Conv3dGroupNormMean`.
"""

from __future__ import annotations

import os
from typing import List, Optional, Sequence, Union

import torch

from ._version import __version__

__all__ = [
    "__version__",
    "library_path",
    "library_search_paths",
    "has_cuda_kernels",
    "dispatch_path",
    "backward_path",
    "split_tf32_conv_kernel",
    "onepass_products_kernel",
    "relu_group_norm",
    "group_norm_mean",
    "conv_transpose3d_relu_group_norm",
    "conv3d_group_norm_mean",
    "ConvTranspose3dReLUGroupNorm",
    "Conv3dGroupNormMean",
    "optimize",
]

_LIBRARY_NAME = "libfused_ops.so"
_ENV_VAR = "FUSED_OPS_LIBRARY"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_DIR = os.path.dirname(_PACKAGE_DIR)


def _in_source_checkout() -> bool:
    return os.path.isfile(os.path.join(_REPO_DIR, "CMakeLists.txt")) and os.path.isdir(
        os.path.join(_REPO_DIR, "ops")
    )


def library_search_paths() -> List[str]:
    """The candidate library files after ``$FUSED_OPS_LIBRARY``, in search order (existing or
    not): the package's own copy, then, in a source checkout, ``<repo>/build``'s."""
    paths = [os.path.join(_PACKAGE_DIR, _LIBRARY_NAME)]
    if _in_source_checkout():
        paths.append(os.path.join(_REPO_DIR, "build", _LIBRARY_NAME))
    return paths


def _operators_registered() -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw("fused::relu_group_norm", "")
        return True
    except RuntimeError:
        return False


def _find_library() -> str:
    env = os.environ.get(_ENV_VAR)
    if env:
        if not os.path.isfile(env):
            raise ImportError(
                f"fused_ops: {_ENV_VAR}={env!r} does not name an existing file; "
                f"set it to the path of {_LIBRARY_NAME} or unset it"
            )
        return os.path.abspath(env)
    looked = library_search_paths()
    for path in looked:
        if os.path.isfile(path):
            return path
    where = "\n".join(["  $" + _ENV_VAR + " (not set)"] + ["  " + p for p in looked])
    raise ImportError(
        f"fused_ops: could not find {_LIBRARY_NAME}. Looked in:\n{where}\n"
        "Install the package with `pip install --no-build-isolation .` (it builds the library "
        "into the package), or build it with tools/build.sh (into <repo>/build), or set "
        f"{_ENV_VAR} to its path."
    )


def _load_library() -> Optional[str]:
    if _operators_registered():
        # Already loaded (by a previous import through another path, or by the user):
        # loading a second copy would register the `fused` namespace twice.
        for path in getattr(torch.ops, "loaded_libraries", ()):
            if os.path.basename(path) == _LIBRARY_NAME:
                return path
        return None
    path = _find_library()
    try:
        torch.ops.load_library(path)
    except OSError as e:  # e.g. built against another PyTorch
        raise ImportError(f"fused_ops: failed to load {path}: {e}") from e
    return path


library_path: Optional[str] = _load_library()


def has_cuda_kernels() -> bool:
    """Whether the loaded library has CUDA kernels (was built with CUDA)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("fused::relu_group_norm", "CUDA")


def dispatch_path(op: str, *args) -> str:
    """The kernels that ``torch.ops.fused.<op>(*args)`` runs under the current precision flags.

    A debug query (it computes nothing): ``op`` is an operator name ("relu_group_norm",
    "group_norm_mean", "conv_transpose3d_relu_group_norm", "conv3d_group_norm_mean") and
    ``args`` are the operator's arguments. For the conv operators the answer is
    ``"<convolution> -> <GroupNorm kernel>"``, e.g. ``"aten_float32 -> group_norm_mean"``:
    ``aten`` (ATen's convolution, as eager PyTorch runs it), ``aten_float32`` (the same with
    float32 products whatever ``torch.backends.cudnn.allow_tf32`` says),
    ``transposed_as_forward`` (a stride-1 transposed convolution run as a forward one) or
    ``transposed_as_forward_split_tf32`` (the same on our split-TF32 tensor-core kernels, TF32
    off), with ``+relu_moments`` where that convolution also computes the GroupNorm's
    statistics (inference on the wgmma kernel, at least 128 output positions per sample).
    ``conv3d_group_norm_mean`` answers ``"onepass"`` where its one-pass CUDA kernels run (the
    convolution's output never written; in training, backward recomputes it from the input).
    """
    return getattr(torch.ops.fused, f"_{op}_path")(*args)


def backward_path(op: str, *args) -> str:
    """The kernels of the backward of a training step of ``torch.ops.fused.<op>(*args)`` (every
    gradient asked for) under the current precision flags and environment switches: a debug
    query, like ``dispatch_path``, for ``op`` = "conv_transpose3d_relu_group_norm" (the other
    operators' backwards are the ones their forward paths name). The answer is
    ``"<dy> -> input_grad=<convolution>, weight_grad=<convolution>"``, e.g.
    ``"dy_ndhwc_tf32 -> input_grad=tf32_wgmma, weight_grad=tf32_wgmma"``. ``dy``, the gradient
    of the convolution's output: ``dy`` (written in the input's layout), ``dy_ndhwc`` (written
    NDHWC), ``dy_ndhwc_tf32`` (written NDHWC, rounded to TF32 for TF32 products) or
    ``dy_from_norm`` (never written: the convolutions compute it from the GroupNorm's
    per-channel coefficients as they load it; ``FUSED_OPS_NORM_GRAD_OPERAND=1``). The
    convolutions: ``aten`` (as eager PyTorch), ``cudnn_ndhwc`` (cuDNN's, NDHWC),
    ``split_tf32`` (the split-TF32 kernels that ``split_tf32_conv_kernel`` names),
    ``split_tf32_wgmma`` / ``tf32_wgmma`` (our Hopper kernels, split-TF32 or TF32 products),
    ``split_tf32_cutlass`` (CUTLASS's sm80 weight gradient).
    """
    if op != "conv_transpose3d_relu_group_norm":
        raise ValueError(f"backward_path: no backward query for {op!r}")
    return torch.ops.fused._conv_transpose3d_relu_group_norm_backward_path(*args)


def split_tf32_conv_kernel(device: Union[str, torch.device, None] = None) -> str:
    """The kernel that runs the float32-grade convolutions of the
    ``"transposed_as_forward_split_tf32"`` path (``dispatch_path``) on ``device`` (default: the
    current CUDA device): ``"wgmma"`` (Hopper's warpgroup tensor-core instructions, compute
    capability 9.0), ``"mma_sync"`` (CUTLASS's sm80 kernel: compute capability 8.x, or with the
    environment variable ``FUSED_OPS_SPLIT_TF32_WGMMA=0`` set before the first call), or ``""``
    where that path does not run (the CPU, a build without CUTLASS, older GPUs). A debug query,
    like ``dispatch_path``.
    """
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return torch.ops.fused._split_tf32_conv_kernel(torch.empty(0, device=device))


def onepass_products_kernel(device: Union[str, torch.device, None] = None) -> str:
    """Which instructions run the float32 products of ``conv3d_group_norm_mean``'s one-pass
    forward (the ``"onepass"`` path of ``dispatch_path``, with autograd or without) on ``device``
    (default: the current CUDA device): ``"wgmma"`` (Hopper's warpgroup tensor-core
    instructions, compute capability 9.0, unless the environment variable
    ``FUSED_OPS_ONEPASS_WGMMA=0`` is set before the first call), ``"mma_sync"`` (other GPUs of
    compute capability 8.0+), or ``""`` (the CPU, a build without CUDA, older GPUs: every dtype
    runs the direct kernel there). A debug query, like ``dispatch_path``.
    """
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return torch.ops.fused._conv3d_onepass_products_kernel(torch.empty(0, device=device))


# ---------------------------------------------------------------------------------------
# Functional wrappers

IntOrTriple = Union[int, Sequence[int]]


def _triple(name: str, value: IntOrTriple) -> List[int]:
    if isinstance(value, int):
        return [value, value, value]
    values = [int(v) for v in value]
    if len(values) == 1:
        return values * 3
    if len(values) != 3:
        raise ValueError(f"{name} must be an int or a sequence of 1 or 3 ints, got {value!r}")
    return values


def _conv3d_padding(
    padding: Union[str, IntOrTriple], weight: torch.Tensor, dilation: List[int], stride: List[int]
) -> List[int]:
    if not isinstance(padding, str):
        return _triple("padding", padding)
    if padding == "valid":
        return [0, 0, 0]
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
        if any(t % 2 for t in total):
            raise ValueError(
                "padding='same' needs asymmetric padding for this kernel size and dilation, "
                "which the fused operator does not support"
            )
        return [t // 2 for t in total]
    raise ValueError(f"padding must be 'valid', 'same', an int or a triple, got {padding!r}")


def relu_group_norm(
    input: torch.Tensor,
    num_groups: int,
    weight: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``F.group_norm(F.relu(input), num_groups, weight, bias, eps)`` in one fused operator."""
    return torch.ops.fused.relu_group_norm(input, num_groups, weight, bias, eps)


def group_norm_mean(
    input: torch.Tensor,
    num_groups: int,
    weight: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``F.group_norm(input, num_groups, weight, bias, eps).mean(dims 1..)``, shape ``(N,)``."""
    return torch.ops.fused.group_norm_mean(input, num_groups, weight, bias, eps)


def conv_transpose3d_relu_group_norm(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride: IntOrTriple = 1,
    padding: IntOrTriple = 0,
    output_padding: IntOrTriple = 0,
    groups: int = 1,
    dilation: IntOrTriple = 1,
    num_groups: Optional[int] = None,
    gn_weight: Optional[torch.Tensor] = None,
    gn_bias: Optional[torch.Tensor] = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``F.group_norm(F.relu(F.conv_transpose3d(input, weight, bias, stride, padding,
    output_padding, groups, dilation)), num_groups, gn_weight, gn_bias, eps)``, fused.

    The convolution arguments take an int or a triple, as in ``F.conv_transpose3d``.
    ``num_groups`` (GroupNorm's number of groups) is required.
    """
    if num_groups is None:
        raise TypeError("conv_transpose3d_relu_group_norm: num_groups is required")
    return torch.ops.fused.conv_transpose3d_relu_group_norm(
        input,
        weight,
        bias,
        _triple("stride", stride),
        _triple("padding", padding),
        _triple("output_padding", output_padding),
        groups,
        _triple("dilation", dilation),
        num_groups,
        gn_weight,
        gn_bias,
        eps,
    )


def conv3d_group_norm_mean(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride: IntOrTriple = 1,
    padding: Union[str, IntOrTriple] = 0,
    dilation: IntOrTriple = 1,
    groups: int = 1,
    num_groups: Optional[int] = None,
    gn_weight: Optional[torch.Tensor] = None,
    gn_bias: Optional[torch.Tensor] = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``F.group_norm(F.conv3d(input, weight, bias, stride, padding, dilation, groups),
    num_groups, gn_weight, gn_bias, eps).mean(dim=[1, 2, 3, 4])``, fused; shape ``(N,)``.

    The convolution arguments take an int or a triple, as in ``F.conv3d``; ``padding`` may
    also be ``'valid'`` or ``'same'`` (stride 1, symmetric padding only).
    ``num_groups`` (GroupNorm's number of groups) is required.
    """
    if num_groups is None:
        raise TypeError("conv3d_group_norm_mean: num_groups is required")
    stride_ = _triple("stride", stride)
    dilation_ = _triple("dilation", dilation)
    padding_ = _conv3d_padding(padding, weight, dilation_, stride_)
    return torch.ops.fused.conv3d_group_norm_mean(
        input,
        weight,
        bias,
        stride_,
        padding_,
        dilation_,
        groups,
        num_groups,
        gn_weight,
        gn_bias,
        eps,
    )


from .modules import Conv3dGroupNormMean, ConvTranspose3dReLUGroupNorm  # noqa: E402
from .optimize import optimize  # noqa: E402
