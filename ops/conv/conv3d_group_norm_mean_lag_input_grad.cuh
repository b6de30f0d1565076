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

// The plan for p on the current device; unsupported where p wants no input gradient or wants
// the weight gradient too (the tile kernel then computes both for less).
conv::LagInputGradPlan lag_input_grad_plan(const conv::Conv3dGroupNormMeanBackwardParams& p);

// False where the environment sets FUSED_OPS_CONV3D_LAG_INPUT_GRAD=0: the recomputing tile
// kernel then computes the input gradient (for comparisons). Read at launch only: the
// workspace holds the lag kernels' share whenever the plan supports them.
bool lag_input_grad_enabled();

template <typename T>
size_t lag_input_grad_workspace_bytes(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                      const conv::LagInputGradPlan& plan);

// Writes p.dx. `coefficients`: the backward's (alpha, m0, gamma) per (n, c) in T's accumulation
// type, already computed on `stream`.
template <typename T>
cudaError_t lag_input_grad_launch(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                  const conv::LagInputGradPlan& plan, const void* coefficients,
                                  void* workspace, cudaStream_t stream);

}  // namespace gpu
}  // namespace fused_ops
