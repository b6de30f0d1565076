#include "common/api.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace fused_ops {
namespace api {
namespace {

using at::IntArrayRef;
using at::Tensor;
using OptTensor = c10::optional<at::Tensor>;
using Tensors3 = std::tuple<Tensor, Tensor, Tensor>;
using Tensors4 = std::tuple<Tensor, Tensor, Tensor, Tensor>;
using Tensors5 = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;

// The signatures of the operators' argument lists (schemas.cpp), returning R.
template <typename R>
using NormSignature = R(const Tensor&, int64_t, const OptTensor&, const OptTensor&, double);
template <typename R>
using ConvTransposeSignature = R(const Tensor&, const Tensor&, const OptTensor&, IntArrayRef,
                                 IntArrayRef, IntArrayRef, int64_t, IntArrayRef, int64_t,
                                 const OptTensor&, const OptTensor&, double);
template <typename R>
using Conv3dSignature = R(const Tensor&, const Tensor&, const OptTensor&, IntArrayRef, IntArrayRef,
                          IntArrayRef, int64_t, int64_t, const OptTensor&, const OptTensor&,
                          double);

// The typed handle of fused::<name> (looked up once per call site, by its static).
template <typename Signature>
c10::TypedOperatorHandle<Signature> fused_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

}  // namespace

#define FUSED_OPS_CALL(Signature, name, ...)                  \
  static const auto op = fused_op<Signature>("fused::" name); \
  return op.call(__VA_ARGS__)

Tensor relu_group_norm(const Tensor& input, int64_t num_groups, const OptTensor& weight,
                       const OptTensor& bias, double eps) {
  FUSED_OPS_CALL(NormSignature<Tensor>, "relu_group_norm", input, num_groups, weight, bias, eps);
}

Tensor group_norm_mean(const Tensor& input, int64_t num_groups, const OptTensor& weight,
                       const OptTensor& bias, double eps) {
  FUSED_OPS_CALL(NormSignature<Tensor>, "group_norm_mean", input, num_groups, weight, bias, eps);
}

Tensor conv_transpose3d_relu_group_norm(const Tensor& input, const Tensor& weight,
                                        const OptTensor& conv_bias, IntArrayRef stride,
                                        IntArrayRef padding, IntArrayRef output_padding,
                                        int64_t groups, IntArrayRef dilation, int64_t num_groups,
                                        const OptTensor& gn_weight, const OptTensor& gn_bias,
                                        double eps) {
  FUSED_OPS_CALL(ConvTransposeSignature<Tensor>, "conv_transpose3d_relu_group_norm", input, weight,
                 conv_bias, stride, padding, output_padding, groups, dilation, num_groups,
                 gn_weight, gn_bias, eps);
}

Tensor conv3d_group_norm_mean(const Tensor& input, const Tensor& weight, const OptTensor& conv_bias,
                              IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                              int64_t groups, int64_t num_groups, const OptTensor& gn_weight,
                              const OptTensor& gn_bias, double eps) {
  FUSED_OPS_CALL(Conv3dSignature<Tensor>, "conv3d_group_norm_mean", input, weight, conv_bias,
                 stride, padding, dilation, groups, num_groups, gn_weight, gn_bias, eps);
}

std::string relu_group_norm_path(const Tensor& input, int64_t num_groups, const OptTensor& weight,
                                 const OptTensor& bias, double eps) {
  FUSED_OPS_CALL(NormSignature<std::string>, "_relu_group_norm_path", input, num_groups, weight,
                 bias, eps);
}

std::string group_norm_mean_path(const Tensor& input, int64_t num_groups, const OptTensor& weight,
                                 const OptTensor& bias, double eps) {
  FUSED_OPS_CALL(NormSignature<std::string>, "_group_norm_mean_path", input, num_groups, weight,
                 bias, eps);
}

std::string conv_transpose3d_relu_group_norm_path(const Tensor& input, const Tensor& weight,
                                                  const OptTensor& conv_bias, IntArrayRef stride,
                                                  IntArrayRef padding, IntArrayRef output_padding,
                                                  int64_t groups, IntArrayRef dilation,
                                                  int64_t num_groups, const OptTensor& gn_weight,
                                                  const OptTensor& gn_bias, double eps) {
  FUSED_OPS_CALL(ConvTransposeSignature<std::string>, "_conv_transpose3d_relu_group_norm_path",
                 input, weight, conv_bias, stride, padding, output_padding, groups, dilation,
                 num_groups, gn_weight, gn_bias, eps);
}

std::string conv_transpose3d_relu_group_norm_backward_path(
    const Tensor& input, const Tensor& weight, const OptTensor& conv_bias, IntArrayRef stride,
    IntArrayRef padding, IntArrayRef output_padding, int64_t groups, IntArrayRef dilation,
    int64_t num_groups, const OptTensor& gn_weight, const OptTensor& gn_bias, double eps) {
  FUSED_OPS_CALL(ConvTransposeSignature<std::string>,
                 "_conv_transpose3d_relu_group_norm_backward_path", input, weight, conv_bias,
                 stride, padding, output_padding, groups, dilation, num_groups, gn_weight, gn_bias,
                 eps);
}

std::string conv3d_group_norm_mean_path(const Tensor& input, const Tensor& weight,
                                        const OptTensor& conv_bias, IntArrayRef stride,
                                        IntArrayRef padding, IntArrayRef dilation, int64_t groups,
                                        int64_t num_groups, const OptTensor& gn_weight,
                                        const OptTensor& gn_bias, double eps) {
  FUSED_OPS_CALL(Conv3dSignature<std::string>, "_conv3d_group_norm_mean_path", input, weight,
                 conv_bias, stride, padding, dilation, groups, num_groups, gn_weight, gn_bias, eps);
}

Tensors3 _relu_group_norm_forward(const Tensor& input, int64_t num_groups, const OptTensor& weight,
                                  const OptTensor& bias, double eps) {
  FUSED_OPS_CALL(NormSignature<Tensors3>, "_relu_group_norm_forward", input, num_groups, weight,
                 bias, eps);
}

Tensors3 _relu_group_norm_backward(const Tensor& grad_output, const Tensor& input,
                                   const Tensor& mean, const Tensor& rstd, int64_t num_groups,
                                   const OptTensor& weight, std::array<bool, 3> output_mask) {
  FUSED_OPS_CALL(Tensors3(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                          const OptTensor&, std::array<bool, 3>),
                 "_relu_group_norm_backward", grad_output, input, mean, rstd, num_groups, weight,
                 output_mask);
}

Tensors4 _group_norm_mean_forward(const Tensor& input, int64_t num_groups, const OptTensor& weight,
                                  const OptTensor& bias, double eps) {
  FUSED_OPS_CALL(NormSignature<Tensors4>, "_group_norm_mean_forward", input, num_groups, weight,
                 bias, eps);
}

Tensors3 _group_norm_mean_backward(const Tensor& grad_output, const Tensor& input,
                                   const Tensor& mean, const Tensor& rstd,
                                   const Tensor& channel_mean, int64_t num_groups,
                                   const OptTensor& weight, std::array<bool, 3> output_mask) {
  FUSED_OPS_CALL(Tensors3(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          int64_t, const OptTensor&, std::array<bool, 3>),
                 "_group_norm_mean_backward", grad_output, input, mean, rstd, channel_mean,
                 num_groups, weight, output_mask);
}

Tensors4 _conv_transpose3d_relu_group_norm_forward(const Tensor& input, const Tensor& weight,
                                                   const OptTensor& conv_bias, IntArrayRef stride,
                                                   IntArrayRef padding, IntArrayRef output_padding,
                                                   int64_t groups, IntArrayRef dilation,
                                                   int64_t num_groups, const OptTensor& gn_weight,
                                                   const OptTensor& gn_bias, double eps) {
  FUSED_OPS_CALL(ConvTransposeSignature<Tensors4>, "_conv_transpose3d_relu_group_norm_forward",
                 input, weight, conv_bias, stride, padding, output_padding, groups, dilation,
                 num_groups, gn_weight, gn_bias, eps);
}

Tensors5 _conv_transpose3d_relu_group_norm_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& conv_output,
    const Tensor& mean, const Tensor& rstd, IntArrayRef stride, IntArrayRef padding,
    IntArrayRef output_padding, int64_t groups, IntArrayRef dilation, int64_t num_groups,
    const OptTensor& gn_weight, bool has_conv_bias, std::array<bool, 5> output_mask) {
  FUSED_OPS_CALL(Tensors5(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef, int64_t,
                          IntArrayRef, int64_t, const OptTensor&, bool, std::array<bool, 5>),
                 "_conv_transpose3d_relu_group_norm_backward", grad_output, input, weight,
                 conv_output, mean, rstd, stride, padding, output_padding, groups, dilation,
                 num_groups, gn_weight, has_conv_bias, output_mask);
}

