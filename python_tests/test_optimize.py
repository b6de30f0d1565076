"""fused_ops.optimize: the fx rewrite finds the four patterns (module and functional forms)
in a larger network, replaces them with the fused operators on the same parameters (outputs
and gradients equal the original's), leaves other layers alone, declines where a rewrite would
change the computation, and leaves a network without the patterns unchanged."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import fused_ops
from fused_ops import testing


class Net(nn.Module):
    """A small 3-D network: the two conv patterns as modules, the GroupNorm-only ones in
    functional form, among other layers."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv3d(3, 8, 3, padding=1)
        self.up = nn.ConvTranspose3d(8, 16, 3, stride=2, padding=1, output_padding=1)
        self.relu = nn.ReLU()
        self.gn = nn.GroupNorm(4, 16)
        self.pool = nn.AvgPool3d(2)
        self.head = nn.Conv3d(16, 24, 3)
        self.gn_head = nn.GroupNorm(8, 24)
        self.gn_w = nn.Parameter(torch.rand(16) + 0.5)
        self.gn_b = nn.Parameter(torch.randn(16))
        self.linear = nn.Linear(1, 2)

    def forward(self, x):
        y = torch.sigmoid(self.stem(x))
        y = self.gn(self.relu(self.up(y)))  # ConvTranspose3d -> ReLU -> GroupNorm
        y = self.pool(y)
        z = F.group_norm(F.relu(y), 4, self.gn_w, self.gn_b)  # GroupNorm(ReLU(x))
        m = F.group_norm(z, 2).mean(dim=[1, 2, 3, 4])  # GroupNorm(x).mean
        h = self.gn_head(self.head(z)).mean(dim=(1, 2, 3, 4))  # Conv3d -> GroupNorm -> mean
        return self.linear((h + m).unsqueeze(1))


def _randomised(model):
    for m in model.modules():
        if isinstance(m, nn.GroupNorm):
            testing.randomise_(m)
    return model


def _check_same(original, optimized, x):
    xa = x.clone().requires_grad_(True)
    xb = x.clone().requires_grad_(True)
    a, b = original(xa), optimized(xb)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(a)
    a.backward(g)
    b.backward(g)
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(original.named_parameters(), optimized.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_rewrites_every_pattern_on_the_same_parameters():
    torch.manual_seed(0)
    model = _randomised(Net())
    x = torch.rand(2, 3, 6, 6, 6)
    optimized = fused_ops.optimize(model, x)
    report = optimized.fused_ops_report
    replaced = sorted(r.pattern for r in report if r.replaced)
    assert replaced == sorted(
        [
            "ConvTranspose3d -> ReLU -> GroupNorm",
            "GroupNorm(ReLU(x))",
            "GroupNorm(x).mean",
            "Conv3d -> GroupNorm -> mean",
        ]
    ), str(report)
    code = optimized.code
    for fn in (
        "conv_transpose3d_relu_group_norm",
        "relu_group_norm",
        "group_norm_mean",
        "conv3d_group_norm_mean",
    ):
        assert fn in code, code
    # The other layers are still there; the fused modules' parameters are the same objects.
    assert "stem" in code and "pool" in code and "linear" in code and "sigmoid" in code
    assert optimized.up.weight is model.up.weight
    assert dict(optimized.state_dict()).keys() == dict(model.state_dict()).keys()
    _check_same(model, optimized, x)


class SharedConv(nn.Module):
    """The transposed conv's output is used twice: fusing it would compute it twice."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose3d(4, 8, 3)
        self.gn = nn.GroupNorm(2, 8)

    def forward(self, x):
        y = self.up(x)
        return self.gn(torch.relu(y)) + y


def test_declines_where_an_intermediate_is_used_elsewhere():
    torch.manual_seed(1)
    model = _randomised(SharedConv())
    x = torch.rand(2, 4, 5, 5, 5)
    optimized = fused_ops.optimize(model, x)
    report = optimized.fused_ops_report
    declined = [r for r in report if not r.replaced]
    assert declined and declined[0].pattern == "ConvTranspose3d -> ReLU -> GroupNorm"
    assert "used elsewhere" in declined[0].reason
    # Its GroupNorm part still fuses.
    assert [r.pattern for r in report if r.replaced] == ["GroupNorm(ReLU(x))"]
    assert "conv_transpose3d_relu_group_norm" not in optimized.code
    _check_same(model, optimized, x)
    assert "declined" in str(report) and "replaced" in str(report)


class MeanOverSpace(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3)
        self.gn = nn.GroupNorm(4, 8)

    def forward(self, x):
        return self.gn(self.conv(x)).mean(dim=[2, 3, 4])  # keeps the channels


def test_declines_a_mean_over_other_dims():
    model = _randomised(MeanOverSpace())
    x = torch.rand(2, 3, 6, 6, 6)
    optimized = fused_ops.optimize(model, x)
    assert not any(r.replaced for r in optimized.fused_ops_report)
    assert "not every dim but the batch" in str(optimized.fused_ops_report)
    _check_same(model, optimized, x)


class NoPatterns(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 4, 3)
        self.bn = nn.BatchNorm3d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).sum(dim=1)


def test_network_without_patterns_is_unchanged():
    model = NoPatterns().eval()
    x = torch.rand(2, 3, 5, 5, 5)
    optimized = fused_ops.optimize(model, x)
    assert len(optimized.fused_ops_report) == 0
    assert "no fusable pattern" in str(optimized.fused_ops_report)
    assert "fused" not in optimized.code
    torch.testing.assert_close(optimized(x), model(x), rtol=0, atol=0)
