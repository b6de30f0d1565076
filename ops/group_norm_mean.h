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
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace fused_ops {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_norm_mean_forward_cpu(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps);

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_mean_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& channel_mean, int64_t num_groups,
    const c10::optional<at::Tensor>& weight, std::array<bool, 3> output_mask);

#ifdef FUSED_OPS_WITH_CUDA
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_norm_mean_forward_cuda(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps);

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_mean_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& channel_mean, int64_t num_groups,
    const c10::optional<at::Tensor>& weight, std::array<bool, 3> output_mask);
#endif

}  // namespace fused_ops
