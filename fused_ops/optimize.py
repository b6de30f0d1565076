"""``fused_ops.optimize``: rewrites the fusable patterns of any model into the fused operators.

    optimized = fused_ops.optimize(model, example_input)
    print(optimized.fused_ops_report)   # what was replaced, what was declined and why

The model is traced with ``torch.fx.symbolic_trace`` and run once on the example inputs
(``ShapeProp``) so that every match can be checked against the tensors it would see. Found, in
module form (``nn.ConvTranspose3d``, ``nn.Conv3d``, ``nn.ReLU``, ``nn.GroupNorm``) or
functional form (``F.conv_transpose3d``, ``F.conv3d``, ``F.relu`` / ``torch.relu`` /
``.relu()``, ``F.group_norm``, ``.mean(...)`` / ``torch.mean``):

* ``ConvTranspose3d -> ReLU -> GroupNorm``  ->  ``fused_ops.conv_transpose3d_relu_group_norm``
* ``Conv3d -> GroupNorm -> mean over all but the batch``  ->  ``fused_ops.conv3d_group_norm_mean``
* ``GroupNorm(ReLU(x))``  ->  ``fused_ops.relu_group_norm``
* ``GroupNorm(x).mean(all dims but the batch)``  ->  ``fused_ops.group_norm_mean``

The fused calls read the same parameters (``get_attr`` of the same ``nn.Parameter`` objects:
training, ``state_dict`` and optimizers see no difference). Everything else is left alone. A
match is declined, with the reason in the report, where the rewrite would change what the
model computes or compute something twice: an intermediate (the convolution's or the ReLU's
output) used elsewhere, an unbatched input, a mean over other dims or with ``keepdim``, a
non-zero ``padding_mode``, ``ConvTranspose3d`` called with ``output_size``, parameters of
another dtype than the input. A declined conv pattern may still fuse its GroupNorm part.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

__all__ = ["optimize", "Rewrite"]


@dataclasses.dataclass
class Rewrite:
    """One match: the pattern, the fx nodes it covers, whether it was replaced, and why
    (what replaced it, or why not)."""

    pattern: str
    nodes: List[str]
    replaced: bool
    reason: str

    def __str__(self) -> str:
        verdict = "replaced" if self.replaced else "declined"
        return f"{verdict}: {self.pattern} at {', '.join(self.nodes)}: {self.reason}"


class _Report(list):
    def __str__(self) -> str:
        if not self:
            return "fused_ops.optimize: no fusable pattern found"
        return "\n".join(["fused_ops.optimize:"] + ["  " + str(r) for r in self])


CONV_TRANSPOSE_RELU_GN = "ConvTranspose3d -> ReLU -> GroupNorm"
CONV_GN_MEAN = "Conv3d -> GroupNorm -> mean"
RELU_GN = "GroupNorm(ReLU(x))"
GN_MEAN = "GroupNorm(x).mean"


def _module(gm: torch.fx.GraphModule, node: torch.fx.Node) -> Optional[nn.Module]:
    return gm.get_submodule(node.target) if node.op == "call_module" else None


def _shape(node: Any) -> Optional[torch.Size]:
    meta = node.meta.get("tensor_meta") if isinstance(node, torch.fx.Node) else None
    return getattr(meta, "shape", None)


def _dtype(node: Any) -> Optional[torch.dtype]:
    meta = node.meta.get("tensor_meta") if isinstance(node, torch.fx.Node) else None
    return getattr(meta, "dtype", None)


def _call_args(node: torch.fx.Node, fn, names: Tuple[str, ...], defaults: Dict[str, Any]):
    """The arguments of call_function `fn` by name, or None when node is not such a call."""
    if node.op != "call_function" or node.target is not fn:
        return None
    values = dict(defaults)
    values.update(zip(names, node.args))
    values.update(node.kwargs)
    return values


def _param(gm, node, module, attr) -> Optional[torch.fx.Node]:
    """A get_attr node of `module`'s parameter `attr` (None when the module has none)."""
    if getattr(module, attr, None) is None:
        return None
    with gm.graph.inserting_before(node):
        return gm.graph.get_attr(f"{node.target}.{attr}")


