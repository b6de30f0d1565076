// fused::conv_transpose3d_relu_group_norm:
//   group_norm(relu(conv_transpose3d(input, weight, conv_bias, ...)), num_groups, gn_weight,
//              gn_bias, eps)
// with the full parameter surface of torch.nn.functional.conv_transpose3d.
//
// The convolution runs through ATen (conv3d.h); ReLU and GroupNorm run as the fused
// fused::_relu_group_norm_forward kernel of the input's device. These functions are device
// generic: they call the other stages through the dispatcher.
#pragma once

#include "checks.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace fused_ops {

// Returns (output, conv_output, mean, rstd): what backward needs besides the arguments.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> conv_transpose3d_relu_group_norm_forward(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
    int64_t groups, at::IntArrayRef dilation, int64_t num_groups,
    const c10::optional<at::Tensor>& gn_weight, const c10::optional<at::Tensor>& gn_bias,
    double eps);

// Returns (grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias), each
// undefined where output_mask is false or the parameter is absent.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv_transpose3d_relu_group_norm_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    bool has_conv_bias, const at::Tensor& conv_output, const at::Tensor& mean,
    const at::Tensor& rstd, at::IntArrayRef stride, at::IntArrayRef padding,
    at::IntArrayRef output_padding, int64_t groups, at::IntArrayRef dilation, int64_t num_groups,
    const c10::optional<at::Tensor>& gn_weight, std::array<bool, 5> output_mask);

}  // namespace fused_ops
