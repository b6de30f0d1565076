"""Fixtures of the fused_ops Python tests (helpers, references and tolerances: helpers.py).

Precision flags: every test starts from PyTorch's defaults (cuDNN convolutions may use TF32,
``torch.backends.cudnn.allow_tf32 = True``; matmuls may not) and gets them back afterwards.
A test that needs full-float32 convolutions (it compares conv results with a float64
reference at ~1e-5) says so with ``@pytest.mark.tf32_off``; the numerics-contract tests set
each mode themselves.
"""

from __future__ import annotations

import pytest
import torch

from helpers import DEVICES


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


@pytest.fixture(autouse=True)
def _seed_and_precision(request):
    """Seeds every test; PyTorch's default precision flags, or TF32 off where marked."""
    torch.manual_seed(0)
    old = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = request.node.get_closest_marker("tf32_off") is None
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


@pytest.fixture
def fresh_dynamo():
    """Resets torch.compile's caches before and after a compile test."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
