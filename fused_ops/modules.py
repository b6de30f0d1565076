"""Drop-in replacements of the two PyTorch patterns that fused_ops fuses.

Each module takes the same ``__init__`` arguments as the pattern it replaces and holds the
same submodules (so the same parameters, under the same ``state_dict`` keys: a state dict
saved from one loads into the other, both ways); only ``forward`` differs: it runs the whole
pattern as one fused operator, reading the convolution's and GroupNorm's settings and
parameters from the submodules.

Both modules work with ``torch.jit.script`` (the submodules' stride, padding, ... are
TorchScript constants of ``nn.Conv3d`` / ``nn.ConvTranspose3d`` / ``nn.GroupNorm``) and
with ``torch.compile(fullgraph=True)``.

Inputs must be batched, of shape ``(N, C_in, D, H, W)``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["ConvTranspose3dReLUGroupNorm", "Conv3dGroupNormMean"]


class ConvTranspose3dReLUGroupNorm(nn.Module):
    """Fused drop-in replacement of ``ConvTranspose3d -> ReLU -> GroupNorm``.

    Replaces::

        class ConvTranspose3dReLUGroupNorm(nn.Module):
            def __init__(self, in_channels, out_channels, kernel_size, groups, bias=False):
                super().__init__()
                self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels,
                                                         kernel_size, bias=bias)
                self.relu = nn.ReLU()
                self.group_norm = nn.GroupNorm(num_groups=groups, num_channels=out_channels)

            def forward(self, x):
                return self.group_norm(self.relu(self.conv_transpose(x)))

    with the same arguments, submodules and state_dict keys (``conv_transpose.weight``,
    ``conv_transpose.bias`` when ``bias=True``, ``group_norm.weight``, ``group_norm.bias``).
    Note that ``groups`` is GroupNorm's number of groups, as in the original.
    ``forward`` calls ``torch.ops.fused.conv_transpose3d_relu_group_norm``.
    """

    def __init__(self, in_channels, out_channels, kernel_size, groups, bias=False):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, bias=bias)
        self.relu = nn.ReLU()
        self.group_norm = nn.GroupNorm(num_groups=groups, num_channels=out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv_transpose
        gn = self.group_norm
        return torch.ops.fused.conv_transpose3d_relu_group_norm(
            x,
            conv.weight,
            conv.bias,
            conv.stride,
            conv.padding,
            conv.output_padding,
            conv.groups,
            conv.dilation,
            gn.num_groups,
            gn.weight,
            gn.bias,
            gn.eps,
        )


class Conv3dGroupNormMean(nn.Module):
    """Fused drop-in replacement of ``Conv3d -> GroupNorm -> mean over all dims but batch``.

    Replaces::

        class Conv3dGroupNormMean(nn.Module):
            def __init__(self, in_channels, out_channels, kernel_size, num_groups):
                super().__init__()
                self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
                self.group_norm = nn.GroupNorm(num_groups, out_channels)

            def forward(self, x):
                x = self.group_norm(self.conv(x))
                return x.mean(dim=[1, 2, 3, 4])

    with the same arguments, submodules and state_dict keys (``conv.weight``, ``conv.bias``,
    ``group_norm.weight``, ``group_norm.bias``). Returns shape ``(N,)``.
    ``forward`` calls ``torch.ops.fused.conv3d_group_norm_mean``.
    """

    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        gn = self.group_norm
        return torch.ops.fused.conv3d_group_norm_mean(
            x,
            conv.weight,
            conv.bias,
            conv.stride,
            conv.padding,
            conv.dilation,
            conv.groups,
            gn.num_groups,
            gn.weight,
            gn.bias,
            gn.eps,
        )