Tensors5 _conv3d_group_norm_mean_forward(const Tensor& input, const Tensor& weight,
                                         const OptTensor& conv_bias, IntArrayRef stride,
                                         IntArrayRef padding, IntArrayRef dilation, int64_t groups,
                                         int64_t num_groups, const OptTensor& gn_weight,
                                         const OptTensor& gn_bias, double eps) {
  FUSED_OPS_CALL(Conv3dSignature<Tensors5>, "_conv3d_group_norm_mean_forward", input, weight,
                 conv_bias, stride, padding, dilation, groups, num_groups, gn_weight, gn_bias, eps);
}

Tensors5 _conv3d_group_norm_mean_backward(const Tensor& grad_output, const Tensor& input,
                                          const Tensor& weight, const Tensor& conv_output,
                                          const Tensor& mean, const Tensor& rstd,
                                          const Tensor& channel_mean, IntArrayRef stride,
                                          IntArrayRef padding, IntArrayRef dilation, int64_t groups,
                                          int64_t num_groups, const OptTensor& gn_weight,
                                          bool has_conv_bias, std::array<bool, 5> output_mask) {
  FUSED_OPS_CALL(Tensors5(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef,
                          int64_t, int64_t, const OptTensor&, bool, std::array<bool, 5>),
                 "_conv3d_group_norm_mean_backward", grad_output, input, weight, conv_output, mean,
                 rstd, channel_mean, stride, padding, dilation, groups, num_groups, gn_weight,
                 has_conv_bias, output_mask);
}

