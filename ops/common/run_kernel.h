// Runs a kernel family on the device of its tensors: the host functions of the operators
// (checks, allocation, empty exit; device-agnostic, as ATen's) hand a plain params struct
// to the CPU kernel or to the CUDA kernel of the same family through run_kernel.
//
// Kernels see no torch types: a CPU kernel is a function of its params struct; a CUDA
// kernel (CudaKernel) is a workspace-size function and a launcher that enqueues its kernels
// on a stream and returns the launch status. run_kernel supplies, for CUDA, the device guard,
// the current stream and a workspace from PyTorch's caching allocator, and turns a failed
// status into an exception.
#pragma once

#include "common/kernel_types.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/FunctionRef.h>

#include <cstddef>

namespace fused_ops {

namespace detail {
// Runs `launch(workspace, stream)` on `on`'s device and current stream with a workspace of
// `workspace_bytes()` (asked on that device too: sizes may depend on it, e.g. split-K over its
// SMs); throws (naming `op`) if it returns an error.
void run_cuda(const char* op, const at::Tensor& on, c10::function_ref<size_t()> workspace_bytes,
              c10::function_ref<int(void*, void*)> launch);
}  // namespace detail

// Runs a CUDA-only kernel family on `on`'s device and current stream.
template <typename Params>
void run_cuda_kernel(const char* op, const at::Tensor& on, const Params& params,
                     const CudaKernel<Params>& cuda) {
  detail::run_cuda(
      op, on, [&] { return cuda.workspace_bytes(params); },
      [&](void* workspace, void* stream) { return cuda.launch(params, workspace, stream); });
}

// Runs the kernel of `kernels` for `on`'s device (CPU or CUDA) with `params`.
template <typename Params>
void run_kernel(const char* op, const at::Tensor& on, const Params& params,
                const DeviceKernels<Params>& kernels) {
  if (on.is_cpu()) {
    kernels.cpu(params);
    return;
  }
  TORCH_CHECK(on.is_cuda(), op, ": expected CPU or CUDA tensors, got a tensor on ", on.device());
  TORCH_CHECK(kernels.cuda != nullptr, op,
              ": this build of fused_ops has no CUDA kernels (it was built without CUDA)");
  run_cuda_kernel(op, on, params, *kernels.cuda);
}

}  // namespace fused_ops