def _group_norm(gm, node):
    """(input, num_groups, weight, bias, eps, parameter dtype) of a GroupNorm, or None."""
    m = _module(gm, node)
    if type(m) is nn.GroupNorm:
        dtype = m.weight.dtype if m.weight is not None else None
        w, b = _param(gm, node, m, "weight"), _param(gm, node, m, "bias")
        return node.args[0], m.num_groups, w, b, m.eps, dtype
    a = _call_args(
        node,
        F.group_norm,
        ("input", "num_groups", "weight", "bias", "eps"),
        {"weight": None, "bias": None, "eps": 1e-5},
    )
    if a is None:
        return None
    return a["input"], a["num_groups"], a["weight"], a["bias"], a["eps"], _dtype(a["weight"])


def _relu_input(gm, node) -> Optional[torch.fx.Node]:
    if type(_module(gm, node)) is nn.ReLU:
        return node.args[0]
    if node.op == "call_function" and node.target in (F.relu, torch.relu):
        return node.args[0] if node.args else node.kwargs.get("input")
    if node.op == "call_method" and node.target == "relu":
        return node.args[0]
    return None


def _conv(gm, node, transposed: bool):
    """(input, kwargs of the fused functional, parameter dtype, why not) of a Conv3d /
    ConvTranspose3d, or None when node is no such convolution."""
    m = _module(gm, node)
    kind = nn.ConvTranspose3d if transposed else nn.Conv3d
    if type(m) is kind:
        if m.padding_mode != "zeros":
            return node.args[0], None, None, f"padding_mode={m.padding_mode!r}"
        if len(node.args) + len(node.kwargs) != 1:
            return node.args[0], None, None, "called with output_size"
        kw = dict(
            weight=_param(gm, node, m, "weight"),
            bias=_param(gm, node, m, "bias"),
            stride=list(m.stride),
            padding=m.padding if isinstance(m.padding, str) else list(m.padding),
            dilation=list(m.dilation),
            groups=m.groups,
        )
        if transposed:
            kw["output_padding"] = list(m.output_padding)
        return node.args[0], kw, m.weight.dtype, None
    if transposed:
        names = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups")
        names += ("dilation",)
        defaults = dict(bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1)
        a = _call_args(node, F.conv_transpose3d, names, defaults)
    else:
        names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
        defaults = dict(bias=None, stride=1, padding=0, dilation=1, groups=1)
        a = _call_args(node, F.conv3d, names, defaults)
    if a is None:
        return None
    inp = a.pop("input")
    return inp, a, _dtype(a["weight"]), None


def _mean_over_all_but_batch(node) -> Optional[str]:
    """None when node is x.mean(dims = every dim but 0); else why not ("" if no mean)."""
    if node.op == "call_method" and node.target == "mean":
        a = dict(zip(("input", "dim", "keepdim"), node.args))
    elif node.op == "call_function" and node.target is torch.mean:
        a = dict(zip(("input", "dim", "keepdim"), node.args))
    else:
        return ""
    a.update(node.kwargs)
    shape = _shape(a["input"])
    if shape is None or a.get("dim") is None:
        return "a mean over every dim (the batch too)"
    dims = a["dim"] if isinstance(a["dim"], (list, tuple)) else [a["dim"]]
    rank = len(shape)
    if not all(isinstance(d, int) for d in dims) or sorted(d % rank for d in dims) != list(
        range(1, rank)
    ):
        return f"a mean over dims {list(dims)}, not every dim but the batch"
    if a.get("keepdim", False) or a.get("dtype") is not None:
        return "a mean with keepdim or dtype"
    return None


def _only_user(node, user) -> bool:
    return isinstance(node, torch.fx.Node) and list(node.users) == [user]


def _replace(gm, node, fn, args, kwargs) -> torch.fx.Node:
    with gm.graph.inserting_before(node):
        new = gm.graph.call_function(fn, args, kwargs)
    new.meta = dict(node.meta)
    node.replace_all_uses_with(new)
    return new


def _check_dtypes(x, *dtypes) -> Optional[str]:
    xd = _dtype(x)
    for d in dtypes:
        if d is not None and xd is not None and d != xd:
            return f"parameters of dtype {d} on an input of dtype {xd}"
    return None


