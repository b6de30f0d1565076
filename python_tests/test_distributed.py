"""Data-parallel training with torch.distributed: both drop-ins trained for a few SGD steps
under DistributedDataParallel, two processes each on half of a batch, end with the
parameters of one process trained on the whole batch (the loss is a mean over the batch, so
DDP's average of the two halves' gradients is the whole batch's gradient).

Two processes (torch.multiprocessing, spawn start method) meet at a free local port: backend
gloo on the CPU (runs anywhere), NCCL on two GPUs (skipped with fewer).
"""

from __future__ import annotations

import datetime
import os
import socket

import pytest
import torch

import fused_ops
from helpers import cuda_skip_reason, drop_in_pair

WORLD_SIZE = 2
STEPS = 3
LR = 0.1
MOMENTUM = 0.9

# (init args, input shape of the whole batch); the batch splits in two.
MODELS = {
    "ConvTranspose3dReLUGroupNorm": (
        dict(in_channels=4, out_channels=8, kernel_size=3, groups=2, bias=True),
        (4, 4, 4, 5, 6),
    ),
    "Conv3dGroupNormMean": (
        dict(in_channels=3, out_channels=24, kernel_size=3, num_groups=8),
        (4, 3, 6, 7, 8),
    ),
}


def _loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of each sample's squared error (mean over its elements)."""
    per_sample = (output - target).pow(2)
    if per_sample.dim() > 1:
        per_sample = per_sample.flatten(1).mean(dim=1)
    return per_sample.mean()


def _train(model, batches, device):
    """STEPS steps of SGD on (input, target) batches; model's parameters are updated."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for x, target in batches:
        optimizer.zero_grad(set_to_none=True)
        _loss(model(x.to(device)), target.to(device)).backward()
        optimizer.step()


def _setup(cls_name, device):
    """The drop-in with random parameters (GroupNorm affine and conv bias too), and STEPS
    batches of (input, target) with targets shaped like its output."""
    init, shape = MODELS[cls_name]
    _, model = drop_in_pair(cls_name, init)
    batches = []
    for _ in range(STEPS):
        x = torch.rand(shape)
        with torch.no_grad():
            target = torch.randn(model(x).shape)
        batches.append((x, target))
    return model.to(device), batches


def _worker(rank, backend, port, setups, out_dir):
    """One DDP process: trains each model on its half of every batch; saves the parameters."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)  # two processes on a small machine
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        torch.backends.cudnn.allow_tf32 = False  # float32 convolutions, as the reference
    else:
        device = torch.device("cpu")
    torch.distributed.init_process_group(
        backend,
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        results = {}
        for cls_name, (state, batches) in setups.items():
            init, _ = MODELS[cls_name]
            model = getattr(fused_ops, cls_name)(**init)
            model.load_state_dict(state)
            model.to(device)
            ddp = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[rank] if device.type == "cuda" else None
            )
            half = [(x.chunk(WORLD_SIZE)[rank], t.chunk(WORLD_SIZE)[rank]) for x, t in batches]
            _train(ddp, half, device)
            results[cls_name] = {n: p.detach().cpu() for n, p in model.state_dict().items()}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ddp(backend, setups, out_dir, monkeypatch):
    # The spawned processes import fused_ops afresh: they load the library this one loaded.
    if fused_ops.library_path is not None:
        monkeypatch.setenv("FUSED_OPS_LIBRARY", fused_ops.library_path)
    context = torch.multiprocessing.start_processes(
        _worker,
        args=(backend, _free_port(), setups, str(out_dir)),
        nprocs=WORLD_SIZE,
        join=False,
        start_method="spawn",
    )
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=300)
    try:
        while not context.join(timeout=5):  # raises with the worker's traceback if one fails
            assert datetime.datetime.now() < deadline, "DDP workers did not finish in 300 s"
    finally:
        for p in context.processes:
            if p.is_alive():
                p.kill()
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(WORLD_SIZE)]


