// The ReLU -> GroupNorm backward's input gradient computed where a convolution of the backward
// loads it (conv_kernels.h: ReluGroupNormGradOperand), for the wgmma kernels of the transposed
// convolution's backward: the plane-box input gradient (wgmma_plane_conv3d.cuh) and the weight
// gradient (split_tf32_wgmma_wgrad.cuh). Each brings a run of positions of the output gradient g
// and of the saved conv output x, for a block of channels, into shared memory by two tiled copies
// of the tensor memory accelerator (maps over (D * H * W, C, N): a run may cross rows, whose
// positions past the row the kernel masks), and its producer threads turn the two into the
// operand's values, 4 channels at a time, written into the layout the kernel's products read.
//
// Why: the GroupNorm backward's elementwise pass (relu_group_norm_cuda.cu) reads g and x and
// writes the operand, 322 MB at the headline, which both convolutions then read; that pass takes
// 0.26 ms of the TF32 training step on an H200 and its output is the step's largest buffer.
// Measured (H200, 2026-11-28, benchmarks/h200-2026-11-28-norm-grad-operand/notes.txt): the
// step's peak memory 1066 -> 943 MiB, but its backward kernels 3.52 -> 6.69 ms with TF32 (the
// weight gradient, which computes each value 9 times, 0.86 -> 2.99 ms; the input gradient 0.93
// -> 2.22): the conv operator runs it only where FUSED_OPS_NORM_GRAD_OPERAND=1.
#pragma once

#include "common/cuda/tensor_map_copies.cuh"  // tiled_copy_to_shared_3d
#include "common/cuda/tf32_rounding.cuh"
#include "conv/conv_kernels.h"
#include "norm/group_norm_math.h"

#include <cuda.h>  // CUtensorMap (the types only)
#include <cuda_runtime.h>

#include <cstdint>

namespace fused_ops {
namespace gpu {

// Positions per staged run (along the flattened positions): the widest run the kernels take
// (32 + (kW - 1) * dilation_w <= 36) from a start aligned down to a multiple of 4 positions
// (norm_grad_run_start), 16-byte rows.
constexpr int kNormGradRunPositions = 40;

// A run that begins at `position` is copied from `position` aligned down to a multiple of 4 (16
// bytes), and its values lie `shift` = position - that start further in the staged run: the copy
// engine stops with an illegal instruction on a tiled copy whose innermost coordinate is not
// 16-byte aligned (H200, 2026-11-28: a 3-d float32 map over (positions, C, N), start 1 or 550
// of 560 faulted, 0, 520 and 548 did not; the tensor maps' other users start at multiples of 32).
struct NormGradRunStart {
  int32_t aligned;
  int shift;
};
__device__ __forceinline__ NormGradRunStart norm_grad_run_start(int32_t position) {
  return {position & ~3, position & 3};  // (two's complement: the floor for negative ones too)
}

// The operand at staged position `position` of 4 channels (rows channel .. channel + 3 of the
// staged runs g_run and x_run, [channel][kNormGradRunPositions] each), whose (c1, c2, c3) are the
// 12 floats at `coefficients` (16-byte aligned; the kernels stage a block's coefficients in
// shared memory: loading them from global memory per item held the H200's builders on L1's
// latency, 2026-11-28). `round`: rounded to TF32 (for plain TF32 products, which would drop the
// low bits).
__device__ __forceinline__ float4 norm_grad_quad(const float* g_run, const float* x_run,
                                                 int channel, int position,
                                                 const float* coefficients, bool round) {
  const float4* const coef = reinterpret_cast<const float4*>(coefficients);
  const float4 k0 = coef[0], k1 = coef[1], k2 = coef[2];
  // (c1, c2, c3) of channel e: floats 3e .. 3e + 2 of the 12.
  const float c[12] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w, k2.x, k2.y, k2.z, k2.w};
  float v[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int at = (channel + e) * kNormGradRunPositions + position;
    v[e] = norm::relu_group_norm_input_grad(c[3 * e], c[3 * e + 1], c[3 * e + 2], x_run[at],
                                            g_run[at]);
    if (round) {
      v[e] = tf32_rounded(v[e]);
    }
  }
  return make_float4(v[0], v[1], v[2], v[3]);
}

// Host side (split_tf32_wgmma_conv3d_cuda.cu): the (positions, C, N) tiled map of one of the
// operand's tensors (N, C, positions), boxes of kNormGradRunPositions x `channels` x 1,
// unswizzled, zeros outside it (positions a multiple of 4: the map's strides).
cudaError_t make_norm_grad_run_map(const float* tensor, int64_t N, int64_t C, int64_t positions,
                                   int channels, CUtensorMap* map);

}  // namespace gpu
}  // namespace fused_ops
