// make_cuda_kernel: the CudaKernel (common/kernel_types.h) of a kernel family whose launcher is
// generic in the element type (nvcc only).
#pragma once

#include "common/cuda/scalar_ops.cuh"
#include "common/kernel_types.h"

#include <cuda_runtime.h>

#include <cstddef>

namespace fused_ops {
namespace gpu {

// Family<T> provides, for T the CUDA type of params.dtype (float, double, __half,
// __nv_bfloat16):
//   static size_t workspace_bytes(const Params&);
//   static cudaError_t launch(const Params&, void* workspace, cudaStream_t stream);
template <typename Params, template <typename> class Family>
CudaKernel<Params> make_cuda_kernel() {
  return CudaKernel<Params>{[](const Params& p) -> size_t {
                              return dispatch_cuda_scalar(p.dtype, [&](auto tag) {
                                return Family<decltype(tag)>::workspace_bytes(p);
                              });
                            },
                            [](const Params& p, void* workspace, void* stream) -> int {
                              return dispatch_cuda_scalar(p.dtype, [&](auto tag) {
                                return static_cast<int>(Family<decltype(tag)>::launch(
                                    p, workspace, static_cast<cudaStream_t>(stream)));
                              });
                            }};
}

}  // namespace gpu
}  // namespace fused_ops
