// Helpers for code shared by the CPU kernels (g++) and the CUDA kernels (nvcc): written once,
// compiled for both.
#pragma once

#if defined(__CUDACC__)
#define FUSED_OPS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FUSED_OPS_HOST_DEVICE inline
#endif

namespace fused_ops {

// relu that keeps NaN, as torch.relu does (NaN < 0 is false; fmax would turn NaN into 0).
template <typename T>
FUSED_OPS_HOST_DEVICE T relu_keep_nan(T v) {
  return v < T(0) ? T(0) : v;
}

}  // namespace fused_ops
