#include "conv/conv3d_group_norm_mean.h"

#include "common/checks.h"
#include "conv/conv_stage.h"
#include "norm/group_norm_mean.h"

#include <ATen/ops/empty.h>

namespace fused_ops {
namespace conv {
namespace {

constexpr const char* kName = "fused::conv3d_group_norm_mean";
constexpr const char* kBackwardName = "fused::conv3d_group_norm_mean (backward)";

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv3d_group_norm_mean_forward(const at::Tensor& input, const at::Tensor& weight,
                               const c10::optional<at::Tensor>& conv_bias, at::IntArrayRef stride,
                               at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                               int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
                               const c10::optional<at::Tensor>& gn_bias, double eps) {
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, /*output_padding=*/{},
                                                 dilation, groups, /*transposed=*/false);
  const ConvGroupNormShapes shapes = check_conv_group_norm_args(
      kName, input, weight, conv_bias, params, num_groups, gn_weight, gn_bias, eps);
  // The GroupNorm + mean kernels read a channels-last convolution output in place.
  const at::Tensor conv_output =
      input.is_meta() ? empty_conv_output(input, shapes.conv_output)
                      : run_conv3d(input, weight, conv_bias, params, ConvConsumer::kGroupNormMean);
  auto [output, mean, rstd, channel_mean] = norm::group_norm_mean_forward_prechecked(
      conv_output, shapes.group_norm, gn_weight, gn_bias, eps);
  return {output, conv_output, mean, rstd, channel_mean};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv3d_group_norm_mean_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                const at::Tensor& weight, const at::Tensor& conv_output,
                                const at::Tensor& mean, const at::Tensor& rstd,
                                const at::Tensor& channel_mean, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                                int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
                                bool has_conv_bias, std::array<bool, 5> output_mask) {
  const Conv3dParams params = make_conv3d_params(kBackwardName, stride, padding,
                                                 /*output_padding=*/{}, dilation, groups,
                                                 /*transposed=*/false);
  const auto conv_shape = check_conv3d_args(kBackwardName, input, weight, c10::nullopt, params);
  TORCH_CHECK(conv_output.sym_sizes() == c10::SymIntArrayRef(conv_shape), kBackwardName,
              ": expected conv_output of shape ", c10::SymIntArrayRef(conv_shape), ", got ",
              conv_output.sym_sizes());
  check_same_device_and_dtype(kBackwardName, "conv_output", conv_output, "input", input);
  const bool need_conv_grad = output_mask[0] || output_mask[1] || output_mask[2];
  auto [grad_conv_output, grad_gn_weight, grad_gn_bias] =
      norm::group_norm_mean_backward(grad_output, conv_output, mean, rstd, channel_mean, num_groups,
                                     gn_weight, {need_conv_grad, output_mask[3], output_mask[4]});
  auto [grad_input, grad_weight, grad_conv_bias] =
      conv3d_backward(grad_conv_output, input, weight, has_conv_bias, params,
                      {output_mask[0], output_mask[1], output_mask[2]});
  return {grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias};
}

std::string conv3d_group_norm_mean_path(const at::Tensor& input, const at::Tensor& weight,
                                        const c10::optional<at::Tensor>& conv_bias,
                                        at::IntArrayRef stride, at::IntArrayRef padding,
                                        at::IntArrayRef dilation, int64_t groups,
                                        int64_t num_groups,
                                        const c10::optional<at::Tensor>& gn_weight,
                                        const c10::optional<at::Tensor>& gn_bias, double eps) {
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, /*output_padding=*/{},
                                                 dilation, groups, /*transposed=*/false);
  const ConvGroupNormShapes shapes = check_conv_group_norm_args(
      kName, input, weight, conv_bias, params, num_groups, gn_weight, gn_bias, eps);
  return std::string(conv_path_name(
             select_conv_path(input, weight, params, ConvConsumer::kGroupNormMean))) +
         " -> " +
         norm::group_norm_mean_kernel_name(
             at::empty_symint(shapes.conv_output, input.options().device(at::kMeta).memory_format(
                                                      input.suggest_memory_format())),
             input.device());
}

at::Tensor conv3d_group_norm_mean(const at::Tensor& input, const at::Tensor& weight,
                                  const c10::optional<at::Tensor>& conv_bias,
                                  at::IntArrayRef stride, at::IntArrayRef padding,
                                  at::IntArrayRef dilation, int64_t groups, int64_t num_groups,
                                  const c10::optional<at::Tensor>& gn_weight,
                                  const c10::optional<at::Tensor>& gn_bias, double eps) {
  return std::get<0>(conv3d_group_norm_mean_forward(input, weight, conv_bias, stride, padding,
                                                    dilation, groups, num_groups, gn_weight,
                                                    gn_bias, eps));
}

}  // namespace conv
}  // namespace fused_ops
