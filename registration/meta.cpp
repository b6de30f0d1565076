// Meta kernels: output shapes, dtypes and strides only, with symbolic sizes, so that
// torch.compile (FakeTensor) can trace every operator, with static or dynamic shapes.
// The argument checks are the real kernels' (ops/checks.h), so Meta rejects what they reject.
// Every real kernel returns contiguous tensors, and so do these.
#include "checks.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace fused_ops {
namespace {

using OptTensor = c10::optional<at::Tensor>;

at::Tensor empty_meta(c10::SymIntArrayRef sizes, const at::Tensor& like) {
  return at::empty_symint(sizes, like.options());
}

at::Tensor empty_stats_meta(c10::SymIntArrayRef sizes, const at::Tensor& input) {
  return at::empty_symint(sizes, input.options().dtype(stats_dtype(input.scalar_type())));
}

// (grad_input, grad_weight, grad_bias) of a GroupNorm-family backward.
std::tuple<at::Tensor, at::Tensor, at::Tensor> norm_grads_meta(const at::Tensor& input,
                                                               const SymGroupNormShape& s,
                                                               const OptTensor& weight,
                                                               std::array<bool, 3> mask) {
  const bool has_weight = weight.has_value() && weight->defined();
  return {mask[0] ? empty_meta(input.sym_sizes(), input) : at::Tensor(),
          mask[1] && has_weight ? empty_meta({s.C}, input) : at::Tensor(),
          mask[2] ? empty_meta({s.C}, input) : at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_forward_meta(
    const at::Tensor& input, int64_t num_groups, const OptTensor& weight, const OptTensor& bias,
    double eps) {
  const auto s = check_group_norm_args_symint("fused::relu_group_norm", input, num_groups, weight,
                                              bias, eps);
  return {empty_meta(input.sym_sizes(), input), empty_stats_meta({s.N, s.G}, input),
          empty_stats_meta({s.N, s.G}, input)};
}

at::Tensor relu_group_norm_meta(const at::Tensor& input, int64_t num_groups,
                                const OptTensor& weight, const OptTensor& bias, double eps) {
  return std::get<0>(relu_group_norm_forward_meta(input, num_groups, weight, bias, eps));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const OptTensor& weight,
    std::array<bool, 3> output_mask) {
  constexpr const char* op = "fused::relu_group_norm (backward)";
  const auto s = check_group_norm_args_symint(op, input, num_groups, weight, c10::nullopt, 0.0);
  check_group_norm_backward_args_symint(op, grad_output, input.sym_sizes(), input, s, mean, rstd);
  return norm_grads_meta(input, s, weight, output_mask);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_norm_mean_forward_meta(
    const at::Tensor& input, int64_t num_groups, const OptTensor& weight, const OptTensor& bias,
    double eps) {
  const auto s = check_group_norm_args_symint("fused::group_norm_mean", input, num_groups, weight,
                                              bias, eps);
  return {empty_meta({s.N}, input), empty_stats_meta({s.N, s.G}, input),
          empty_stats_meta({s.N, s.G}, input), empty_stats_meta({s.N, s.C}, input)};
}

at::Tensor group_norm_mean_meta(const at::Tensor& input, int64_t num_groups,
                                const OptTensor& weight, const OptTensor& bias, double eps) {
  return std::get<0>(group_norm_mean_forward_meta(input, num_groups, weight, bias, eps));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_mean_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& channel_mean, int64_t num_groups,
    const OptTensor& weight, std::array<bool, 3> output_mask) {
  constexpr const char* op = "fused::group_norm_mean (backward)";
  const auto s = check_group_norm_args_symint(op, input, num_groups, weight, c10::nullopt, 0.0);
  check_group_norm_backward_args_symint(op, grad_output, {s.N}, input, s, mean, rstd,
                                        &channel_mean);
  return norm_grads_meta(input, s, weight, output_mask);
}

at::Tensor conv_transpose3d_relu_group_norm_meta(
    const at::Tensor& input, const at::Tensor& weight, const OptTensor& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
    int64_t groups, at::IntArrayRef dilation, int64_t num_groups, const OptTensor& gn_weight,
    const OptTensor& gn_bias, double eps) {
  constexpr const char* op = "fused::conv_transpose3d_relu_group_norm";
  const Conv3dParams params =
      make_conv3d_params(op, stride, padding, output_padding, dilation, groups, true);
  const auto out_shape = check_conv_group_norm_args_symint(op, input, weight, conv_bias, params,
                                                           num_groups, gn_weight, gn_bias, eps);
  return empty_meta(out_shape, input);
}

at::Tensor conv3d_group_norm_mean_meta(const at::Tensor& input, const at::Tensor& weight,
                                       const OptTensor& conv_bias, at::IntArrayRef stride,
                                       at::IntArrayRef padding, at::IntArrayRef dilation,
                                       int64_t groups, int64_t num_groups,
                                       const OptTensor& gn_weight, const OptTensor& gn_bias,
                                       double eps) {
  constexpr const char* op = "fused::conv3d_group_norm_mean";
  const Conv3dParams params = make_conv3d_params(op, stride, padding, {}, dilation, groups, false);
  const auto out_shape = check_conv_group_norm_args_symint(op, input, weight, conv_bias, params,
                                                           num_groups, gn_weight, gn_bias, eps);
  return empty_meta({out_shape[0]}, input);
}

}  // namespace

TORCH_LIBRARY_IMPL(fused, Meta, m) {
  m.impl("relu_group_norm", TORCH_FN(relu_group_norm_meta));
  m.impl("group_norm_mean", TORCH_FN(group_norm_mean_meta));
  m.impl("conv_transpose3d_relu_group_norm", TORCH_FN(conv_transpose3d_relu_group_norm_meta));
  m.impl("conv3d_group_norm_mean", TORCH_FN(conv3d_group_norm_mean_meta));
  m.impl("_relu_group_norm_forward", TORCH_FN(relu_group_norm_forward_meta));
  m.impl("_relu_group_norm_backward", TORCH_FN(relu_group_norm_backward_meta));
  m.impl("_group_norm_mean_forward", TORCH_FN(group_norm_mean_forward_meta));
  m.impl("_group_norm_mean_backward", TORCH_FN(group_norm_mean_backward_meta));
}

}  // namespace fused_ops
