// The Gram weight gradient of the one-pass conv3d_group_norm_mean backward (stride 1; the
// identity and the family: conv_kernels.h, GramWeightGradPlan), called by the backward's
// launcher (conv3d_group_norm_mean_onepass_backward_cuda.cu). Defined, and instantiated for the
// four element types, in conv3d_group_norm_mean_gram_weight_grad_cuda.cu.
#pragma once

#include "conv/conv_kernels.h"

#include <cuda_runtime.h>

#include <cstddef>

namespace fused_ops {
namespace gpu {

// The plan for p on the current device, its partials at most `partial_bytes` a launch;
// unsupported where p wants no weight gradient.
conv::GramWeightGradPlan gram_weight_grad_plan(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                               size_t partial_bytes);

// False where the environment sets FUSED_OPS_CONV3D_GRAM_WEIGHT_GRAD=0: the recomputing tile
// kernel then computes the weight gradient (for comparisons). Read per call.
bool gram_weight_grad_enabled();

template <typename T>
size_t gram_weight_grad_workspace_bytes(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                        const conv::GramWeightGradPlan& plan);

// Writes p.dweight. `coefficients`: the backward's (alpha, m0, gamma) per (n, c), `mu`: x's
// mean per (n, input channel) (launch_input_channel_means), both in T's accumulation type and
// already computed on `stream`.
template <typename T>
cudaError_t gram_weight_grad_launch(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                    const conv::GramWeightGradPlan& plan, const void* coefficients,
                                    const void* mu, void* workspace, cudaStream_t stream);

}  // namespace gpu
}  // namespace fused_ops
