// The tiling plan of the one-pass conv3d_group_norm_mean kernels (conv_kernels.h): which
// problems are in the family, which kernel runs them, and the output box, the channel chunk
// and the shared-memory layout of each block.
//
// Family: a forward convolution whose reduction (C_in / groups * kD * kH * kW) is at most
// kOnePassMaxReduction = 512 (the headline's is 3 * 27 = 81; C_in = 16 with k = 3 gives 432),
// whose weights for one channel chunk and input footprint for one box fit the shared memory.
// Why this bound: a block keeps its chunk's weights in shared memory (K * 24 channels * 8
// bytes = 96 KB at K = 512 for the tensor-core kernel's split float32 pairs), and the
// one-pass kernels' cost per output element grows with K while the bytes they save (the
// conv output, never written) do not: past a few hundred, cuDNN's implicit GEMM is the
// better path, and the output pass it adds matters less.
//
// Box choice: every block runs `capacity` position slots, whatever the box's volume, so the
// plan minimises (boxes per sample) * (slot work + footprint loads) over the boxes that fit:
// the widest useful rows first (TW = Wo up to 64, else 32, 16, 8), then the (TD, TH) with the
// fewest boxes.
#include "conv/conv_kernels.h"

#include <algorithm>
#include <limits>

namespace fused_ops {
namespace conv {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t round_up_16(size_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

OnePassPlan plan_conv3d_group_norm_mean_onepass(const Conv3dShape& s, ScalarKind dtype,
                                                size_t smem_limit, bool tensor_cores_available) {
  OnePassPlan plan;
  if (s.groups <= 0 || s.C_in % s.groups != 0 || s.C_out % s.groups != 0 || s.N <= 0 || s.Do <= 0 ||
      s.Ho <= 0 || s.Wo <= 0) {
    return plan;
  }
  // The finalize kernel keeps every channel's moments in shared memory.
  if (static_cast<size_t>(s.C_out) * 2 * sizeof(double) + 256 * sizeof(double) > smem_limit) {
    return plan;
  }
  const size_t acc_bytes = dtype == ScalarKind::kDouble ? 8 : 4;
  plan.tensor_cores = dtype == ScalarKind::kFloat && tensor_cores_available;
  plan.c_in_g = s.C_in / s.groups;
  plan.c_out_g = s.C_out / s.groups;
  plan.K = plan.c_in_g * s.kD * s.kH * s.kW;
  if (plan.K > kOnePassMaxReduction) {
    return plan;
  }
  plan.k_pad = plan.tensor_cores ? ceil_div(plan.K, 8) * 8 : plan.K;
  plan.capacity = plan.tensor_cores ? kOnePassTensorCoreCapacity : kOnePassDirectCapacity;
  // Channels per block: 24, 16 or 8, whichever wastes the fewest channel slots (the larger on
  // a tie: fewer chunks, fewer reloads of the input). In double, 8: a thread's 8 x 4 double
  // accumulators already take half of its registers.
  for (const int64_t cb : {24, 16, 8}) {
    if (dtype == ScalarKind::kDouble && cb != 8) {
      continue;
    }
    if (plan.cb == 0 || ceil_div(plan.c_out_g, cb) * cb < plan.chunks * plan.cb) {
      plan.cb = cb;
      plan.chunks = ceil_div(plan.c_out_g, cb);
    }
  }

  // Shared memory before the footprint: the chunk's weights ([K][cb] values for the direct
  // kernel; [k_pad][cb] (high, low) TF32 pairs for the tensor-core one) and the taps'
  // offsets [k_pad]; after it, the reduction scratch of doubles.
  const size_t weight_bytes =
      plan.tensor_cores ? plan.k_pad * plan.cb * 2 * sizeof(float) : plan.K * plan.cb * acc_bytes;
  plan.koff_offset = round_up_16(weight_bytes);
  plan.footprint_offset = plan.koff_offset + round_up_16(plan.k_pad * sizeof(int));
  const size_t scratch_bytes = kOnePassScratchPerChannel * plan.cb * sizeof(double);
  double best_cost = std::numeric_limits<double>::infinity();
  const int64_t tw_options[] = {std::min<int64_t>(s.Wo, 64), std::min<int64_t>(s.Wo, 32),
                                std::min<int64_t>(s.Wo, 16), std::min<int64_t>(s.Wo, 8)};
  for (const int64_t TW : tw_options) {
    for (int64_t TH = 1; TH <= std::min(s.Ho, plan.capacity / TW); ++TH) {
      for (int64_t TD = 1; TD <= std::min(s.Do, plan.capacity / (TW * TH)); ++TD) {
        const int64_t FD = (TD - 1) * s.stride[0] + (s.kD - 1) * s.dilation[0] + 1;
        const int64_t FH = (TH - 1) * s.stride[1] + (s.kH - 1) * s.dilation[1] + 1;
        const int64_t FW = (TW - 1) * s.stride[2] + (s.kW - 1) * s.dilation[2] + 1;
        const int64_t footprint = plan.c_in_g * FD * FH * FW;
        // (Offsets into the footprint are 32-bit.)
        if (footprint >= (int64_t{1} << 30)) {
          continue;
        }
        const size_t smem =
            plan.footprint_offset + round_up_16(footprint * acc_bytes) + scratch_bytes;
        if (smem > smem_limit) {
          continue;
        }
        const int64_t boxes = ceil_div(s.Do, TD) * ceil_div(s.Ho, TH) * ceil_div(s.Wo, TW);
        // Per box: the slots' multiply-adds, and the footprint's loads (a load ~ 8 of them).
        const double cost =
            static_cast<double>(boxes) * (static_cast<double>(plan.capacity * plan.K * plan.cb) +
                                          8.0 * static_cast<double>(footprint));
        if (cost < best_cost) {
          best_cost = cost;
          plan.TD = TD;
          plan.TH = TH;
          plan.TW = TW;
          plan.FD = FD;
          plan.FH = FH;
          plan.FW = FW;
          plan.footprint = footprint;
          plan.smem_bytes = smem;
        }
      }
    }
  }
  if (plan.TD == 0) {
    return plan;  // no box fits
  }
  plan.scratch_offset = plan.smem_bytes - scratch_bytes;
  plan.boxes_d = ceil_div(s.Do, plan.TD);
  plan.boxes_h = ceil_div(s.Ho, plan.TH);
  plan.boxes_w = ceil_div(s.Wo, plan.TW);
  plan.boxes = plan.boxes_d * plan.boxes_h * plan.boxes_w;
  plan.tiles = s.N * s.groups * plan.chunks * plan.boxes;
  // (The kernels index tiles and spatial sizes in 32 bits.)
  constexpr int64_t kMax32 = (int64_t{1} << 31) - 1;
  if (plan.tiles > kMax32 || s.D * s.H > kMax32 || s.W > kMax32) {
    return plan;
  }
  // Per tile, a (mean, M2) pair of doubles per channel of the chunk.
  plan.workspace_bytes = static_cast<size_t>(plan.tiles * plan.cb) * 2 * sizeof(double);
  plan.supported = true;
  return plan;
}

}  // namespace conv
}  // namespace fused_ops
