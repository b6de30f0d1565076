// fused::group_norm_mean: out[n] = mean over (c, *) of group_norm(x)[n], shape (N,).
//
// The normalised tensor is never materialised: with per-(n, c) channel means m[n, c] and
// per-(n, g) statistics (mean, rstd),
//   out[n] = (1 / C) * sum_c (weight[c] * rstd[n, g(c)] * (m[n, c] - mean[n, g(c)]) + bias[c]).
// Forward returns (output, mean, rstd, channel_mean): mean and rstd of shape (N, G), and
// channel_mean of shape (N, C), all of dtype stats_dtype(input), saved for backward.
// Backward returns (grad_input, grad_weight, grad_bias), each undefined where output_mask
// is false. Because grad_output is constant over each sample, grad_input is an affine
// function of the input per (n, c), so backward is a single elementwise pass.
//
// One host function per direction serves every backend (CPU, CUDA and Meta), as in
// relu_group_norm.h. The forward reads a dense channels-last input (what a channels_last_3d
// convolution writes) in place, on the CPU and (for the channel counts its kernels handle)
// on CUDA; every other input is made contiguous.
#pragma once

#include "common/checks.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <string>
#include <tuple>

namespace fused_ops {
namespace norm {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_norm_mean_forward(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps);

// The same for arguments that the caller (a conv operator) has checked: `shape` is the
// checked shape of `input`.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_norm_mean_forward_prechecked(
    const at::Tensor& input, const SymGroupNormShape& shape,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias, double eps);

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_mean_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& channel_mean, int64_t num_groups,
    const c10::optional<at::Tensor>& weight, std::array<bool, 3> output_mask);

// The kernel the forward runs for `input` on `device` ("group_norm_mean" or
// "group_norm_mean_channels_last"), for the debug queries; `input` may be a Meta tensor
// standing for a tensor of its layout.
const char* group_norm_mean_kernel_name(const at::Tensor& input, c10::Device device);

// The path of a call with these arguments, for the debug query fused::_group_norm_mean_path.
std::string group_norm_mean_path(const at::Tensor& input, int64_t num_groups,
                                 const c10::optional<at::Tensor>& weight,
                                 const c10::optional<at::Tensor>& bias, double eps);

// The public operator: the forward's output alone.
at::Tensor group_norm_mean(const at::Tensor& input, int64_t num_groups,
                           const c10::optional<at::Tensor>& weight,
                           const c10::optional<at::Tensor>& bias, double eps);

}  // namespace norm
}  // namespace fused_ops
