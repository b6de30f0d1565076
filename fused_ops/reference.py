"""The two PyTorch patterns that fused_ops replaces, exactly as specified (plain torch.nn
modules), with their headline sizes (WORKLOADS).

Used by the tests and examples as the unfused originals to compare the drop-ins against.

Careful: with GroupNorm's default init (weight=1, bias=0) the output of Conv3dGroupNormMean is
exactly mean(bias) = 0 for every input, so a kernel that skips the convolution still "passes".
Every correctness check must first randomise group_norm.weight and group_norm.bias.
"""

import torch.nn as nn


class ConvTranspose3dReLUGroupNorm(nn.Module):
    """ConvTranspose3d -> ReLU -> GroupNorm."""

    def __init__(self, in_channels, out_channels, kernel_size, groups, bias=False):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, bias=bias)
        self.relu = nn.ReLU()
        self.group_norm = nn.GroupNorm(num_groups=groups, num_channels=out_channels)

    def forward(self, x):
        return self.group_norm(self.relu(self.conv_transpose(x)))


class Conv3dGroupNormMean(nn.Module):
    """Conv3d -> GroupNorm -> mean over every dimension but the batch; returns shape (N,)."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x = self.group_norm(self.conv(x))
        return x.mean(dim=[1, 2, 3, 4])


# The headline workloads (float32, on the GPU).
WORKLOADS = {
    "conv_transpose3d_relu_group_norm": dict(
        model=ConvTranspose3dReLUGroupNorm,
        init=dict(in_channels=64, out_channels=128, kernel_size=3, groups=8, bias=False),
        input_shape=(16, 64, 32, 32, 32),  # output (16, 128, 34, 34, 34), about 232 GFLOP
    ),
    "conv3d_group_norm_mean": dict(
        model=Conv3dGroupNormMean,
        init=dict(in_channels=3, out_channels=24, kernel_size=3, num_groups=8),
        input_shape=(128, 3, 24, 32, 32),  # conv output (128, 24, 22, 30, 30), about 9.9 GFLOP
    ),
}
