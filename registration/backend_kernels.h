// Kernels of the public operators that are the same on every real backend: the public
// norm operators are their internal forward without the saved statistics, and the conv
// operators are device generic (ops/conv_*.h). Registered for CPU (cpu.cpp) and CUDA
// (cuda.cpp).
#pragma once

#include "conv3d_group_norm_mean.h"
#include "conv_transpose3d_relu_group_norm.h"

#include <ATen/core/Tensor.h>

#include <tuple>

namespace fused_ops {

// The public kernel of a norm operator whose internal forward is `Forward`: its first output.
template <auto Forward>
at::Tensor first_output_of(const at::Tensor& input, int64_t num_groups,
                           const c10::optional<at::Tensor>& weight,
                           const c10::optional<at::Tensor>& bias, double eps) {
  return std::get<0>(Forward(input, num_groups, weight, bias, eps));
}

inline at::Tensor conv_transpose3d_relu_group_norm_kernel(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
    int64_t groups, at::IntArrayRef dilation, int64_t num_groups,
    const c10::optional<at::Tensor>& gn_weight, const c10::optional<at::Tensor>& gn_bias,
    double eps) {
  return std::get<0>(conv_transpose3d_relu_group_norm_forward(
      input, weight, conv_bias, stride, padding, output_padding, groups, dilation, num_groups,
      gn_weight, gn_bias, eps));
}

inline at::Tensor conv3d_group_norm_mean_kernel(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
    int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    const c10::optional<at::Tensor>& gn_bias, double eps) {
  return std::get<0>(conv3d_group_norm_mean_forward(input, weight, conv_bias, stride, padding,
                                                    dilation, groups, num_groups, gn_weight,
                                                    gn_bias, eps));
}

}  // namespace fused_ops
