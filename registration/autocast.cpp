// Autocast kernels (AutocastCUDA, AutocastCPU) of the public operators, in C++, so that
// TorchScript and C++ programs under autocast see them too.
//
// Under torch.autocast the original modules cast as follows: ConvTranspose3d and Conv3d run
// in the autocast dtype (float16 or bfloat16: both are "lower precision" ops on CUDA and on
// the CPU); ReLU keeps its input's dtype; GroupNorm is a float32 op on CUDA (its input is
// cast up, its result float32) and left alone on the CPU (it runs in its input's dtype, with
// float32 weight and bias); the mean keeps its input's dtype. The kernels here give the
// drop-ins the same result dtype and the same convolution rounding:
//   * the conv operators run the convolution in the autocast dtype (ATen's, as the original),
//     then the fused GroupNorm part (relu_group_norm / group_norm_mean) in float32 on the
//     convolution's output;
//   * the GroupNorm operators run in float32;
// and the result is cast to the dtype the original's has: float32 on CUDA, on the CPU the
// dtype GroupNorm's input had. The GroupNorm part in float32 is at least as accurate as the
// original's (on the CPU it is then rounded once, to the original's result dtype).
// float64 inputs are left alone (autocast does not cast them), as are calls with autocast off
// (these kernels are only reached with it on).
#include "common/api.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/conv3d.h>
#include <ATen/ops/conv_transpose3d.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace fused_ops {
namespace {

using OptTensor = c10::optional<at::Tensor>;

bool is_low_or_float(const at::Tensor& t) {
  const at::ScalarType s = t.scalar_type();
  return s == at::kHalf || s == at::kBFloat16 || s == at::kFloat;
}

at::Tensor cast(const at::Tensor& t, at::ScalarType dtype) {
  return is_low_or_float(t) ? t.to(dtype) : t;
}

OptTensor cast(const OptTensor& t, at::ScalarType dtype) {
  return t.has_value() && t->defined() ? OptTensor(cast(*t, dtype)) : t;
}

// The dtype of GroupNorm's result under autocast, for a GroupNorm input of `input_dtype`.
at::ScalarType group_norm_result_dtype(c10::DeviceType device, at::ScalarType input_dtype) {
  return device == c10::DeviceType::CUDA ? at::kFloat : input_dtype;
}

template <c10::DeviceType kDevice>
struct NoAutocast {
  c10::impl::ExcludeDispatchKeyGuard guard{
      at::autocast::get_autocast_dispatch_key_from_device_type(kDevice)};
};

template <c10::DeviceType kDevice>
at::Tensor relu_group_norm_autocast(const at::Tensor& input, int64_t num_groups,
                                    const OptTensor& weight, const OptTensor& bias, double eps) {
  const NoAutocast<kDevice> no_autocast;
  if (!is_low_or_float(input)) {
    return api::relu_group_norm(input, num_groups, weight, bias, eps);
  }
  return api::relu_group_norm(cast(input, at::kFloat), num_groups, cast(weight, at::kFloat),
                              cast(bias, at::kFloat), eps)
      .to(group_norm_result_dtype(kDevice, input.scalar_type()));
}

template <c10::DeviceType kDevice>
at::Tensor group_norm_mean_autocast(const at::Tensor& input, int64_t num_groups,
                                    const OptTensor& weight, const OptTensor& bias, double eps) {
  const NoAutocast<kDevice> no_autocast;
  if (!is_low_or_float(input)) {
    return api::group_norm_mean(input, num_groups, weight, bias, eps);
  }
  return api::group_norm_mean(cast(input, at::kFloat), num_groups, cast(weight, at::kFloat),
                              cast(bias, at::kFloat), eps)
      .to(group_norm_result_dtype(kDevice, input.scalar_type()));
}

template <c10::DeviceType kDevice>
at::Tensor conv_transpose3d_relu_group_norm_autocast(
    const at::Tensor& input, const at::Tensor& weight, const OptTensor& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
    at::IntArrayRef dilation, int64_t num_groups, const OptTensor& gn_weight,
    const OptTensor& gn_bias, double eps) {
  const NoAutocast<kDevice> no_autocast;
  if (!is_low_or_float(input)) {
    return api::conv_transpose3d_relu_group_norm(input, weight, conv_bias, stride, padding,
                                                 output_padding, groups, dilation, num_groups,
                                                 gn_weight, gn_bias, eps);
  }
  const at::ScalarType low = at::autocast::get_autocast_dtype(kDevice);
  const at::Tensor conv_output =
      at::conv_transpose3d(cast(input, low), cast(weight, low), cast(conv_bias, low), stride,
                           padding, output_padding, groups, dilation);
  return api::relu_group_norm(conv_output.to(at::kFloat), num_groups, cast(gn_weight, at::kFloat),
                              cast(gn_bias, at::kFloat), eps)
      .to(group_norm_result_dtype(kDevice, low));
}

template <c10::DeviceType kDevice>
at::Tensor conv3d_group_norm_mean_autocast(const at::Tensor& input, const at::Tensor& weight,
                                           const OptTensor& conv_bias, at::IntArrayRef stride,
                                           at::IntArrayRef padding, at::IntArrayRef dilation,
                                           int64_t groups, int64_t num_groups,
                                           const OptTensor& gn_weight, const OptTensor& gn_bias,
                                           double eps) {
  const NoAutocast<kDevice> no_autocast;
  if (!is_low_or_float(input)) {
    return api::conv3d_group_norm_mean(input, weight, conv_bias, stride, padding, dilation, groups,
                                       num_groups, gn_weight, gn_bias, eps);
  }
  const at::ScalarType low = at::autocast::get_autocast_dtype(kDevice);
  const at::Tensor conv_output = at::conv3d(
      cast(input, low), cast(weight, low), cast(conv_bias, low), stride, padding, dilation, groups);
  return api::group_norm_mean(conv_output.to(at::kFloat), num_groups, cast(gn_weight, at::kFloat),
                              cast(gn_bias, at::kFloat), eps)
      .to(group_norm_result_dtype(kDevice, low));
}

template <c10::DeviceType kDevice>
void register_autocast(torch::Library& m) {
  m.impl("relu_group_norm", TORCH_FN(relu_group_norm_autocast<kDevice>));
  m.impl("group_norm_mean", TORCH_FN(group_norm_mean_autocast<kDevice>));
  m.impl("conv_transpose3d_relu_group_norm",
         TORCH_FN(conv_transpose3d_relu_group_norm_autocast<kDevice>));
  m.impl("conv3d_group_norm_mean", TORCH_FN(conv3d_group_norm_mean_autocast<kDevice>));
}

}  // namespace

TORCH_LIBRARY_IMPL(fused, AutocastCUDA, m) { register_autocast<c10::DeviceType::CUDA>(m); }
TORCH_LIBRARY_IMPL(fused, AutocastCPU, m) { register_autocast<c10::DeviceType::CPU>(m); }

}  // namespace fused_ops
