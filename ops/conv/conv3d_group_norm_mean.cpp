#include "conv/conv3d_group_norm_mean.h"

#include "common/checks.h"
#include "common/run_kernel.h"
#include "common/tensor_utils.h"
#include "conv/conv_kernels.h"
#include "conv/conv_stage.h"
#include "norm/group_norm_mean.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

namespace fused_ops {
namespace conv {
namespace {

constexpr const char* kName = "fused::conv3d_group_norm_mean";
constexpr const char* kBackwardName = "fused::conv3d_group_norm_mean (backward)";

// The one-pass kernels' parameters of a checked call (data pointers unset).
Conv3dGroupNormMeanParams onepass_params(const at::Tensor& input, const at::Tensor& weight,
                                         const Conv3dParams& p, const ConvGroupNormShapes& shapes,
                                         double eps) {
  Conv3dGroupNormMeanParams params{};
  params.dtype = scalar_kind(input.scalar_type());
  Conv3dShape& s = params.conv;
  s.N = input.size(0);
  s.C_in = input.size(1);
  s.D = input.size(2);
  s.H = input.size(3);
  s.W = input.size(4);
  s.C_out = weight.size(0);
  s.kD = weight.size(2);
  s.kH = weight.size(3);
  s.kW = weight.size(4);
  s.Do = shapes.conv_output[2].expect_int();
  s.Ho = shapes.conv_output[3].expect_int();
  s.Wo = shapes.conv_output[4].expect_int();
  for (int i = 0; i < 3; ++i) {
    s.stride[i] = p.stride[i];
    s.padding[i] = p.padding[i];
    s.dilation[i] = p.dilation[i];
  }
  s.groups = p.groups;
  params.num_groups = shapes.group_norm.G;
  params.eps = eps;
  return params;
}

// The one-pass kernels, when a call without autograd runs them (a non-empty CUDA problem in
// their family on its device: conv3d_group_norm_mean_onepass_plan.cpp), else null.
const OnePassCudaKernel* onepass_kernel(const at::Tensor& input,
                                        const Conv3dGroupNormMeanParams& params) {
  const OnePassCudaKernel* kernel = FUSED_OPS_CUDA_KERNEL(conv3d_group_norm_mean_onepass_cuda);
  if (kernel == nullptr || !input.is_cuda() || input.numel() == 0) {
    return nullptr;
  }
  const c10::DeviceGuard device_guard(input.device());
  return kernel->supported(params) ? kernel : nullptr;
}

// The one-pass forward: (output, mean, rstd, channel_mean), the convolution's output never
// written.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> onepass_forward(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    const c10::optional<at::Tensor>& gn_weight, const c10::optional<at::Tensor>& gn_bias,
    const OnePassCudaKernel& kernel, Conv3dGroupNormMeanParams params) {
  const int64_t N = params.conv.N, C = params.conv.C_out, G = params.num_groups;
  at::Tensor out = at::empty({N}, input.options());
  at::Tensor mean = empty_stats(input, N, G);
  at::Tensor rstd = empty_stats(input, N, G);
  at::Tensor channel_mean = empty_stats(input, N, C);
  const at::Tensor x = input.contiguous();
  const at::Tensor w = weight.contiguous();
  const at::Tensor cb = contiguous_or_undefined(conv_bias);
  const at::Tensor gw = contiguous_or_undefined(gn_weight);
  const at::Tensor gb = contiguous_or_undefined(gn_bias);
  params.x = x.const_data_ptr();
  params.weight = w.const_data_ptr();
  params.conv_bias = data_or_null(cb);
  params.gn_weight = data_or_null(gw);
  params.gn_bias = data_or_null(gb);
  params.out = out.mutable_data_ptr();
  params.mean = mean.mutable_data_ptr();
  params.rstd = rstd.mutable_data_ptr();
  params.channel_mean = channel_mean.mutable_data_ptr();
  run_cuda_kernel(kName, x, params, kernel.kernel);
  return {out, mean, rstd, channel_mean};
}

// The forward through ATen's convolution (the conv output saved for backward), for checked
// arguments: (output, conv_output, mean, rstd, channel_mean).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward_prechecked(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    const Conv3dParams& params, const ConvGroupNormShapes& shapes,
    const c10::optional<at::Tensor>& gn_weight, const c10::optional<at::Tensor>& gn_bias,
    double eps) {
  // The GroupNorm + mean kernels read a channels-last convolution output in place.
  const at::Tensor conv_output =
      input.is_meta() ? empty_conv_output(input, shapes.conv_output)
                      : run_conv3d(input, weight, conv_bias, params, ConvConsumer::kGroupNormMean);
  auto [output, mean, rstd, channel_mean] = norm::group_norm_mean_forward_prechecked(
      conv_output, shapes.group_norm, gn_weight, gn_bias, eps);
  return {output, conv_output, mean, rstd, channel_mean};
}

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
  return forward_prechecked(input, weight, conv_bias, params, shapes, gn_weight, gn_bias, eps);
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
  return conv_group_norm_backward(kBackwardName, input, weight, conv_output, has_conv_bias, params,
                                  output_mask, [&](std::array<bool, 3> mask) {
                                    return norm::group_norm_mean_backward(
                                        grad_output, conv_output, mean, rstd, channel_mean,
                                        num_groups, gn_weight, mask);
                                  });
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
  // A call that autograd records runs the internal forward, which saves the conv output.
  const auto requires_grad = [](const c10::optional<at::Tensor>& t) {
    return t.has_value() && t->defined() && t->requires_grad();
  };
  const bool records_grad =
      at::GradMode::is_enabled() &&
      (input.requires_grad() || weight.requires_grad() || requires_grad(conv_bias) ||
       requires_grad(gn_weight) || requires_grad(gn_bias));
  if (!records_grad && !input.is_meta() &&
      onepass_kernel(input, onepass_params(input, weight, params, shapes, eps)) != nullptr) {
    return "onepass";
  }
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
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, /*output_padding=*/{},
                                                 dilation, groups, /*transposed=*/false);
  const ConvGroupNormShapes shapes = check_conv_group_norm_args(
      kName, input, weight, conv_bias, params, num_groups, gn_weight, gn_bias, eps);
  // (Below autograd: this kernel runs when no gradient is needed, so nothing is saved and the
  // one-pass kernels can run where they apply.)
  if (!input.is_meta()) {
    const Conv3dGroupNormMeanParams onepass = onepass_params(input, weight, params, shapes, eps);
    if (const OnePassCudaKernel* kernel = onepass_kernel(input, onepass)) {
      return std::get<0>(
          onepass_forward(input, weight, conv_bias, gn_weight, gn_bias, *kernel, onepass));
    }
  }
  return std::get<0>(
      forward_prechecked(input, weight, conv_bias, params, shapes, gn_weight, gn_bias, eps));
}

}  // namespace conv
}  // namespace fused_ops
