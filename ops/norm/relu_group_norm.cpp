#include "norm/relu_group_norm.h"

#include "common/checks.h"
#include "common/run_kernel.h"
#include "common/tensor_utils.h"
#include "norm/norm_host.h"
#include "norm/norm_kernels.h"

#include <vector>

namespace fused_ops {
namespace norm {
namespace {

constexpr const char* kForwardName = "fused::relu_group_norm";
constexpr const char* kBackwardName = "fused::relu_group_norm (backward)";

constexpr DeviceKernels<ReluGroupNormForwardParams> kForwardKernels{
    relu_group_norm_forward_cpu, FUSED_OPS_CUDA_KERNEL(relu_group_norm_forward_cuda)};
constexpr DeviceKernels<ReluGroupNormBackwardParams> kBackwardKernels{
    relu_group_norm_backward_cpu, FUSED_OPS_CUDA_KERNEL(relu_group_norm_backward_cuda)};

// The backward kernels' params over t's tensors (grad_input's layout and rounding and the
// optional outputs: the caller's).
ReluGroupNormBackwardParams backward_params(const NormBackwardTensors& t,
                                            const SymGroupNormShape& s) {
  ReluGroupNormBackwardParams params{};
  params.dtype = scalar_kind(t.input.scalar_type());
  params.sizes = concrete(s);
  params.dy = t.grad_output.const_data_ptr();
  params.x = t.input.const_data_ptr();
  params.mean = t.mean.const_data_ptr();
  params.rstd = t.rstd.const_data_ptr();
  params.weight = data_or_null(t.weight);
  params.dx = mutable_data_or_null(t.grad_input);
  params.dweight = mutable_data_or_null(t.grad_weight);
  params.dbias = mutable_data_or_null(t.grad_bias);
  return params;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_forward(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps) {
  return relu_group_norm_forward_prechecked(
      input, check_group_norm_args(kForwardName, input, num_groups, weight, bias, eps), weight,
      bias, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_forward_prechecked(
    const at::Tensor& input, const SymGroupNormShape& s, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps, const at::Tensor& channel_moments,
    const at::Tensor& input_bias, const at::Tensor& input_copy) {
  at::Tensor y = empty_output_like(input);
  at::Tensor mean = empty_stats(input, s.N, s.G);
  at::Tensor rstd = empty_stats(input, s.N, s.G);
  if (input.is_meta() || input.numel() == 0) {
    return {y, mean, rstd};
  }
  const bool channels_last =
      reads_channels_last(input, input.device(), /*cpu_kernel_reads_it=*/false);
  const at::Tensor x = channels_last ? input : input.contiguous();
  const at::Tensor w = contiguous_or_undefined(weight);
  const at::Tensor b = contiguous_or_undefined(bias);
  // The moments given serve the channels-last CUDA kernel only (the conv stage gives them
  // where that one runs: conv_emits_relu_moments).
  const bool given_moments = channel_moments.defined() && channels_last && input.is_cuda();
  if (given_moments) {
    TORCH_INTERNAL_ASSERT(channel_moments.is_contiguous() &&
                          channel_moments.scalar_type() == at::kDouble &&
                          channel_moments.numel() == 2 * input.size(0) * input.size(1));
  }
  // The input bias and the input's copy only where the channels-last CUDA kernel runs (the
  // caller asked relu_group_norm_runs_channels_last_cuda); the bias with no moments given (they
  // would be relu(input)'s).
  if (input_bias.defined()) {
    TORCH_INTERNAL_ASSERT(
        channels_last && input.is_cuda() && !given_moments && input_bias.is_contiguous() &&
        input_bias.scalar_type() == input.scalar_type() && input_bias.numel() == input.size(1));
  }
  if (input_copy.defined()) {
    TORCH_INTERNAL_ASSERT(channels_last && input.is_cuda() && input_copy.is_contiguous() &&
                          input_copy.scalar_type() == input.scalar_type() &&
                          input_copy.sizes() == input.sizes() &&
                          input_copy.device() == input.device());
  }
  const ReluGroupNormForwardParams params{
      scalar_kind(x.scalar_type()),
      concrete(s),
      eps,
      channels_last,
      x.const_data_ptr(),
      data_or_null(w),
      data_or_null(b),
      y.mutable_data_ptr(),
      mean.mutable_data_ptr(),
      rstd.mutable_data_ptr(),
      given_moments ? static_cast<const Moments*>(channel_moments.const_data_ptr()) : nullptr,
      data_or_null(input_bias),
      mutable_data_or_null(input_copy)};
  run_kernel(kForwardName, x, params, kForwardKernels);
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 3> output_mask) {
  return relu_group_norm_backward_in_layout(grad_output, input, mean, rstd, num_groups, weight,
                                            output_mask, /*grad_input_channels_last=*/false,
                                            /*grad_input_tf32_rounded=*/false);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward_in_layout(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 3> output_mask, bool grad_input_channels_last, bool grad_input_tf32_rounded,
    at::Tensor* grad_input_channel_sums) {
  const SymGroupNormShape s =
      check_group_norm_args(kBackwardName, input, num_groups, weight, c10::nullopt, 0.0);
  check_group_norm_backward_args(kBackwardName, grad_output, input.sym_sizes(), input, s, mean,
                                 rstd);
  TORCH_INTERNAL_ASSERT(grad_input_channel_sums == nullptr || output_mask[0],
                        "grad_input's channel sums need grad_input");
  const bool dx_channels_last =
      grad_input_channels_last && input.dim() == 5 && (input.is_cuda() || input.is_meta());
  const NormBackwardTensors t = prepare_norm_backward(
      grad_output, input, mean, rstd, weight, s, output_mask,
      dx_channels_last ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::Contiguous);
  // The channel sums from the kernel that writes grad_input channels-last (before its rounding);
  // elsewhere ATen's sum of grad_input, below.
  const bool channel_sums_in_kernel = grad_input_channel_sums != nullptr && dx_channels_last;
  at::Tensor channel_sums;
  if (channel_sums_in_kernel) {
    channel_sums = t.run_kernel ? at::empty_symint({input.sym_size(1)}, input.options())
                                : at::zeros_symint({input.sym_size(1)}, input.options());
  }
  if (t.run_kernel) {
    ReluGroupNormBackwardParams params = backward_params(t, s);
    params.dx_channels_last = dx_channels_last;
    params.dx_tf32_rounded = dx_channels_last && grad_input_tf32_rounded;
    params.dx_channel_sums = mutable_data_or_null(channel_sums);
    run_kernel(kBackwardName, t.input, params, kBackwardKernels);
  }
  if (grad_input_channel_sums != nullptr) {
    if (channel_sums_in_kernel) {
      *grad_input_channel_sums = channel_sums;
    } else {
      std::vector<int64_t> reduced{0};
      for (int64_t d = 2; d < input.dim(); ++d) {
        reduced.push_back(d);
      }
      *grad_input_channel_sums = t.grad_input.sum(reduced);
    }
  }
  return t.grads();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward_coefficients(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 2> affine_mask, at::Tensor* grad_input_channel_sums) {
  const SymGroupNormShape s =
      check_group_norm_args(kBackwardName, input, num_groups, weight, c10::nullopt, 0.0);
  check_group_norm_backward_args(kBackwardName, grad_output, input.sym_sizes(), input, s, mean,
                                 rstd);
  TORCH_INTERNAL_ASSERT(input.is_cuda() && input.scalar_type() == at::kFloat && input.numel() > 0,
                        "the coefficients' backward runs on non-empty CUDA float32 tensors");
  NormBackwardTensors t = prepare_norm_backward(grad_output, input, mean, rstd, weight, s,
                                                {false, affine_mask[0], affine_mask[1]});
  t.grad_output = grad_output.contiguous();  // (prepare_norm_backward's only where it runs)
  t.input = input.contiguous();
  t.mean = mean.contiguous();
  t.rstd = rstd.contiguous();
  const at::Tensor coefficients = at::empty({input.size(0) * input.size(1), 3}, input.options());
  at::Tensor channel_sums;
  if (grad_input_channel_sums != nullptr) {
    channel_sums = at::empty({input.size(1)}, input.options());
  }
  ReluGroupNormBackwardParams params = backward_params(t, s);  // (grad_input undefined: no dx)
  params.dx_channel_sums = mutable_data_or_null(channel_sums);
  params.dx_coefficients = coefficients.mutable_data_ptr();
  run_kernel(kBackwardName, t.input, params, kBackwardKernels);
  if (grad_input_channel_sums != nullptr) {
    *grad_input_channel_sums = channel_sums;
  }
  return {coefficients, t.grad_weight, t.grad_bias};
}

bool relu_group_norm_runs_channels_last_cuda(const at::Tensor& input) {
  return input.is_cuda() &&
         reads_channels_last(input, input.device(), /*cpu_kernel_reads_it=*/false);
}

const char* relu_group_norm_kernel_name(const at::Tensor& input, c10::Device device) {
  return reads_channels_last(input, device, /*cpu_kernel_reads_it=*/false)
             ? "relu_group_norm_channels_last"
             : "relu_group_norm";
}

std::string relu_group_norm_path(const at::Tensor& input, int64_t num_groups,
                                 const c10::optional<at::Tensor>& weight,
                                 const c10::optional<at::Tensor>& bias, double eps) {
  check_group_norm_args(kForwardName, input, num_groups, weight, bias, eps);
  return relu_group_norm_kernel_name(input, input.device());
}

at::Tensor relu_group_norm(const at::Tensor& input, int64_t num_groups,
                           const c10::optional<at::Tensor>& weight,
                           const c10::optional<at::Tensor>& bias, double eps) {
  return std::get<0>(relu_group_norm_forward(input, num_groups, weight, bias, eps));
}

}  // namespace norm
}  // namespace fused_ops
