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

}  // namespace norm
}  // namespace fused_ops
