#include "api.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace fused_ops {
namespace api {
namespace {

// The typed handle of fused::<name>, looked up once.
template <typename Signature>
c10::TypedOperatorHandle<Signature> fused_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

using OptTensor = c10::optional<at::Tensor>;

}  // namespace

at::Tensor relu_group_norm(const at::Tensor& input, int64_t num_groups, const OptTensor& weight,
                           const OptTensor& bias, double eps) {
  static const auto op =
      fused_op<at::Tensor(const at::Tensor&, int64_t, const OptTensor&, const OptTensor&, double)>(
          "fused::relu_group_norm");
  return op.call(input, num_groups, weight, bias, eps);
}

at::Tensor group_norm_mean(const at::Tensor& input, int64_t num_groups, const OptTensor& weight,
                           const OptTensor& bias, double eps) {
  static const auto op =
      fused_op<at::Tensor(const at::Tensor&, int64_t, const OptTensor&, const OptTensor&, double)>(
          "fused::group_norm_mean");
  return op.call(input, num_groups, weight, bias, eps);
}

at::Tensor conv_transpose3d_relu_group_norm(const at::Tensor& input, const at::Tensor& weight,
                                            const OptTensor& conv_bias, at::IntArrayRef stride,
                                            at::IntArrayRef padding,
                                            at::IntArrayRef output_padding, int64_t groups,
                                            at::IntArrayRef dilation, int64_t num_groups,
                                            const OptTensor& gn_weight, const OptTensor& gn_bias,
                                            double eps) {
  static const auto op =
      fused_op<at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&, at::IntArrayRef,
                          at::IntArrayRef, at::IntArrayRef, int64_t, at::IntArrayRef, int64_t,
                          const OptTensor&, const OptTensor&, double)>(
          "fused::conv_transpose3d_relu_group_norm");
  return op.call(input, weight, conv_bias, stride, padding, output_padding, groups, dilation,
                 num_groups, gn_weight, gn_bias, eps);
}

at::Tensor conv3d_group_norm_mean(const at::Tensor& input, const at::Tensor& weight,
                                  const OptTensor& conv_bias, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef dilation,
                                  int64_t groups, int64_t num_groups, const OptTensor& gn_weight,
                                  const OptTensor& gn_bias, double eps) {
  static const auto op =
      fused_op<at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&, at::IntArrayRef,
                          at::IntArrayRef, at::IntArrayRef, int64_t, int64_t, const OptTensor&,
                          const OptTensor&, double)>("fused::conv3d_group_norm_mean");
  return op.call(input, weight, conv_bias, stride, padding, dilation, groups, num_groups,
                 gn_weight, gn_bias, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> _relu_group_norm_forward(
    const at::Tensor& input, int64_t num_groups, const OptTensor& weight, const OptTensor& bias,
    double eps) {
  static const auto op =
      fused_op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
          const at::Tensor&, int64_t, const OptTensor&, const OptTensor&, double)>(
          "fused::_relu_group_norm_forward");
  return op.call(input, num_groups, weight, bias, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> _relu_group_norm_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const OptTensor& weight,
    std::array<bool, 3> output_mask) {
  static const auto op =
      fused_op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
          const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
          const OptTensor&, std::array<bool, 3>)>("fused::_relu_group_norm_backward");
  return op.call(grad_output, input, mean, rstd, num_groups, weight, output_mask);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> _group_norm_mean_forward(
    const at::Tensor& input, int64_t num_groups, const OptTensor& weight, const OptTensor& bias,
    double eps) {
  static const auto op =
      fused_op<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
          const at::Tensor&, int64_t, const OptTensor&, const OptTensor&, double)>(
          "fused::_group_norm_mean_forward");
  return op.call(input, num_groups, weight, bias, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> _group_norm_mean_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& channel_mean, int64_t num_groups,
    const OptTensor& weight, std::array<bool, 3> output_mask) {
  static const auto op =
      fused_op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
          const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
          const at::Tensor&, int64_t, const OptTensor&, std::array<bool, 3>)>(
          "fused::_group_norm_mean_backward");
  return op.call(grad_output, input, mean, rstd, channel_mean, num_groups, weight, output_mask);
}

}  // namespace api
}  // namespace fused_ops
