// CUDA host wrappers of fused::group_norm_mean: the same argument checks, layouts and output
// conventions as the CPU kernels (group_norm_mean_cpu.cpp), then the launchers of
// group_norm_mean_kernels.cu on the current stream. Inputs are made contiguous (which also
// covers other strided inputs), except that the forward reads a dense channels-last input
// (what conv3d_group_norm_mean's NDHWC convolution writes) as it is, with the kernels of
// group_norm_mean_channels_last_kernels.cu; outputs are contiguous.
#include "group_norm_mean.h"

#include "checks.h"
#include "cuda_host_utils.h"
#include "group_norm_mean_channels_last_kernels.h"
#include "group_norm_mean_kernels.h"
#include "tensor_utils.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace fused_ops {
namespace {

constexpr const char* kForwardName = "fused::group_norm_mean";
constexpr const char* kBackwardName = "fused::group_norm_mean (backward)";

// Whether the forward reads `input` in place as (N, spatial, C): dense channels-last (and not
// also contiguous, which the (N, C, HxW) kernels read directly), with C and the alignment
// the channels-last kernels handle.
bool read_as_channels_last(const at::Tensor& input) {
  if (input.is_contiguous()) {
    return false;
  }
  const bool dense_channels_last =
      (input.dim() == 5 && input.is_contiguous(at::MemoryFormat::ChannelsLast3d)) ||
      (input.dim() == 4 && input.is_contiguous(at::MemoryFormat::ChannelsLast));
  return dense_channels_last &&
         gpu::group_norm_mean_channels_last_supported(input.size(1), input.element_size()) &&
         reinterpret_cast<uintptr_t>(input.const_data_ptr()) % 16 == 0;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_norm_mean_forward_cuda(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps) {
  const GroupNormShape s = check_group_norm_args(kForwardName, input, num_groups, weight, bias, eps);
  check_cuda_input(kForwardName, input);
  const c10::cuda::CUDAGuard device_guard(input.device());
  const bool channels_last = read_as_channels_last(input);
  const at::Tensor x = channels_last ? input : input.contiguous();
  const at::Tensor w = contiguous_or_undefined(weight);
  const at::Tensor b = contiguous_or_undefined(bias);
  at::Tensor out = at::empty({s.N}, x.options());
  at::Tensor mean = empty_stats(x, s.N, s.G);
  at::Tensor rstd = empty_stats(x, s.N, s.G);
  at::Tensor channel_mean = empty_stats(x, s.N, s.C);
  if (x.numel() == 0) {
    return {out, mean, rstd, channel_mean};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), kForwardName, [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    using cuda_t = typename CudaScalar<scalar_t>::type;
    if (channels_last) {
      const at::Tensor workspace = workspace_like(
          x, gpu::group_norm_mean_channels_last_workspace_bytes(s.N, s.C, s.HxW,
                                                                x.element_size()));
      C10_CUDA_CHECK((gpu::launch_group_norm_mean_forward_channels_last<cuda_t, opmath_t>(
          as_cuda(x.const_data_ptr<scalar_t>()), as_cuda(data_or_null<scalar_t>(w)),
          as_cuda(data_or_null<scalar_t>(b)), as_cuda(out.mutable_data_ptr<scalar_t>()),
          mean.mutable_data_ptr<opmath_t>(), rstd.mutable_data_ptr<opmath_t>(),
          channel_mean.mutable_data_ptr<opmath_t>(), workspace.mutable_data_ptr(), s.N, s.C, s.G,
          s.HxW, eps, c10::cuda::getCurrentCUDAStream())));
      return;
    }
    const at::Tensor workspace = workspace_like(
        x, gpu::group_norm_mean_forward_workspace_bytes<cuda_t, opmath_t>(s.N, s.C, s.G, s.HxW));
    C10_CUDA_CHECK((gpu::launch_group_norm_mean_forward<cuda_t, opmath_t>(
        as_cuda(x.const_data_ptr<scalar_t>()), as_cuda(data_or_null<scalar_t>(w)),
        as_cuda(data_or_null<scalar_t>(b)), as_cuda(out.mutable_data_ptr<scalar_t>()),
        mean.mutable_data_ptr<opmath_t>(), rstd.mutable_data_ptr<opmath_t>(),
        channel_mean.mutable_data_ptr<opmath_t>(), s.N, s.C, s.G, s.HxW, eps,
        workspace.mutable_data_ptr(), c10::cuda::getCurrentCUDAStream())));
  });
  return {out, mean, rstd, channel_mean};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_mean_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& channel_mean, int64_t num_groups,
    const c10::optional<at::Tensor>& weight, std::array<bool, 3> output_mask) {
  const GroupNormShape s =
      check_group_norm_args(kBackwardName, input, num_groups, weight, c10::nullopt, 0.0);
  check_group_norm_backward_args(kBackwardName, grad_output, {s.N}, input, s, mean, rstd,
                                 &channel_mean);
  check_cuda_input(kBackwardName, input);
  const c10::cuda::CUDAGuard device_guard(input.device());
  const at::Tensor x = input.contiguous();
  const at::Tensor g = grad_output.contiguous();
  const at::Tensor w = contiguous_or_undefined(weight);
  const at::Tensor mean_c = mean.contiguous();
  const at::Tensor rstd_c = rstd.contiguous();
  const at::Tensor channel_mean_c = channel_mean.contiguous();

  at::Tensor dx, dweight, dbias;
  std::tie(dx, dweight, dbias) = allocate_norm_grads(x, s.C, w.defined(), output_mask);
  if (x.numel() == 0 || (!dx.defined() && !dweight.defined() && !dbias.defined())) {
    return {dx, dweight, dbias};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), kBackwardName, [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    using cuda_t = typename CudaScalar<scalar_t>::type;
    const at::Tensor workspace = workspace_like(
        x, gpu::group_norm_mean_backward_workspace_bytes<cuda_t, opmath_t>(s.N, s.C, s.G, s.HxW));
    C10_CUDA_CHECK((gpu::launch_group_norm_mean_backward<cuda_t, opmath_t>(
        as_cuda(g.const_data_ptr<scalar_t>()), as_cuda(x.const_data_ptr<scalar_t>()),
        mean_c.const_data_ptr<opmath_t>(), rstd_c.const_data_ptr<opmath_t>(),
        channel_mean_c.const_data_ptr<opmath_t>(), as_cuda(data_or_null<scalar_t>(w)),
        as_cuda(mutable_data_or_null<scalar_t>(dx)),
        as_cuda(mutable_data_or_null<scalar_t>(dweight)),
        as_cuda(mutable_data_or_null<scalar_t>(dbias)), s.N, s.C, s.G, s.HxW,
        workspace.mutable_data_ptr(), c10::cuda::getCurrentCUDAStream())));
  });
  return {dx, dweight, dbias};
}

}  // namespace fused_ops
