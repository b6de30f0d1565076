// Launchers of the CUDA kernels of fused::group_norm_mean (group_norm_mean_kernels.cu).
//
// Plain C++ (includable from g++-compiled files): raw device pointers, sizes of the input
// viewed as (N, C, HxW) with G groups, and a stream. The pointers are those of contiguous
// tensors; weight and bias may be null (then 1 and 0). scalar_t is float, double, __half or
// __nv_bfloat16, and stats_t the statistics' type (float, or double for double inputs);
// other pairs are not instantiated. Launchers never throw: they return the status of their
// launches (cudaSuccess, or the first error), which the caller must check.
//
// Each launcher needs a device workspace of the size its *_workspace_bytes function returns
// for the same sizes (256-byte aligned, as any allocation of the caching allocator is). No
// workspace content is carried between calls.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace fused_ops {
namespace gpu {

template <typename scalar_t, typename stats_t>
size_t group_norm_mean_forward_workspace_bytes(int64_t N, int64_t C, int64_t G, int64_t HxW);

// out (N) = mean over (c, *) of group_norm(x); mean, rstd: (N, G); channel_mean: (N, C).
template <typename scalar_t, typename stats_t>
cudaError_t launch_group_norm_mean_forward(const scalar_t* x, const scalar_t* weight,
                                           const scalar_t* bias, scalar_t* out, stats_t* mean,
                                           stats_t* rstd, stats_t* channel_mean, int64_t N,
                                           int64_t C, int64_t G, int64_t HxW, double eps,
                                           void* workspace, cudaStream_t stream);

template <typename scalar_t, typename stats_t>
size_t group_norm_mean_backward_workspace_bytes(int64_t N, int64_t C, int64_t G, int64_t HxW);

// grad_output has N entries. dx, dweight, dbias: each written when non-null (dweight needs
// weight); dweight and dbias have C entries.
template <typename scalar_t, typename stats_t>
cudaError_t launch_group_norm_mean_backward(const scalar_t* grad_output, const scalar_t* x,
                                            const stats_t* mean, const stats_t* rstd,
                                            const stats_t* channel_mean, const scalar_t* weight,
                                            scalar_t* dx, scalar_t* dweight, scalar_t* dbias,
                                            int64_t N, int64_t C, int64_t G, int64_t HxW,
                                            void* workspace, cudaStream_t stream);

}  // namespace gpu
}  // namespace fused_ops
