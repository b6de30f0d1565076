// The lag input gradient of the one-pass conv3d_group_norm_mean backward (stride 1; the
// identity and the family: conv_kernels.h, LagInputGradPlan), called by the backward's launcher
// (conv3d_group_norm_mean_onepass_backward_cuda.cu). Defined, and instantiated for the four
// element types, in conv3d_group_norm_mean_lag_input_grad_cuda.cu.
#pragma once

#include "conv/conv_kernels.h"

#include <cuda_runtime.h>

#include <cstddef>

namespace fused_ops {
namespace gpu {

// The plan for p on the current device, its tables at most `table_bytes` a chunk; unsupported
// where p wants no input gradient, or wants the weight gradient too and it does not come from
// elsewhere (the Gram kernels): the tile kernel then computes both for less.
conv::LagInputGradPlan lag_input_grad_plan(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                           bool weight_grad_elsewhere, size_t table_bytes);

// False where the environment sets FUSED_OPS_CONV3D_LAG_INPUT_GRAD=0: the recomputing tile
// kernel then computes the input gradient (for comparisons). Read at launch only: the
// workspace holds the lag kernels' share whenever the plan supports them.
bool lag_input_grad_enabled();

template <typename T>
size_t lag_input_grad_workspace_bytes(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                      const conv::LagInputGradPlan& plan);

// mu[n, ci]: x's mean per (sample, input channel), [N][C_in] in T's accumulation type (a block
// per row, in a fixed order): what the lag input gradient and the Gram weight gradient centre
// x by. (Where the forward kept x's sums, the backward takes mu from them instead.)
template <typename T>
cudaError_t launch_input_channel_means(const conv::Conv3dGroupNormMeanBackwardParams& p, void* mu,
                                       cudaStream_t stream);

// Writes p.dx. `coefficients`: the backward's (alpha, m0, gamma) per (n, c), `mu`: as
// launch_input_channel_means writes it, both in T's accumulation type and already computed on
// `stream`.
template <typename T>
cudaError_t lag_input_grad_launch(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                  const conv::LagInputGradPlan& plan, const void* coefficients,
                                  const void* mu, void* workspace, cudaStream_t stream);

}  // namespace gpu
}  // namespace fused_ops
