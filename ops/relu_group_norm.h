// fused::relu_group_norm: y = group_norm(relu(x)), for x of shape (N, C, *).
//
// Forward returns (output, mean, rstd); mean and rstd have shape (N, G) and dtype
// stats_dtype(input), and are the statistics of relu(x) that backward needs.
// Backward takes the pre-ReLU input (the ReLU mask is recomputed from it) and returns
// (grad_input, grad_weight, grad_bias), each undefined where output_mask is false.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace fused_ops {

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_forward_cpu(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps);

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 3> output_mask);

#ifdef FUSED_OPS_WITH_CUDA
std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_forward_cuda(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps);

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 3> output_mask);
#endif

}  // namespace fused_ops