def _check_ddp_matches_one_process(backend, device, tol, tmp_path, monkeypatch):
    """DDP over WORLD_SIZE processes against one process on the whole batch, per model: the
    parameters' change over training within `tol` of its largest magnitude, per tensor."""
    torch.backends.cudnn.allow_tf32 = False
    setups, reference, half_only, initial = {}, {}, {}, {}
    for cls_name in MODELS:
        model, batches = _setup(cls_name, "cpu")
        state = {n: t.clone() for n, t in model.state_dict().items()}
        setups[cls_name] = (state, batches)
        initial[cls_name] = state
        model.to(device)
        _train(model, batches, device)
        reference[cls_name] = {n: t.detach().cpu() for n, t in model.state_dict().items()}
        # One process on rank 0's half alone: what DDP would give without its gradient
        # averaging, to show the comparison tells the two apart.
        alone = getattr(fused_ops, cls_name)(**MODELS[cls_name][0])
        alone.load_state_dict(state)
        alone.to(device)
        _train(alone, [(x.chunk(2)[0], t.chunk(2)[0]) for x, t in batches], device)
        half_only[cls_name] = {n: t.detach().cpu() for n, t in alone.state_dict().items()}

    ranks = _run_ddp(backend, setups, tmp_path, monkeypatch)
    for cls_name in MODELS:
        apart = 0.0  # how far training on half a batch alone ends, relative to the change
        for name, want in reference[cls_name].items():
            what = f"{cls_name}.{name}"
            got = ranks[0][cls_name][name]
            # DDP keeps the replicas identical: the same averaged gradients on every rank.
            for r in range(1, WORLD_SIZE):
                assert torch.equal(ranks[r][cls_name][name], got), f"{what}: rank {r} != rank 0"
            change = want - initial[cls_name][name]
            scale = change.abs().max().item()
            assert scale > 1e-3, f"{what}: training did not move it ({scale})"
            torch.testing.assert_close(
                got,
                want,
                rtol=0,
                atol=tol * scale,
                msg=lambda m, what=what: f"{what} (DDP vs one): {m}",
            )
            apart = max(apart, (half_only[cls_name][name] - want).abs().max().item() / scale)
        # Without the gradient averaging the result would be far outside the tolerance.
        assert apart > 10 * tol, f"{cls_name}: half a batch alone ends within {apart:.2e}"


def _distributed_skip_reason(backend):
    if not torch.distributed.is_available():
        return f"torch.distributed is not available in PyTorch {torch.__version__}"
    available = {
        "gloo": torch.distributed.is_gloo_available,
        "nccl": torch.distributed.is_nccl_available,
    }[backend]()
    if not available:
        return f"torch.distributed backend {backend} is not available in this PyTorch build"
    return None


@pytest.mark.skipif(
    _distributed_skip_reason("gloo") is not None, reason=_distributed_skip_reason("gloo") or ""
)
def test_ddp_gloo_cpu_matches_one_process(tmp_path, monkeypatch):
    # Float32 on the CPU: the two ways differ only in the order of the batch sums (measured:
    # at most 6e-7 of a parameter's change).
    _check_ddp_matches_one_process("gloo", "cpu", 1e-5, tmp_path, monkeypatch)


def _nccl_skip_reason():
    reason = _distributed_skip_reason("nccl") or cuda_skip_reason()
    if reason is None and torch.cuda.device_count() < WORLD_SIZE:
        reason = f"NCCL test needs {WORLD_SIZE} GPUs, {torch.cuda.device_count()} visible"
    return reason


@pytest.mark.cuda
@pytest.mark.skipif(_nccl_skip_reason() is not None, reason=_nccl_skip_reason() or "")
def test_ddp_nccl_two_gpus_matches_one_process(tmp_path, monkeypatch):
    # The reference runs on GPU 0. cuDNN may run another float32 algorithm for the half batch
    # than for the whole one; those differ by up to ~5e-4 of a gradient's largest magnitude
    # (test_reliability.py's CUDA graph test), which the parameters' change inherits, summed
    # over the steps with momentum.
    _check_ddp_matches_one_process("nccl", "cuda:0", 3e-3, tmp_path, monkeypatch)