def _conv_pattern_why(why, chain, inp, dtypes) -> Optional[str]:
    """Why a conv pattern cannot be fused, or None: `why` from the convolution itself, an
    intermediate of `chain` ((node, its only allowed user, what it is)) used elsewhere, an
    unbatched input, parameters of another dtype than the input."""
    for intermediate, user, what in chain:
        if why is None and not _only_user(intermediate, user):
            why = f"the {what} output is used elsewhere"
    shape = _shape(inp)
    if why is None and (shape is None or len(shape) != 5):
        why = "unbatched input"
    return why or _check_dtypes(inp, *dtypes)


def _rewrite(gm, report, pattern, nodes, why, at, fn, args, kwargs) -> bool:
    """Replaces node `at` by fn(*args, **kwargs) unless there is a reason not to (`why`);
    reports the match either way. Whether it replaced."""
    if why is None:
        _replace(gm, at, fn, args, kwargs)
    report.append(Rewrite(pattern, nodes, why is None, why or fn.__name__))
    return why is None


def optimize(model: nn.Module, *example_inputs) -> torch.fx.GraphModule:
    """`model` traced with torch.fx, its fusable patterns replaced by the fused operators
    (see the module docstring). `example_inputs` (what ``model(*example_inputs)`` takes) are
    run once to check each match. The result's ``fused_ops_report`` lists every match."""
    import fused_ops  # (the package's functional wrappers; imported here: no import cycle)

    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        ShapeProp(gm).propagate(*example_inputs)
    report = _Report()
    for node in list(gm.graph.nodes):
        if node.graph is not gm.graph or node.op not in ("call_module", "call_function"):
            continue
        gn = _group_norm(gm, node)
        if gn is None:
            continue
        x, num_groups, gn_weight, gn_bias, eps, gn_dtype = gn
        gn_kw = dict(num_groups=num_groups, gn_weight=gn_weight, gn_bias=gn_bias, eps=eps)
        users = list(node.users)
        mean = users[0] if len(users) == 1 else None
        mean_why = _mean_over_all_but_batch(mean) if mean is not None else ""
        if mean_why:
            report.append(Rewrite(GN_MEAN, [node.name, mean.name], False, mean_why))
        if mean is not None and mean_why is None:
            conv = _conv(gm, x, transposed=False) if isinstance(x, torch.fx.Node) else None
            fused_conv = False
            if conv is not None:
                inp, kw, w_dtype, why = conv
                why = _conv_pattern_why(why, [(x, node, "conv")], inp, (w_dtype, gn_dtype))
                fused_conv = _rewrite(
                    gm, report, CONV_GN_MEAN, [x.name, node.name, mean.name], why, mean,
                    fused_ops.conv3d_group_norm_mean, (inp,), {**kw, **gn_kw},
                )  # fmt: skip
            if not fused_conv:
                _rewrite(
                    gm, report, GN_MEAN, [node.name, mean.name], _check_dtypes(x, gn_dtype), mean,
                    fused_ops.group_norm_mean, (x, num_groups, gn_weight, gn_bias, eps), {},
                )  # fmt: skip
            continue
        relu_in = _relu_input(gm, x) if isinstance(x, torch.fx.Node) else None
        if relu_in is None:
            continue
        conv = _conv(gm, relu_in, transposed=True) if isinstance(relu_in, torch.fx.Node) else None
        if conv is not None:
            inp, kw, w_dtype, why = conv
            chain = [(relu_in, x, "conv"), (x, node, "ReLU")]
            why = _conv_pattern_why(why, chain, inp, (w_dtype, gn_dtype))
            if _rewrite(
                gm, report, CONV_TRANSPOSE_RELU_GN, [relu_in.name, x.name, node.name], why, node,
                fused_ops.conv_transpose3d_relu_group_norm, (inp,), {**kw, **gn_kw},
            ):  # fmt: skip
                continue
        _rewrite(
            gm, report, RELU_GN, [x.name, node.name], _check_dtypes(relu_in, gn_dtype), node,
            fused_ops.relu_group_norm, (relu_in, num_groups, gn_weight, gn_bias, eps), {},
        )  # fmt: skip
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    gm.fused_ops_report = report
    return gm
