// fused::conv3d_group_norm_mean:
//   group_norm(conv3d(input, weight, conv_bias, ...), num_groups, gn_weight, gn_bias, eps)
//       .mean(over every dim but the batch)
// with the full parameter surface of torch.nn.functional.conv3d; returns shape (N,).
//
// The convolution runs through ATen (conv_stage.h); GroupNorm and the mean run as the fused
// group_norm_mean kernels of the input's device (norm/group_norm_mean.h), which never write
// the normalised tensor; on the CPU, the forward without autograd and the backward run by
// chunks of the batch (conv_stage.h: cpu_batch_chunks). These host functions are
// device-generic and serve every backend, Meta included; they are the internal operators
// fused::_conv3d_group_norm_mean_{forward,backward}, from which the Autograd kernel is built,
// and the public operator's kernel.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <string>
#include <tuple>

namespace fused_ops {
namespace conv {

// Returns (output, conv_output, mean, rstd, channel_mean): what backward needs besides the
// arguments. conv_output is in the memory format the input suggests.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv3d_group_norm_mean_forward(const at::Tensor& input, const at::Tensor& weight,
                               const c10::optional<at::Tensor>& conv_bias, at::IntArrayRef stride,
                               at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                               int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
                               const c10::optional<at::Tensor>& gn_bias, double eps);

// Returns (grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias), each
// undefined where output_mask is false or the parameter is absent.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv3d_group_norm_mean_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                const at::Tensor& weight, const at::Tensor& conv_output,
                                const at::Tensor& mean, const at::Tensor& rstd,
                                const at::Tensor& channel_mean, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                                int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
                                bool has_conv_bias, std::array<bool, 5> output_mask);

// The path a call with these arguments takes, e.g. "aten_float32 -> group_norm_mean": the
// convolution's (conv_stage.h, ConvPath) and the GroupNorm kernel's, for the debug query
// fused::_conv3d_group_norm_mean_path.
std::string conv3d_group_norm_mean_path(const at::Tensor& input, const at::Tensor& weight,
                                        const c10::optional<at::Tensor>& conv_bias,
                                        at::IntArrayRef stride, at::IntArrayRef padding,
                                        at::IntArrayRef dilation, int64_t groups,
                                        int64_t num_groups,
                                        const c10::optional<at::Tensor>& gn_weight,
                                        const c10::optional<at::Tensor>& gn_bias, double eps);

// Which instructions run the float32 products of the one-pass forward (path "onepass", no
// autograd) on input's device: "wgmma", "mma_sync", or "" (the CPU, a build without CUDA, a
// GPU without tensor cores: conv_kernels.h, OnePassCudaKernel::products_kernel). A debug
// query, fused::_conv3d_onepass_products_kernel.
std::string conv3d_onepass_products_kernel(const at::Tensor& input);

// The one-pass training path (CUDA, the problems of the one-pass kernels' family: see
// conv_kernels.h): the forward saves only per-(n, g) and per-(n, c) statistics, and the
// backward recomputes the convolution's output where it needs it. The Autograd kernel takes it
// where conv3d_group_norm_mean_trains_onepass says so (and the debug query reports "onepass").
bool conv3d_group_norm_mean_trains_onepass(const at::Tensor& input, const at::Tensor& weight,
                                           const c10::optional<at::Tensor>& conv_bias,
                                           at::IntArrayRef stride, at::IntArrayRef padding,
                                           at::IntArrayRef dilation, int64_t groups,
                                           int64_t num_groups,
                                           const c10::optional<at::Tensor>& gn_weight,
                                           const c10::optional<at::Tensor>& gn_bias, double eps);

// Returns (output, mean, rstd, channel_mean, input_sums): input_sums, x's sums for the backward
// (conv_kernels.h), float64 (N, C_in, kD * kH * kW + 1) for a float32 input, else empty (0,).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv3d_group_norm_mean_onepass_forward(const at::Tensor& input, const at::Tensor& weight,
                                       const c10::optional<at::Tensor>& conv_bias,
                                       at::IntArrayRef stride, at::IntArrayRef padding,
                                       at::IntArrayRef dilation, int64_t groups, int64_t num_groups,
                                       const c10::optional<at::Tensor>& gn_weight,
                                       const c10::optional<at::Tensor>& gn_bias, double eps);

// Returns (grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias), each
// undefined where output_mask is false or the parameter is absent. input_sums: the forward's, or
// None (then x is summed again).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv3d_group_norm_mean_onepass_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    const c10::optional<at::Tensor>& conv_bias, const at::Tensor& mean, const at::Tensor& rstd,
    const at::Tensor& channel_mean, const c10::optional<at::Tensor>& input_sums,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
    int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    std::array<bool, 5> output_mask);

// The public operator: the forward's output alone.
at::Tensor conv3d_group_norm_mean(const at::Tensor& input, const at::Tensor& weight,
                                  const c10::optional<at::Tensor>& conv_bias,
                                  at::IntArrayRef stride, at::IntArrayRef padding,
                                  at::IntArrayRef dilation, int64_t groups, int64_t num_groups,
                                  const c10::optional<at::Tensor>& gn_weight,
                                  const c10::optional<at::Tensor>& gn_bias, double eps);

}  // namespace conv
}  // namespace fused_ops