Tensors5 _conv3d_group_norm_mean_onepass_forward(const Tensor& input, const Tensor& weight,
                                                 const OptTensor& conv_bias, IntArrayRef stride,
                                                 IntArrayRef padding, IntArrayRef dilation,
                                                 int64_t groups, int64_t num_groups,
                                                 const OptTensor& gn_weight,
                                                 const OptTensor& gn_bias, double eps) {
  FUSED_OPS_CALL(Conv3dSignature<Tensors5>, "_conv3d_group_norm_mean_onepass_forward", input,
                 weight, conv_bias, stride, padding, dilation, groups, num_groups, gn_weight,
                 gn_bias, eps);
}

Tensors5 _conv3d_group_norm_mean_onepass_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight,
    const OptTensor& conv_bias, const Tensor& mean, const Tensor& rstd, const Tensor& channel_mean,
    const OptTensor& input_sums, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
    int64_t groups, int64_t num_groups, const OptTensor& gn_weight,
    std::array<bool, 5> output_mask) {
  FUSED_OPS_CALL(
      Tensors5(const Tensor&, const Tensor&, const Tensor&, const OptTensor&, const Tensor&,
               const Tensor&, const Tensor&, const OptTensor&, IntArrayRef, IntArrayRef,
               IntArrayRef, int64_t, int64_t, const OptTensor&, std::array<bool, 5>),
      "_conv3d_group_norm_mean_onepass_backward", grad_output, input, weight, conv_bias, mean, rstd,
      channel_mean, input_sums, stride, padding, dilation, groups, num_groups, gn_weight,
      output_mask);
}

#undef FUSED_OPS_CALL

}  // namespace api
}  // namespace fused_ops
