// fused::group_norm_mean forward for channels-last inputs (N, *spatial, C in memory, C
// innermost), without transposing them: see group_norm_mean_channels_last_kernels.cu.
// Plain C++ header: raw pointers and a stream, includable from host code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fused_ops {
namespace gpu {

// Whether the channels-last kernel handles C channels of `element_size`-byte elements (C
// must be a multiple of the 16-byte vector's width, and at most 2048).
bool group_norm_mean_channels_last_supported(int64_t channels, int64_t element_size);

// Bytes of device workspace the launcher needs (8-byte aligned).
int64_t group_norm_mean_channels_last_workspace_bytes(int64_t N, int64_t C, int64_t spatial,
                                                      int64_t element_size);

// x: N samples of spatial * C elements, channels innermost, 16-byte aligned. weight, bias:
// (C,) or null. Writes out (N,), mean and rstd (N, G), channel_mean (N, C). stat_t is float
// (double for double inputs). Returns the launch status.
template <typename scalar_t, typename stat_t>
cudaError_t launch_group_norm_mean_forward_channels_last(
    const scalar_t* x, const scalar_t* weight, const scalar_t* bias, scalar_t* out, stat_t* mean,
    stat_t* rstd, stat_t* channel_mean, void* workspace, int64_t N, int64_t C, int64_t G,
    int64_t spatial, double eps, cudaStream_t stream);

}  // namespace gpu
}  // namespace fused_ops
