#include "conv_transpose3d_relu_group_norm.h"

#include "api.h"
#include "conv3d.h"

namespace fused_ops {
namespace {
constexpr const char* kName = "fused::conv_transpose3d_relu_group_norm";
}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> conv_transpose3d_relu_group_norm_forward(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
    int64_t groups, at::IntArrayRef dilation, int64_t num_groups,
    const c10::optional<at::Tensor>& gn_weight, const c10::optional<at::Tensor>& gn_bias,
    double eps) {
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, output_padding, dilation,
                                                 groups, /*transposed=*/true);
  check_conv_group_norm_args(kName, input, weight, conv_bias, params, num_groups, gn_weight,
                             gn_bias, eps);
  at::Tensor conv_output = run_conv3d(input, weight, conv_bias, params);
  auto [output, mean, rstd] =
      api::_relu_group_norm_forward(conv_output, num_groups, gn_weight, gn_bias, eps);
  return {output, conv_output, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv_transpose3d_relu_group_norm_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    bool has_conv_bias, const at::Tensor& conv_output, const at::Tensor& mean,
    const at::Tensor& rstd, at::IntArrayRef stride, at::IntArrayRef padding,
    at::IntArrayRef output_padding, int64_t groups, at::IntArrayRef dilation, int64_t num_groups,
    const c10::optional<at::Tensor>& gn_weight, std::array<bool, 5> output_mask) {
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, output_padding, dilation,
                                                 groups, /*transposed=*/true);
  const bool need_conv_grad = output_mask[0] || output_mask[1] || output_mask[2];
  auto [grad_conv_output, grad_gn_weight, grad_gn_bias] = api::_relu_group_norm_backward(
      grad_output, conv_output, mean, rstd, num_groups, gn_weight,
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
