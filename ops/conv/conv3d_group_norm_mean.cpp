#include "conv/conv3d_group_norm_mean.h"

#include "common/checks.h"
#include "common/run_kernel.h"
#include "common/tensor_utils.h"
#include "conv/conv_kernels.h"
#include "conv/conv_stage.h"
#include "norm/group_norm_mean.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

namespace fused_ops {
namespace conv {
namespace {

constexpr const char* kName = "fused::conv3d_group_norm_mean";
constexpr const char* kBackwardName = "fused::conv3d_group_norm_mean (backward)";
constexpr const char* kOnePassName = "fused::_conv3d_group_norm_mean_onepass_forward";
constexpr const char* kOnePassBackwardName = "fused::_conv3d_group_norm_mean_onepass_backward";

bool has_concrete_sizes(const at::Tensor& t) {
  return c10::asIntArrayRefSlowOpt(t.sym_sizes()).has_value();
}

// The one-pass kernels' parameters of a checked call (data pointers unset).
Conv3dGroupNormMeanParams onepass_params(const at::Tensor& input, const at::Tensor& weight,
                                         const Conv3dParams& p, const ConvGroupNormShapes& shapes,
                                         double eps) {
  Conv3dGroupNormMeanParams params{};
  params.dtype = scalar_kind(input.scalar_type());
  params.conv = forward_conv3d_shape(input, weight.size(0), weight, p);
  params.num_groups = shapes.group_norm.G;
  params.eps = eps;
  return params;
}

// The one-pass kernels, when a call without autograd runs them (a non-empty CUDA problem in
// their family on its device: conv3d_group_norm_mean_onepass_plan.cpp), else null.
const OnePassCudaKernel* onepass_kernel(const at::Tensor& input,
                                        const Conv3dGroupNormMeanParams& params) {
  const OnePassCudaKernel* kernel = FUSED_OPS_CUDA_KERNEL(conv3d_group_norm_mean_onepass_cuda);
  if (kernel == nullptr || !input.is_cuda() || input.is_meta() || !has_concrete_sizes(input) ||
      input.numel() == 0) {
    return nullptr;
  }
  const c10::DeviceGuard device_guard(input.device());
  return kernel->supported(params) ? kernel : nullptr;
}

}  // namespace

std::string conv3d_onepass_products_kernel(const at::Tensor& input) {
  const OnePassCudaKernel* kernel = FUSED_OPS_CUDA_KERNEL(conv3d_group_norm_mean_onepass_cuda);
  if (kernel == nullptr || !input.is_cuda()) {
    return "";
  }
  const c10::DeviceGuard device_guard(input.device());
  return kernel->products_kernel();
}

namespace {

// The training forward's x sums for the backward (conv_kernels.h, input_sums): float64 of shape
// (N, C_in, kD * kH * kW + 1) for a float32 input; for other dtypes empty, shape (0,) (the
// backward sums x itself).
std::vector<c10::SymInt> input_sums_shape(const at::Tensor& input, const at::Tensor& weight) {
  if (input.scalar_type() != at::kFloat) {
    return {0};
  }
  return {input.sym_size(0), input.sym_size(1),
          weight.sym_size(2) * weight.sym_size(3) * weight.sym_size(4) + 1};
}

at::Tensor empty_input_sums(const at::Tensor& input, const at::Tensor& weight) {
  return at::empty_symint(input_sums_shape(input, weight), input.options().dtype(at::kDouble));
}

// The one-pass forward: (output, mean, rstd, channel_mean, input_sums), the convolution's output
// never written; input_sums (empty_input_sums) only where `saves_input_sums`, else undefined.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> onepass_forward(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    const c10::optional<at::Tensor>& gn_weight, const c10::optional<at::Tensor>& gn_bias,
    const OnePassCudaKernel& kernel, Conv3dGroupNormMeanParams params, bool saves_input_sums) {
  const int64_t N = params.conv.N, C = params.conv.C_out, G = params.num_groups;
  at::Tensor out = at::empty({N}, input.options());
  at::Tensor mean = empty_stats(input, N, G);
  at::Tensor rstd = empty_stats(input, N, G);
  at::Tensor channel_mean = empty_stats(input, N, C);
  at::Tensor input_sums = saves_input_sums ? empty_input_sums(input, weight) : at::Tensor();
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
  params.input_sums = input_sums.defined() && input_sums.numel() > 0
                          ? static_cast<double*>(input_sums.mutable_data_ptr())
                          : nullptr;
  run_cuda_kernel(kName, x, params, kernel.kernel);
  return {out, mean, rstd, channel_mean, input_sums};
}

// Checks the backward's input_sums against the forward's (input_sums_shape) where given.
void check_input_sums(const char* op, const c10::optional<at::Tensor>& input_sums,
                      const at::Tensor& input, const at::Tensor& weight) {
  if (!input_sums.has_value() || !input_sums->defined()) {
    return;
  }
  const at::Tensor& t = *input_sums;
  const std::vector<c10::SymInt> expected = input_sums_shape(input, weight);
  TORCH_CHECK(t.sym_sizes() == c10::SymIntArrayRef(expected), op, ": expected input_sums of shape ",
              c10::SymIntArrayRef(expected), " (the forward's for this input and weight), got ",
              t.sym_sizes());
  TORCH_CHECK(t.scalar_type() == at::kDouble, op, ": expected input_sums of dtype ", at::kDouble,
              ", got ", t.scalar_type());
  TORCH_CHECK(t.device() == input.device(), op, ": expected input_sums on device ", input.device(),
              ", got ", t.device());
}

// The forward of a training step: the inference one's kernels, with exact channel means (the
// backward's dy is alpha * (y - channel mean) + gamma: an error in the channel mean is a
// constant error in dy that sums over every position; measured on an H100, the tensor-core
// moments' own mean gave the weight gradient 2.6x eager's error).
Conv3dGroupNormMeanParams training_forward(Conv3dGroupNormMeanParams params) {
  params.exact_channel_means = true;
  return params;
}

// The one-pass backward's parameters for the forward's (data pointers unset).
Conv3dGroupNormMeanBackwardParams onepass_backward_params(
    const Conv3dGroupNormMeanParams& forward) {
  Conv3dGroupNormMeanBackwardParams params{};
  params.dtype = forward.dtype;
  params.conv = forward.conv;
  params.num_groups = forward.num_groups;
  return params;
}

// Whether a call that autograd records trains through the one-pass kernels: a non-empty CUDA
// problem with concrete sizes (not a trace with symbolic ones) in the family of both the
// one-pass forward and backward on its device.
bool trains_onepass(const at::Tensor& input, const at::Tensor& weight,
                    const Conv3dGroupNormMeanParams& params) {
  const OnePassBackwardCudaKernel* backward =
      FUSED_OPS_CUDA_KERNEL(conv3d_group_norm_mean_onepass_backward_cuda);
  if (backward == nullptr || onepass_kernel(input, training_forward(params)) == nullptr) {
    return false;
  }
  const c10::DeviceGuard device_guard(input.device());
  return backward->supported(onepass_backward_params(params));
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

// The CPU forward without autograd by `chunks` chunks of the batch (cpu_batch_chunks,
// conv_stage.cpp): only the means leave the call, so the conv output never exists whole.
at::Tensor cpu_forward_by_chunks(const at::Tensor& input, const at::Tensor& weight,
                                 const c10::optional<at::Tensor>& conv_bias,
                                 const Conv3dParams& params, const ConvGroupNormShapes& shapes,
                                 const c10::optional<at::Tensor>& gn_weight,
                                 const c10::optional<at::Tensor>& gn_bias, double eps,
                                 int64_t chunks) {
  at::Tensor out = at::empty({input.size(0)}, input.options());
  SymGroupNormShape s = shapes.group_norm;
  for (int64_t i = 0; i < chunks; ++i) {
    const BatchSlice slice = batch_chunk(input.size(0), chunks, i);
    const at::Tensor conv_output =
        run_conv3d(slice.of(input), weight, conv_bias, params, ConvConsumer::kGroupNormMean);
    s.N = slice.size;
    slice.of(out).copy_(std::get<0>(
        norm::group_norm_mean_forward_prechecked(conv_output, s, gn_weight, gn_bias, eps)));
  }
  return out;
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
                                  output_mask, cpu_batch_chunks(input, conv_output.sym_sizes()),
                                  [&](std::array<bool, 3> mask, const BatchSlice& slice) {
                                    return norm::group_norm_mean_backward(
                                        slice.of(grad_output), slice.of(conv_output),
                                        slice.of(mean), slice.of(rstd), slice.of(channel_mean),
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
  const bool records_grad = autograd_records(input, weight, conv_bias, gn_weight, gn_bias);
  if (!input.is_meta() && has_concrete_sizes(input)) {
    const Conv3dGroupNormMeanParams onepass = onepass_params(input, weight, params, shapes, eps);
    if (records_grad ? trains_onepass(input, weight, onepass)
                     : onepass_kernel(input, onepass) != nullptr) {
      return "onepass";
    }
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
  // (Below autograd: this kernel runs when no gradient is needed, so nothing is saved: the
  // one-pass kernels can run where they apply, and on the CPU the batch by chunks.)
  if (!input.is_meta() && has_concrete_sizes(input)) {
    const Conv3dGroupNormMeanParams onepass = onepass_params(input, weight, params, shapes, eps);
    if (const OnePassCudaKernel* kernel = onepass_kernel(input, onepass)) {
      return std::get<0>(onepass_forward(input, weight, conv_bias, gn_weight, gn_bias, *kernel,
                                         onepass, /*saves_input_sums=*/false));
    }
  }
  if (const int64_t chunks = cpu_batch_chunks(input, shapes.conv_output); chunks > 1) {
    return cpu_forward_by_chunks(input, weight, conv_bias, params, shapes, gn_weight, gn_bias, eps,
                                 chunks);
  }
  return std::get<0>(
      forward_prechecked(input, weight, conv_bias, params, shapes, gn_weight, gn_bias, eps));
}

bool conv3d_group_norm_mean_trains_onepass(const at::Tensor& input, const at::Tensor& weight,
                                           const c10::optional<at::Tensor>& conv_bias,
                                           at::IntArrayRef stride, at::IntArrayRef padding,
                                           at::IntArrayRef dilation, int64_t groups,
                                           int64_t num_groups,
                                           const c10::optional<at::Tensor>& gn_weight,
                                           const c10::optional<at::Tensor>& gn_bias, double eps) {
  if (!input.is_cuda() || input.is_meta() || !has_concrete_sizes(input) ||
      !has_concrete_sizes(weight)) {
    return false;
  }
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, /*output_padding=*/{},
                                                 dilation, groups, /*transposed=*/false);
  const ConvGroupNormShapes shapes = check_conv_group_norm_args(
      kName, input, weight, conv_bias, params, num_groups, gn_weight, gn_bias, eps);
  return trains_onepass(input, weight, onepass_params(input, weight, params, shapes, eps));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv3d_group_norm_mean_onepass_forward(const at::Tensor& input, const at::Tensor& weight,
                                       const c10::optional<at::Tensor>& conv_bias,
                                       at::IntArrayRef stride, at::IntArrayRef padding,
                                       at::IntArrayRef dilation, int64_t groups, int64_t num_groups,
                                       const c10::optional<at::Tensor>& gn_weight,
                                       const c10::optional<at::Tensor>& gn_bias, double eps) {
  const Conv3dParams params = make_conv3d_params(kOnePassName, stride, padding,
                                                 /*output_padding=*/{}, dilation, groups,
                                                 /*transposed=*/false);
  const ConvGroupNormShapes shapes = check_conv_group_norm_args(
      kOnePassName, input, weight, conv_bias, params, num_groups, gn_weight, gn_bias, eps);
  if (input.is_meta()) {
    const c10::SymInt& N = shapes.group_norm.N;
    return {at::empty_symint({N}, input.options()), empty_stats(input, N, shapes.group_norm.G),
            empty_stats(input, N, shapes.group_norm.G), empty_stats(input, N, shapes.group_norm.C),
            empty_input_sums(input, weight)};
  }
  const Conv3dGroupNormMeanParams onepass =
      training_forward(onepass_params(input, weight, params, shapes, eps));
  TORCH_CHECK(trains_onepass(input, weight, onepass), kOnePassName,
              ": expected a non-empty CUDA problem in the one-pass kernels' family (see "
              "fused::_conv3d_group_norm_mean_path), got input of shape ",
              input.sizes(), " on ", input.device(), " and weight of shape ", weight.sizes());
  return onepass_forward(input, weight, conv_bias, gn_weight, gn_bias,
                         *onepass_kernel(input, onepass), onepass, /*saves_input_sums=*/true);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv3d_group_norm_mean_onepass_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    const c10::optional<at::Tensor>& conv_bias, const at::Tensor& mean, const at::Tensor& rstd,
    const at::Tensor& channel_mean, const c10::optional<at::Tensor>& input_sums,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
    int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    std::array<bool, 5> output_mask) {
  const Conv3dParams params = make_conv3d_params(kOnePassBackwardName, stride, padding,
                                                 /*output_padding=*/{}, dilation, groups,
                                                 /*transposed=*/false);
  const ConvGroupNormShapes shapes =
      check_conv_group_norm_args(kOnePassBackwardName, input, weight, conv_bias, params, num_groups,
                                 gn_weight, c10::nullopt, /*eps=*/0.0);
  check_group_norm_backward_args(kOnePassBackwardName, grad_output, {shapes.group_norm.N}, input,
                                 shapes.group_norm, mean, rstd, &channel_mean);
  check_input_sums(kOnePassBackwardName, input_sums, input, weight);
  const bool has_conv_bias = conv_bias.has_value() && conv_bias->defined();
  const bool has_gn_weight = gn_weight.has_value() && gn_weight->defined();
  // (The kernels write every channel of the parameters' gradients.)
  const auto empty_param = [&](bool wanted) {
    return wanted ? at::empty_symint({shapes.group_norm.C}, input.options()) : at::Tensor();
  };
  at::Tensor grad_input =
      output_mask[0] ? at::empty_symint(input.sym_sizes(), input.options()) : at::Tensor();
  at::Tensor grad_weight =
      output_mask[1] ? at::empty_symint(weight.sym_sizes(), weight.options()) : at::Tensor();
  at::Tensor grad_conv_bias = empty_param(output_mask[2] && has_conv_bias);
  at::Tensor grad_gn_weight = empty_param(output_mask[3] && has_gn_weight);
  at::Tensor grad_gn_bias = empty_param(output_mask[4]);
  if (input.is_meta()) {
    return {grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias};
  }
  const Conv3dGroupNormMeanParams forward = onepass_params(input, weight, params, shapes, 0.0);
  TORCH_CHECK(trains_onepass(input, weight, forward), kOnePassBackwardName,
              ": expected a non-empty CUDA problem in the one-pass kernels' family (see "
              "fused::_conv3d_group_norm_mean_path), got input of shape ",
              input.sizes(), " on ", input.device(), " and weight of shape ", weight.sizes());
  Conv3dGroupNormMeanBackwardParams p = onepass_backward_params(forward);
  const at::Tensor go = grad_output.contiguous();
  const at::Tensor x = input.contiguous();
  const at::Tensor w = weight.contiguous();
  const at::Tensor cb = contiguous_or_undefined(conv_bias);
  const at::Tensor gw = contiguous_or_undefined(gn_weight);
  const at::Tensor m = mean.contiguous(), r = rstd.contiguous(), cm = channel_mean.contiguous();
  const at::Tensor sums = contiguous_or_undefined(input_sums);
  p.grad_output = go.const_data_ptr();
  p.x = x.const_data_ptr();
  p.weight = w.const_data_ptr();
  p.conv_bias = data_or_null(cb);
  p.gn_weight = data_or_null(gw);
  p.mean = m.const_data_ptr();
  p.rstd = r.const_data_ptr();
  p.channel_mean = cm.const_data_ptr();
  p.input_sums = sums.defined() && sums.numel() > 0 ? sums.const_data_ptr<double>() : nullptr;
  p.dx = mutable_data_or_null(grad_input);  // (contiguous, as allocated above)
  p.dweight = mutable_data_or_null(grad_weight);
  p.dconv_bias = mutable_data_or_null(grad_conv_bias);
  p.dgn_weight = mutable_data_or_null(grad_gn_weight);
  p.dgn_bias = mutable_data_or_null(grad_gn_bias);
  const OnePassBackwardCudaKernel* backward =
      FUSED_OPS_CUDA_KERNEL(conv3d_group_norm_mean_onepass_backward_cuda);
  run_cuda_kernel(kOnePassBackwardName, x, p, backward->kernel);
  return {grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias};
}

}  // namespace conv
}  // namespace fused_ops
