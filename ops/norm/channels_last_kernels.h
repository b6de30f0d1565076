// The channels-last CUDA forwards of group_norm_mean (group_norm_mean_channels_last_cuda.cu)
// and relu_group_norm (relu_group_norm_channels_last_cuda.cu), which the operators' CUDA
// forwards run for params with channels_last set. nvcc-only header.
#pragma once

#include "norm/norm_kernels.h"

#include <cuda_runtime_api.h>

#include <cstddef>

namespace fused_ops {
namespace norm {

size_t group_norm_mean_channels_last_workspace_bytes(const GroupNormMeanForwardParams& p);

cudaError_t launch_group_norm_mean_channels_last(const GroupNormMeanForwardParams& p,
                                                 void* workspace, cudaStream_t stream);

size_t relu_group_norm_channels_last_workspace_bytes(const ReluGroupNormForwardParams& p);

cudaError_t launch_relu_group_norm_channels_last(const ReluGroupNormForwardParams& p,
                                                 void* workspace, cudaStream_t stream);

// Its last two steps, for samples [n_begin, n_end) of a float32 p, for a caller that has the
// channel moments a few samples at a time (the pipelined TF32 convolution,
// split_tf32_wgmma_conv3d_cuda.cu): mean, rstd and the per-(n, c) affine (y = (relu(x) -
// center) * scale + shift) from channel_moments, then y from x and the affine.
cudaError_t launch_relu_group_norm_channels_last_stats(const ReluGroupNormForwardParams& p,
                                                       const Moments* channel_moments,
                                                       int64_t n_begin, int64_t n_end,
                                                       CenteredAffine<float>* affine,
                                                       cudaStream_t stream);
cudaError_t launch_relu_group_norm_channels_last_normalize(const ReluGroupNormForwardParams& p,
                                                           int64_t n_begin, int64_t n_end,
                                                           const CenteredAffine<float>* affine,
                                                           cudaStream_t stream);

}  // namespace norm
}  // namespace fused_ops
