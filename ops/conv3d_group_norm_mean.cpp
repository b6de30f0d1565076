#include "conv3d_group_norm_mean.h"

#include "api.h"
#include "conv3d.h"

namespace fused_ops {
namespace {
constexpr const char* kName = "fused::conv3d_group_norm_mean";
}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv3d_group_norm_mean_forward(const at::Tensor& input, const at::Tensor& weight,
                               const c10::optional<at::Tensor>& conv_bias, at::IntArrayRef stride,
                               at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                               int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
                               const c10::optional<at::Tensor>& gn_bias, double eps) {
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, /*output_padding=*/{},
                                                 dilation, groups, /*transposed=*/false);
  check_conv_group_norm_args(kName, input, weight, conv_bias, params, num_groups, gn_weight,
                             gn_bias, eps);
  // The GroupNorm + mean kernels read a channels-last convolution output as it is.
  at::Tensor conv_output = run_conv3d(input, weight, conv_bias, params, /*channels_last_ok=*/true);
  auto [output, mean, rstd, channel_mean] =
      api::_group_norm_mean_forward(conv_output, num_groups, gn_weight, gn_bias, eps);
  return {output, conv_output, mean, rstd, channel_mean};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv3d_group_norm_mean_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                const at::Tensor& weight, bool has_conv_bias,
                                const at::Tensor& conv_output, const at::Tensor& mean,
                                const at::Tensor& rstd, const at::Tensor& channel_mean,
                                at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef dilation, int64_t groups, int64_t num_groups,
                                const c10::optional<at::Tensor>& gn_weight,
                                std::array<bool, 5> output_mask) {
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, /*output_padding=*/{},
                                                 dilation, groups, /*transposed=*/false);
  const bool need_conv_grad = output_mask[0] || output_mask[1] || output_mask[2];
  auto [grad_conv_output, grad_gn_weight, grad_gn_bias] = api::_group_norm_mean_backward(
      grad_output, conv_output, mean, rstd, channel_mean, num_groups, gn_weight,
      {need_conv_grad, output_mask[3], output_mask[4]});
  at::Tensor grad_input, grad_weight, grad_conv_bias;
  if (need_conv_grad) {
    std::tie(grad_input, grad_weight, grad_conv_bias) =
        conv3d_backward(grad_conv_output, input, weight, has_conv_bias, params,
                        {output_mask[0], output_mask[1], output_mask[2]});
  }
  return {grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias};
}

}  // namespace fused_ops
