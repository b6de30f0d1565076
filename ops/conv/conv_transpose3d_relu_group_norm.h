// fused::conv_transpose3d_relu_group_norm:
//   group_norm(relu(conv_transpose3d(input, weight, conv_bias, ...)), num_groups, gn_weight,
//              gn_bias, eps)
// with the full parameter surface of torch.nn.functional.conv_transpose3d.
//
// The convolution runs in the conv stage (conv_stage.h: cuDNN, or with TF32 off our split-TF32
// kernels, forward and backward); ReLU and GroupNorm run as the fused
// relu_group_norm kernels of the input's device (norm/relu_group_norm.h). These host
// functions are device-generic and serve every backend, Meta included; they are the
// internal operators fused::_conv_transpose3d_relu_group_norm_{forward,backward}, from which
// the Autograd kernel is built, and the public operator's kernel.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <string>
#include <tuple>

namespace fused_ops {
namespace conv {

// Returns (output, conv_output, mean, rstd): what backward needs besides the arguments.
// conv_output (the pre-ReLU convolution output) is in the memory format the input suggests.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> conv_transpose3d_relu_group_norm_forward(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
    at::IntArrayRef dilation, int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    const c10::optional<at::Tensor>& gn_bias, double eps);

// Returns (grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias), each
// undefined where output_mask is false or the parameter is absent.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv_transpose3d_relu_group_norm_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                          const at::Tensor& weight, const at::Tensor& conv_output,
                                          const at::Tensor& mean, const at::Tensor& rstd,
                                          at::IntArrayRef stride, at::IntArrayRef padding,
                                          at::IntArrayRef output_padding, int64_t groups,
                                          at::IntArrayRef dilation, int64_t num_groups,
                                          const c10::optional<at::Tensor>& gn_weight,
                                          bool has_conv_bias, std::array<bool, 5> output_mask);

// The path a call with these arguments takes, e.g. "aten_float32 -> group_norm_mean": the
// convolution's (conv_stage.h, ConvPath) and the GroupNorm kernel's, for the debug query
// fused::_conv_transpose3d_relu_group_norm_path.
std::string conv_transpose3d_relu_group_norm_path(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
    at::IntArrayRef dilation, int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    const c10::optional<at::Tensor>& gn_bias, double eps);

// The kernels of a training step's backward with these arguments (every gradient asked for),
// e.g. "dy_ndhwc_tf32 -> input_grad=tf32_wgmma, weight_grad=tf32_wgmma"
// (conv_stage.h, transposed_conv3d_backward_path), for the debug query
// fused::_conv_transpose3d_relu_group_norm_backward_path.
std::string conv_transpose3d_relu_group_norm_backward_path(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
    at::IntArrayRef dilation, int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    const c10::optional<at::Tensor>& gn_bias, double eps);

// The public operator: the forward's output alone.
at::Tensor conv_transpose3d_relu_group_norm(const at::Tensor& input, const at::Tensor& weight,
                                            const c10::optional<at::Tensor>& conv_bias,
                                            at::IntArrayRef stride, at::IntArrayRef padding,
                                            at::IntArrayRef output_padding, int64_t groups,
                                            at::IntArrayRef dilation, int64_t num_groups,
                                            const c10::optional<at::Tensor>& gn_weight,
                                            const c10::optional<at::Tensor>& gn_bias, double eps);

}  // namespace conv
}  // namespace fused_ops
