"""CPU kernels of the GroupNorm family (ops/norm/*_cpu.cpp): results bitwise equal for every
thread count, whichever way the work is shared out (norm_cpu_utils.h: one task per group, or
each pass over the whole tensor shared between the threads), and accurate against the float64
composite, at sizes that take either schedule, rows longer than a chunk (16384 elements) and
outputs large enough to be given huge pages or written with streaming stores; and the large
outputs' memory, reused once freed (ops/common/cpu_output_memory.h)."""

from __future__ import annotations

import os

import pytest
import torch

from helpers import check_against_reference, fused_op, norm_args, tensor_arg_indices

NORM_OPS = ["relu_group_norm", "group_norm_mean"]

# (shape, groups), and relu_group_norm's schedule with 2 and 3 threads.
SHAPES = {
    # 3 groups of 140,000 (rows of 70,000: several chunks): whole-tensor passes with 2
    # threads, one task per group with 3.
    "few_long_groups": ((1, 6, 70000), 3),
    # 3 groups of 12,000: the same.
    "few_short_groups": ((3, 4, 3000), 1),
    # One group of 180,000: whole-tensor passes.
    "one_group": ((1, 2, 300, 300), 1),
    # 16 groups: one task per group.
    "many_groups": ((4, 16, 40, 50), 4),
    # 256 groups of 8 rows of 16: one task per group, little work.
    "short_rows": ((32, 64, 4, 4), 8),
    # An 8 MiB output (huge pages where the system has them), 8 groups of 262,144.
    "large_output": ((2, 8, 128, 1024), 4),
    # A 16 MiB output, written with streaming stores (norm_cpu_utils.h: kStreamingStoreBytes),
    # rows of an odd length: most start off a 32-byte boundary.
    "streamed_output": ((2, 8, 3, 87383), 4),
}


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _run(op, args, grad_out):
    """Output and every gradient of op(*args) (fresh leaves)."""
    leaves = [a.detach().clone().requires_grad_(True) if i in tensor_arg_indices(args) else a
              for i, a in enumerate(args)]  # fmt: skip
    out = fused_op(op)(*leaves)
    tensors = [leaves[i] for i in tensor_arg_indices(args)]
    return [out.detach(), *torch.autograd.grad(out, tensors, grad_out)]


def _shifted_args(shape, groups):
    """norm_args with the input shifted by 0.5 (relu_group_norm: some groups not all positive,
    not all zero)."""
    args = norm_args(shape, groups)
    with torch.no_grad():
        args[0] += 0.5
    return args


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("op", NORM_OPS)
def test_threads_bitwise_equal(op, name, restore_threads):
    shape, groups = SHAPES[name]
    args = _shifted_args(shape, groups)
    out_shape = (shape[0],) if op == "group_norm_mean" else shape
    grad_out = torch.randn(out_shape)
    torch.set_num_threads(1)
    expected = _run(op, args, grad_out)
    for threads in (2, 3):
        torch.set_num_threads(threads)
        for a, b in zip(_run(op, args, grad_out), expected):
            assert torch.equal(a, b), f"{op} {name}: {threads} threads differ from 1"


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("op", NORM_OPS)
def test_schedules_vs_reference(op, name, restore_threads):
    shape, groups = SHAPES[name]
    args = _shifted_args(shape, groups)
    torch.set_num_threads(2)
    # (Gradient tolerances relative to the largest magnitude, as test_fuzz.py's.)
    check_against_reference(op, args, grad_rtol=1e-4, grad_atol=2e-5)


# relu_group_norm outputs of at least 16 MiB in each dtype: streaming stores of 4- and 8-byte
# elements and of half / bfloat16 converted from float.
STREAMED = {
    torch.float32: (2, 8, 3, 87383),
    torch.float64: (1, 8, 3, 87383),
    torch.bfloat16: (4, 8, 3, 87383),
    torch.float16: (4, 8, 3, 87383),
}


@pytest.mark.parametrize("dtype", list(STREAMED), ids=str)
def test_streamed_output_vs_reference(dtype, restore_threads):
    args = _shifted_args(STREAMED[dtype], 4)
    args = [a.detach().to(dtype) if isinstance(a, torch.Tensor) else a for a in args]
    torch.set_num_threads(2)
    check_against_reference("relu_group_norm", args, backward=False)


def _fill_and_free(t):
    """NaN into t's memory, then drops it: an output that reuses the memory must overwrite all."""
    t.fill_(float("nan"))
    return t.data_ptr()


@pytest.mark.skipif(
    int(os.environ.get("FUSED_OPS_CPU_OUTPUT_CACHE_MB", "512")) < 16,
    reason="FUSED_OPS_CPU_OUTPUT_CACHE_MB keeps no 8 MiB output",
)
@pytest.mark.parametrize("op", NORM_OPS)
def test_reused_output_memory(op, restore_threads):
    """A large output freed is handed out again (same address) and wholly overwritten."""
    torch.set_num_threads(2)
    shape, groups = SHAPES["large_output"]
    args = _shifted_args(shape, groups)
    out_shape = (shape[0],) if op == "group_norm_mean" else shape
    grad_out = torch.randn(out_shape)
    expected = _run(op, args, grad_out)
    plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    if op == "relu_group_norm":
        first = fused_op(op)(*plain)  # y: 8 MiB, from the cache's memory
        address = _fill_and_free(first)
        del first
        again = fused_op(op)(*plain)
        assert again.data_ptr() == address
        assert torch.equal(again, expected[0])
        # An ordinary CPU tensor: it resizes (into memory of its own) and keeps its values.
        again.resize_(2 * again.numel())
        assert torch.equal(again[: expected[0].numel()].view(shape), expected[0])
        del again
    # The backward's grad_input (and y): the freed ones' memory reused, bitwise the same results.
    got = _run(op, args, grad_out)
    addresses = {_fill_and_free(t) for t in got if t.numel() == expected[1].numel()}
    del got
    got = _run(op, args, grad_out)
    assert got[1].data_ptr() in addresses
    for a, b in zip(got, expected):
        assert torch.equal(a, b)
