// C++ entry points to every fused operator, through the PyTorch dispatcher.
//
// These are what a C++ (libtorch) user calls: they dispatch exactly like torch.ops.fused.*
// from Python (to the CPU, CUDA or Meta kernel, through autograd when an input requires
// grad). The operators must be registered, which linking libfused_ops.so does.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <string>
#include <tuple>

namespace fused_ops {
namespace api {

at::Tensor relu_group_norm(const at::Tensor& input, int64_t num_groups,
                           const c10::optional<at::Tensor>& weight = c10::nullopt,
                           const c10::optional<at::Tensor>& bias = c10::nullopt, double eps = 1e-5);

at::Tensor group_norm_mean(const at::Tensor& input, int64_t num_groups,
                           const c10::optional<at::Tensor>& weight = c10::nullopt,
                           const c10::optional<at::Tensor>& bias = c10::nullopt, double eps = 1e-5);

at::Tensor conv_transpose3d_relu_group_norm(const at::Tensor& input, const at::Tensor& weight,
                                            const c10::optional<at::Tensor>& conv_bias,
                                            at::IntArrayRef stride, at::IntArrayRef padding,
                                            at::IntArrayRef output_padding, int64_t groups,
                                            at::IntArrayRef dilation, int64_t num_groups,
                                            const c10::optional<at::Tensor>& gn_weight,
                                            const c10::optional<at::Tensor>& gn_bias, double eps);

at::Tensor conv3d_group_norm_mean(const at::Tensor& input, const at::Tensor& weight,
                                  const c10::optional<at::Tensor>& conv_bias,
                                  at::IntArrayRef stride, at::IntArrayRef padding,
                                  at::IntArrayRef dilation, int64_t groups, int64_t num_groups,
                                  const c10::optional<at::Tensor>& gn_weight,
                                  const c10::optional<at::Tensor>& gn_bias, double eps);

// Debug queries: the path (kernels) a call of the operator with these arguments takes under
// the current precision flags, e.g. "aten_float32 -> group_norm_mean" (ops/conv/conv_stage.h).
std::string relu_group_norm_path(const at::Tensor& input, int64_t num_groups,
                                 const c10::optional<at::Tensor>& weight = c10::nullopt,
                                 const c10::optional<at::Tensor>& bias = c10::nullopt,
                                 double eps = 1e-5);
std::string group_norm_mean_path(const at::Tensor& input, int64_t num_groups,
                                 const c10::optional<at::Tensor>& weight = c10::nullopt,
                                 const c10::optional<at::Tensor>& bias = c10::nullopt,
                                 double eps = 1e-5);
std::string conv_transpose3d_relu_group_norm_path(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
    at::IntArrayRef dilation, int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    const c10::optional<at::Tensor>& gn_bias, double eps);
// The kernels of a training step's backward (every gradient asked for), e.g.
// "dy_ndhwc_tf32 -> input_grad=tf32_wgmma, weight_grad=tf32_wgmma" (ops/conv/conv_stage.h:
// transposed_conv3d_backward_path).
std::string conv_transpose3d_relu_group_norm_backward_path(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
    at::IntArrayRef dilation, int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    const c10::optional<at::Tensor>& gn_bias, double eps);
std::string conv3d_group_norm_mean_path(const at::Tensor& input, const at::Tensor& weight,
                                        const c10::optional<at::Tensor>& conv_bias,
                                        at::IntArrayRef stride, at::IntArrayRef padding,
                                        at::IntArrayRef dilation, int64_t groups,
                                        int64_t num_groups,
                                        const c10::optional<at::Tensor>& gn_weight,
                                        const c10::optional<at::Tensor>& gn_bias, double eps);

// Internal operators: forward passes that also return what backward needs, and backward
// passes (see ops/norm/*.h and ops/conv/*.h). They have no autograd formula.
std::tuple<at::Tensor, at::Tensor, at::Tensor> _relu_group_norm_forward(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps);

std::tuple<at::Tensor, at::Tensor, at::Tensor> _relu_group_norm_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 3> output_mask);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> _group_norm_mean_forward(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps);

std::tuple<at::Tensor, at::Tensor, at::Tensor> _group_norm_mean_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& channel_mean, int64_t num_groups,
    const c10::optional<at::Tensor>& weight, std::array<bool, 3> output_mask);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
_conv_transpose3d_relu_group_norm_forward(const at::Tensor& input, const at::Tensor& weight,
                                          const c10::optional<at::Tensor>& conv_bias,
                                          at::IntArrayRef stride, at::IntArrayRef padding,
                                          at::IntArrayRef output_padding, int64_t groups,
                                          at::IntArrayRef dilation, int64_t num_groups,
                                          const c10::optional<at::Tensor>& gn_weight,
                                          const c10::optional<at::Tensor>& gn_bias, double eps);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
_conv_transpose3d_relu_group_norm_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                           const at::Tensor& weight, const at::Tensor& conv_output,
                                           const at::Tensor& mean, const at::Tensor& rstd,
                                           at::IntArrayRef stride, at::IntArrayRef padding,
                                           at::IntArrayRef output_padding, int64_t groups,
                                           at::IntArrayRef dilation, int64_t num_groups,
                                           const c10::optional<at::Tensor>& gn_weight,
                                           bool has_conv_bias, std::array<bool, 5> output_mask);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
_conv3d_group_norm_mean_forward(const at::Tensor& input, const at::Tensor& weight,
                                const c10::optional<at::Tensor>& conv_bias, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                                int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
                                const c10::optional<at::Tensor>& gn_bias, double eps);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
_conv3d_group_norm_mean_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                 const at::Tensor& weight, const at::Tensor& conv_output,
                                 const at::Tensor& mean, const at::Tensor& rstd,
                                 const at::Tensor& channel_mean, at::IntArrayRef stride,
                                 at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                                 int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
                                 bool has_conv_bias, std::array<bool, 5> output_mask);

// The one-pass training path of conv3d_group_norm_mean (ops/conv/conv3d_group_norm_mean.h).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
_conv3d_group_norm_mean_onepass_forward(const at::Tensor& input, const at::Tensor& weight,
                                        const c10::optional<at::Tensor>& conv_bias,
                                        at::IntArrayRef stride, at::IntArrayRef padding,
                                        at::IntArrayRef dilation, int64_t groups,
                                        int64_t num_groups,
                                        const c10::optional<at::Tensor>& gn_weight,
                                        const c10::optional<at::Tensor>& gn_bias, double eps);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
_conv3d_group_norm_mean_onepass_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    const c10::optional<at::Tensor>& conv_bias, const at::Tensor& mean, const at::Tensor& rstd,
    const at::Tensor& channel_mean, const c10::optional<at::Tensor>& input_sums,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
    int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    std::array<bool, 5> output_mask);

}  // namespace api
}  // namespace fused_ops
