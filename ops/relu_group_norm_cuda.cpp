// CUDA host wrappers of fused::relu_group_norm: the same argument checks, layouts and output
// conventions as the CPU kernels (relu_group_norm_cpu.cpp), then the launchers of
// relu_group_norm_kernels.cu on the current stream. Inputs are made contiguous (which also
// covers channels_last and other strided inputs); outputs are contiguous.
#include "relu_group_norm.h"

#include "checks.h"
#include "cuda_host_utils.h"
#include "relu_group_norm_kernels.h"
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

constexpr const char* kForwardName = "fused::relu_group_norm";
constexpr const char* kBackwardName = "fused::relu_group_norm (backward)";

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_forward_cuda(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps) {
  const GroupNormShape s = check_group_norm_args(kForwardName, input, num_groups, weight, bias, eps);
  check_cuda_input(kForwardName, input);
  const c10::cuda::CUDAGuard device_guard(input.device());
  const at::Tensor x = input.contiguous();
  const at::Tensor w = contiguous_or_undefined(weight);
  const at::Tensor b = contiguous_or_undefined(bias);
  at::Tensor y = at::empty(x.sizes(), x.options());
  at::Tensor mean = empty_stats(x, s.N, s.G);
  at::Tensor rstd = empty_stats(x, s.N, s.G);
  if (x.numel() == 0) {
    return {y, mean, rstd};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), kForwardName, [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    using cuda_t = typename CudaScalar<scalar_t>::type;
    const at::Tensor workspace = workspace_like(
        x, gpu::relu_group_norm_forward_workspace_bytes<cuda_t, opmath_t>(s.N, s.C, s.G, s.HxW));
    C10_CUDA_CHECK((gpu::launch_relu_group_norm_forward<cuda_t, opmath_t>(
        as_cuda(x.const_data_ptr<scalar_t>()), as_cuda(data_or_null<scalar_t>(w)),
        as_cuda(data_or_null<scalar_t>(b)), as_cuda(y.mutable_data_ptr<scalar_t>()),
        mean.mutable_data_ptr<opmath_t>(), rstd.mutable_data_ptr<opmath_t>(), s.N, s.C, s.G,
        s.HxW, eps, workspace.mutable_data_ptr(), c10::cuda::getCurrentCUDAStream())));
  });
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 3> output_mask) {
  const GroupNormShape s =
      check_group_norm_args(kBackwardName, input, num_groups, weight, c10::nullopt, 0.0);
  check_group_norm_backward_args(kBackwardName, grad_output, input.sizes(), input, s, mean, rstd);
  check_cuda_input(kBackwardName, input);
  const c10::cuda::CUDAGuard device_guard(input.device());
  const at::Tensor x = input.contiguous();
  const at::Tensor dy = grad_output.contiguous();
  const at::Tensor w = contiguous_or_undefined(weight);
  const at::Tensor mean_c = mean.contiguous();
  const at::Tensor rstd_c = rstd.contiguous();

  at::Tensor dx, dweight, dbias;
  std::tie(dx, dweight, dbias) = allocate_norm_grads(x, s.C, w.defined(), output_mask);
  if (x.numel() == 0 || (!dx.defined() && !dweight.defined() && !dbias.defined())) {
    return {dx, dweight, dbias};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), kBackwardName, [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    using cuda_t = typename CudaScalar<scalar_t>::type;
    const at::Tensor workspace = workspace_like(
        x, gpu::relu_group_norm_backward_workspace_bytes<cuda_t, opmath_t>(s.N, s.C, s.G, s.HxW));
    C10_CUDA_CHECK((gpu::launch_relu_group_norm_backward<cuda_t, opmath_t>(
        as_cuda(dy.const_data_ptr<scalar_t>()), as_cuda(x.const_data_ptr<scalar_t>()),
        mean_c.const_data_ptr<opmath_t>(), rstd_c.const_data_ptr<opmath_t>(),
        as_cuda(data_or_null<scalar_t>(w)), as_cuda(mutable_data_or_null<scalar_t>(dx)),
        as_cuda(mutable_data_or_null<scalar_t>(dweight)),
        as_cuda(mutable_data_or_null<scalar_t>(dbias)), s.N, s.C, s.G, s.HxW,
        workspace.mutable_data_ptr(), c10::cuda::getCurrentCUDAStream())));
  });
  return {dx, dweight, dbias};
}

}  // namespace fused_ops
