#include "norm/group_norm_mean.h"

#include "common/checks.h"
#include "common/run_kernel.h"
#include "common/tensor_utils.h"
#include "norm/norm_host.h"
#include "norm/norm_kernels.h"

#include <cstdint>

namespace fused_ops {
namespace norm {
namespace {

constexpr const char* kForwardName = "fused::group_norm_mean";
constexpr const char* kBackwardName = "fused::group_norm_mean (backward)";

constexpr DeviceKernels<GroupNormMeanForwardParams> kForwardKernels{
    group_norm_mean_forward_cpu, FUSED_OPS_CUDA_KERNEL(group_norm_mean_forward_cuda)};
constexpr DeviceKernels<GroupNormMeanBackwardParams> kBackwardKernels{
    group_norm_mean_backward_cpu, FUSED_OPS_CUDA_KERNEL(group_norm_mean_backward_cuda)};

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_norm_mean_forward(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps) {
  return group_norm_mean_forward_prechecked(
      input, check_group_norm_args(kForwardName, input, num_groups, weight, bias, eps), weight,
      bias, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_norm_mean_forward_prechecked(
    const at::Tensor& input, const SymGroupNormShape& s, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps) {
  at::Tensor out = at::empty_symint({s.N}, input.options());
  at::Tensor mean = empty_stats(input, s.N, s.G);
  at::Tensor rstd = empty_stats(input, s.N, s.G);
  at::Tensor channel_mean = empty_stats(input, s.N, s.C);
  if (input.is_meta() || input.numel() == 0) {
    return {out, mean, rstd, channel_mean};
  }
  const bool channels_last =
      reads_channels_last(input, input.device(), /*cpu_kernel_reads_it=*/true);
  const at::Tensor x = channels_last ? input : input.contiguous();
  const at::Tensor w = contiguous_or_undefined(weight);
  const at::Tensor b = contiguous_or_undefined(bias);
  const GroupNormMeanForwardParams params{scalar_kind(x.scalar_type()),
                                          concrete(s),
                                          eps,
                                          channels_last,
                                          x.const_data_ptr(),
                                          data_or_null(w),
                                          data_or_null(b),
                                          out.mutable_data_ptr(),
                                          mean.mutable_data_ptr(),
                                          rstd.mutable_data_ptr(),
                                          channel_mean.mutable_data_ptr()};
  run_kernel(kForwardName, x, params, kForwardKernels);
  return {out, mean, rstd, channel_mean};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_mean_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& channel_mean, int64_t num_groups,
    const c10::optional<at::Tensor>& weight, std::array<bool, 3> output_mask) {
  const SymGroupNormShape s =
      check_group_norm_args(kBackwardName, input, num_groups, weight, c10::nullopt, 0.0);
  check_group_norm_backward_args(kBackwardName, grad_output, {s.N}, input, s, mean, rstd,
                                 &channel_mean);
  const NormBackwardTensors t =
      prepare_norm_backward(grad_output, input, mean, rstd, weight, s, output_mask);
  if (t.run_kernel) {
    const at::Tensor channel_mean_c = channel_mean.contiguous();
    const GroupNormMeanBackwardParams params{scalar_kind(t.input.scalar_type()),
                                             concrete(s),
                                             t.grad_output.const_data_ptr(),
                                             t.input.const_data_ptr(),
                                             t.mean.const_data_ptr(),
                                             t.rstd.const_data_ptr(),
                                             channel_mean_c.const_data_ptr(),
                                             data_or_null(t.weight),
                                             mutable_data_or_null(t.grad_input),
                                             mutable_data_or_null(t.grad_weight),
                                             mutable_data_or_null(t.grad_bias)};
    run_kernel(kBackwardName, t.input, params, kBackwardKernels);
  }
  return t.grads();
}

const char* group_norm_mean_kernel_name(const at::Tensor& input, c10::Device device) {
  return reads_channels_last(input, device, /*cpu_kernel_reads_it=*/true)
             ? "group_norm_mean_channels_last"
             : "group_norm_mean";
}

std::string group_norm_mean_path(const at::Tensor& input, int64_t num_groups,
                                 const c10::optional<at::Tensor>& weight,
                                 const c10::optional<at::Tensor>& bias, double eps) {
  check_group_norm_args(kForwardName, input, num_groups, weight, bias, eps);
  return group_norm_mean_kernel_name(input, input.device());
}

at::Tensor group_norm_mean(const at::Tensor& input, int64_t num_groups,
                           const c10::optional<at::Tensor>& weight,
                           const c10::optional<at::Tensor>& bias, double eps) {
  return std::get<0>(group_norm_mean_forward(input, num_groups, weight, bias, eps));
}

}  // namespace norm
}  // namespace fused_ops
