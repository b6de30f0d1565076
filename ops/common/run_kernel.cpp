#include "common/run_kernel.h"

#ifdef FUSED_OPS_WITH_CUDA
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace fused_ops {
namespace detail {

void run_cuda(const char* op, const at::Tensor& on, c10::function_ref<size_t()> workspace_bytes,
              c10::function_ref<int(void*, void*)> launch) {
#ifdef FUSED_OPS_WITH_CUDA
  const c10::cuda::CUDAGuard device_guard(on.device());
  const at::Tensor workspace =
      at::empty({static_cast<int64_t>(workspace_bytes())}, on.options().dtype(at::kByte));
  const cudaError_t status = static_cast<cudaError_t>(
      launch(workspace.mutable_data_ptr(), c10::cuda::getCurrentCUDAStream().stream()));
  TORCH_CHECK(status == cudaSuccess, op,
              ": CUDA kernel launch failed: ", cudaGetErrorString(status));
#else
  TORCH_CHECK(false, op, ": this build of fused_ops has no CUDA kernels");
#endif
}

}  // namespace detail
}  // namespace fused_ops
