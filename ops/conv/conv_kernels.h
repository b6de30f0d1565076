// The fused convolution kernels' interface: plain parameter structs (raw pointers, sizes; no
// torch, no CUDA types) and the per-device entry points. Included by the host functions
// (ops/conv/*.cpp) and the CUDA kernels (ops/conv/*_cuda.cu).
#pragma once

#include "common/host_device.h"
#include "common/kernel_types.h"
#include "norm/group_norm_math.h"
#include "norm/norm_kernels.h"

#include <cstddef>
#include <cstdint>

namespace fused_ops {
namespace conv {

// A forward 3-d convolution: input (N, C_in, D, H, W), weight (C_out, C_in / groups, kD, kH,
// kW), output (N, C_out, Do, Ho, Wo); stride, padding and dilation per spatial dim (D, H, W).
struct Conv3dShape {
  int64_t N, C_in, D, H, W;
  int64_t C_out, kD, kH, kW;
  int64_t Do, Ho, Wo;
  int64_t stride[3];
  int64_t padding[3];
  int64_t dilation[3];
  int64_t groups;
};

// conv3d_group_norm_mean forward: out[n] = mean over (c, *) of
// group_norm(conv3d(x) + conv_bias)[n], with per-(n, g) statistics mean, rstd and per-(n, c)
// channel means of the convolution's output (bias included) saved, as
// norm::GroupNormMeanForwardParams saves them. x and weight contiguous, of `dtype`;
// conv_bias, gn_weight, gn_bias (C_out) or null; statistics of float (double for double).
struct Conv3dGroupNormMeanParams {
  ScalarKind dtype;
  Conv3dShape conv;
  int64_t num_groups;  // GroupNorm's
  double eps;
  // The channel means exact (in double, from x's sums per tap) where the tensor-core kernel
  // runs: the training forward's, which the backward's gradients sum over every output.
  bool exact_channel_means;
  const void* x;
  const void* weight;
  const void* conv_bias;
  const void* gn_weight;
  const void* gn_bias;
  void* out;
  void* mean;
  void* rstd;
  void* channel_mean;
  // x's sums for the backward, [N][C_in][kD * kH * kW + 1] doubles, or null (float32 only; the
  // channel means are then exact whichever kernel runs): per (sample, input channel) X[k], the
  // sum of x over the positions tap k reads (one per output, 0 outside the input; the exact
  // means' sums), then the sum of all of x.
  double* input_sums;
};

// input_sums' rows: X for each of the kD * kH * kW taps, then x's total.
FUSED_OPS_HOST_DEVICE int64_t input_sums_row(const Conv3dShape& s) {
  return s.kD * s.kH * s.kW + 1;
}
// Where in the rows of a conv group's input channels (from its first) the X of its weight's column
// j = b * taps + k lies (input channel b of the group, tap k).
template <typename Int>
FUSED_OPS_HOST_DEVICE Int input_sums_column(Int j, Int taps) {
  return j + j / taps;
}

// How the one-pass kernels (conv3d_group_norm_mean_onepass_cuda.cu) cut a problem: each block
// computes the convolution over a box of TD x TH x TW output positions of one sample for `cb`
// output channels of one conv group, from the box's input footprint (FD x FH x FW per input
// channel) in shared memory, and reduces it to per-channel moments. Plain host logic (every
// build), so that the host functions can ask whether a problem is in the family.
struct OnePassPlan {
  bool supported = false;
  bool tensor_cores = false;  // float32 on split-TF32 tensor cores, else the direct kernel
  // The tensor-core kernel on wgmma loads each footprint by one tiled copy of the tensor memory
  // accelerator (x's 5-d map (W, H, D, C_in, N), box (row_pitch, FH, FD, c_in_g, 1), zeros
  // outside x): the footprint's layout is then that box, dense (row_pitch the padded row,
  // plane_pitch = FH * row_pitch, channel_pitch = FD * plane_pitch), its buffers 128-byte aligned
  // (the kernel aligns the first up, at most kOnePassTmaAlignSlack bytes on). Where x is not
  // 16-byte aligned at run time, the kernel loads the same layout by asynchronous copies.
  bool tma_footprint = false;
  int64_t c_in_g = 0, c_out_g = 0;
  int64_t K = 0;                   // reduction length: c_in_g * kD * kH * kW
  int64_t k_pad = 0;               // K rounded up to the tensor-core step (8), or K
  int64_t cb = 0;                  // output channels per block: 8, 16 or 24
  int64_t chunks = 0;              // channel chunks per conv group
  int64_t capacity = 0;            // output positions a block computes per tile
  int64_t TD = 0, TH = 0, TW = 0;  // output box (TD * TH * TW <= capacity)
  int64_t FD = 0, FH = 0, FW = 0;  // its input footprint
  // The footprint's layout in shared memory, in elements: the strides of fh, fd and the
  // channel (footprint_pitches).
  int64_t row_pitch = 0, plane_pitch = 0, channel_pitch = 0;
  int64_t footprint = 0;  // c_in_g * channel_pitch elements
  // Bytes of one footprint buffer (16-byte multiple), and how many the kernel keeps: the
  // tensor-core kernel 2 (the next tile's loads while this one computes), the direct one 1.
  size_t footprint_bytes = 0;
  int footprint_buffers = 1;
  // The tensor-core kernel's table of footprint rows where its boxes are whole input rows
  // (conv_input_box.cuh: fill_full_row_table): c_in_g * FD * FH int4s at row_table_offset
  // (0: none). Tensor-map plans keep it for the asynchronous copies that run where the map
  // is not used.
  size_t row_table_offset = 0;
  // The wgmma kernel's window loads (conv3d_group_norm_mean_onepass_cuda.cu, "Windows"): where
  // kW = 3 with stride and dilation 1 along W, TW is a multiple of 6, the footprint's pitches
  // are even and the K steps stay as many. A thread's 6 rows are then 6 consecutive positions
  // along W, and its taps come in triples (kw = 0, 1, 2) of the kernel's window_rows = c_in_g *
  // kD * kH rows, window_triples of them per quad of lanes (padding rows included).
  bool windows = false;
  int64_t window_rows = 0, window_triples = 0;
  int64_t boxes_d = 0, boxes_h = 0, boxes_w = 0, boxes = 0;  // boxes per sample
  int64_t tiles = 0;  // blocks' work items: N * groups * chunks * boxes
  // Shared memory, in bytes: the weights at 0, then the taps' offsets, the footprint buffers,
  // the reduction scratch, and the row table if any.
  size_t koff_offset = 0, footprint_offset = 0, scratch_offset = 0, smem_bytes = 0;
  size_t workspace_bytes = 0;
};

// Shared-memory bytes of the tensor-core forward's split weights (k_pad taps x cb channels,
// a high and a low TF32 part each), in the layout of its products
// (conv3d_group_norm_mean_onepass_cuda.cu): mma.sync's fragment order (k_pad * cb * 8
// bytes), or (`wgmma`) wgmma's B tiles, ceil(k_pad / 32) blocks of cb rows of 128 bytes per
// part, from the first 1024-byte boundary (up to 1008 bytes further: the region starts
// 16-byte aligned).
size_t onepass_tensor_core_weight_bytes(int64_t k_pad, int64_t cb, bool wgmma);

// The pitches of a footprint of FD x FH x FW elements per channel (OnePassPlan). Dense, except
// for the tensor-core kernel (`padded`): there a warp's fragment loads read 8 consecutive
// positions for each of 4 taps at once, and with pitches that are multiples of 32 (whole rows
// of a 32-wide input) taps of different rows fall into the same banks: ~2-way conflicts on
// average (Nsight Compute at the Conv3d headline, H100, 2026-11-26: 33% of the shared-load
// wavefronts). Padded, the row pitch is 16-20 modulo 32, the plane pitch 16 and the channel
// pitch 24 (chosen by simulating the kernel's loads over its box shapes: 1.95 -> 1.02
// wavefronts per load at the headline's box; its kernel 285 -> 283 us: the loads were not what
// bound it). Multiples of 4 where FW is (16-byte copies).
struct FootprintPitches {
  int64_t row, plane, channel;
};
FootprintPitches footprint_pitches(int64_t FD, int64_t FH, int64_t FW, bool padded);

// Whether the boxes of a one-pass plan are whole input rows, FW x positions from input column
// 0 (one box spans the output's width, no padding along W): with x 16-byte aligned, the
// float32 kernels then load them by 16-byte copies (conv_input_box.cuh, full_input_rows).
FUSED_OPS_HOST_DEVICE bool boxes_are_whole_input_rows(const Conv3dShape& s, int64_t FW,
                                                      int64_t boxes_w) {
  return boxes_w == 1 && s.padding[2] == 0 && FW == s.W && s.W % 4 == 0 && s.W <= 128;
}

// The largest reduction length (C_in / groups * kD * kH * kW) of the one-pass family, and of
// its tensor-core kernel (see conv3d_group_norm_mean_onepass_plan.cpp).
constexpr int64_t kOnePassMaxReduction = 512;
constexpr int64_t kOnePassTensorCoreMaxReduction = 128;
// Output positions per block and tile: the direct kernel's (128 position threads, 8
// positions each) and the tensor-core kernel's (8 warps of m16 tiles: 4 each with mma.sync
// products, 3 with wgmma ones).
constexpr int64_t kOnePassDirectCapacity = 1024;
constexpr int64_t kOnePassTensorCoreCapacity = 512;
constexpr int64_t kOnePassWgmmaCapacity = 384;
// Windows (OnePassPlan::windows): the tap of column k of the wgmma kernel's K. Quad q = k % 4
// of the lanes takes triples j = 0, 1, ... of taps 3 R, 3 R + 1, 3 R + 2 (kw = 0, 1, 2) of
// kernel row R = 4 j + q, an (input channel, kd, kh); column q of a K step belongs to one
// triple, column q + 4 to another. The triples go in pairs (2 p, 2 p + 1), 3 K steps a pair:
// step 3 p + kw takes tap kw of triple 2 p in column q and of triple 2 p + 1 in column q + 4,
// so that a step's 12 values of a thread are 12 different inputs (no value copied between the
// products' registers). An odd last triple takes 2 steps: (kw 0, kw 1), then (kw 2, padding).
// -1: a padding column (weight 0). (Columns past the K steps, which the weights' last block of
// 32 holds but no product reads, may get taps too.)
FUSED_OPS_HOST_DEVICE int onepass_window_tap(int k, const OnePassPlan& plan) {
  const int ks = k / 8, second = (k % 8) / 4;
  const int triples = static_cast<int>(plan.window_triples);
  const int pair_steps = 3 * (triples / 2);
  int j, kw;
  if (ks < pair_steps) {
    j = 2 * (ks / 3) + second;
    kw = ks % 3;
  } else {  // the odd last triple
    j = triples - 1;
    kw = 2 * (ks - pair_steps) + second;
  }
  const int row = 4 * j + k % 4;
  return kw < 3 && row < plan.window_rows ? 3 * row + kw : -1;
}

// The tensor-core kernel's groups of 4 warps (a warpgroup with wgmma products), each of which
// writes its own moments of a tile.
constexpr int64_t kOnePassTensorCoreWarpGroups = 2;
// The tensor-core kernel's positions per tile with wgmma or mma.sync products.
constexpr int64_t onepass_tensor_core_capacity(bool wgmma) {
  return wgmma ? kOnePassWgmmaCapacity : kOnePassTensorCoreCapacity;
}
// Reduction scratch per channel of a block, in bytes: the direct kernel's per-warp sums, total
// and tile mean (10 doubles); the tensor-core kernel's per-warp (sum of deviations, shift,
// squares, count) float4s, two tiles' worth (its pipeline), after which it keeps the digits of
// its tile stride, the mbarriers of its footprints' tensor-map copies and the counts of its
// warps done reading each footprint buffer (kOnePassTensorCoreScratchBytes, a multiple of 16:
// the row table follows; all of its shared memory is dynamic, so that the plan counts every
// byte).
constexpr int64_t kOnePassDirectScratchBytesPerChannel = 10 * 8;
constexpr int64_t kOnePassTensorCoreScratchBytesPerChannel = 2 * 8 * 16;
constexpr int64_t kOnePassTensorCoreScratchBytes = 64;
// The bytes a tensor-core plan with tma_footprint reserves before its footprint buffers, so that
// the kernel can align the first up to 128 bytes (dynamic shared memory starts 16-byte aligned).
constexpr size_t kOnePassTmaAlignSlack = 112;

// The plan for `s` in `dtype`, with at most `smem_limit` bytes of shared memory per block;
// float32 takes the tensor-core kernel where `tensor_cores` (allowed, and compute capability
// 8.0 or newer) and the reduction is at most kOnePassTensorCoreMaxReduction; `wgmma`: its
// products run on wgmma (the device runs the sm_90a image; the weights' layout and the tiles'
// capacity differ: kOnePassWgmmaCapacity); where the tensor-core kernel's footprints do not
// fit, the direct kernel's plan.
// plan.supported says whether the problem is in the family.
OnePassPlan plan_conv3d_group_norm_mean_onepass(const Conv3dShape& s, ScalarKind dtype,
                                                size_t smem_limit, bool tensor_cores,
                                                bool wgmma = false);

// The one-pass CUDA kernels (defined only in builds with CUDA): `supported` says whether a
// problem is in the family on the current device (its plan fits the device's shared
// memory); `kernel` runs one that is.
struct OnePassCudaKernel {
  bool (*supported)(const Conv3dGroupNormMeanParams&);
  CudaKernel<Conv3dGroupNormMeanParams> kernel;
  // Which instructions run the float32 forward's products on the current device: "wgmma"
  // (Hopper's warpgroup instructions: a device running the file's sm_90a image, unless the
  // environment variable FUSED_OPS_ONEPASS_WGMMA is "0"), "mma_sync" (other devices of compute
  // capability 8.0+), or "" (no tensor cores: the direct kernel runs every dtype).
  const char* (*products_kernel)();
};
extern const OnePassCudaKernel conv3d_group_norm_mean_onepass_cuda;

// conv3d_group_norm_mean backward from the forward's statistics alone (the convolution's output
// is recomputed, never stored): x, weight as in the forward; grad_output (N); mean, rstd
// (N, num_groups) and channel_mean (N, C_out, conv bias included) as the forward saved them
// (float; double for double); input_sums as the forward saved them, or null (then the backward
// sums x itself). Gradients are written where their pointer is not null: dx like x, dweight
// like weight, dconv_bias, dgn_weight, dgn_bias (C_out).
struct Conv3dGroupNormMeanBackwardParams {
  ScalarKind dtype;
  Conv3dShape conv;
  int64_t num_groups;
  const void* grad_output;
  const void* x;
  const void* weight;
  const void* conv_bias;
  const void* gn_weight;
  const void* mean;
  const void* rstd;
  const void* channel_mean;
  const double* input_sums;
  void* dx;
  void* dweight;
  void* dconv_bias;
  void* dgn_weight;
  void* dgn_bias;
};

// How the one-pass backward kernel (conv3d_group_norm_mean_onepass_backward_cuda.cu) cuts a
// problem: each block takes a box of BD x BH x BW input positions of one sample and conv group
// (a tile), recomputes the convolution's output over the region of output positions whose
// gradient reaches the box (at most RD x RH x RW; its input footprint, FD x FH x FW per input
// channel, sits in shared memory), and from it the input gradient of the box and the weight
// gradient's share of the output positions the box owns, kOnePassBackwardChannels output
// channels at a time.
struct OnePassBackwardPlan {
  bool supported = false;
  int64_t c_in_g = 0, c_out_g = 0;
  int64_t K = 0;       // reduction length: c_in_g * kD * kH * kW
  int64_t chunks = 0;  // channel chunks per conv group
  int64_t BD = 0, BH = 0, BW = 0, box = 0;
  int64_t RD = 0, RH = 0, RW = 0, region = 0;
  int64_t FD = 0, FH = 0, FW = 0, footprint = 0;
  int64_t boxes_d = 0, boxes_h = 0, boxes_w = 0, boxes = 0;
  int64_t tiles = 0;  // N * groups * boxes
  // Shared memory, in bytes: the chunk's weights at 0 ([K][8]), then the taps' offsets [K],
  // the region table [region], the owned outputs' region indices [region], the owned outputs
  // per dim [3 + RD + RH + RW], the footprint, the output gradient [region][8], the input
  // gradient [c_in_g][box], the coefficients.
  size_t koff_offset = 0, region_offset = 0, owned_offset = 0, owned_dims_offset = 0,
         footprint_offset = 0, dy_offset = 0, dx_offset = 0, coef_offset = 0, smem_bytes = 0;
};

// Output channels per step of the backward kernel.
constexpr int64_t kOnePassBackwardChannels = 8;
// Input positions per box (the input-gradient phase's slots: 256 threads x 4).
constexpr int64_t kOnePassBackwardBoxCapacity = 1024;

OnePassBackwardPlan plan_conv3d_group_norm_mean_onepass_backward(const Conv3dShape& s,
                                                                 ScalarKind dtype,
                                                                 size_t smem_limit);

// The lag input gradient (conv3d_group_norm_mean_lag_input_grad_cuda.cu): at stride 1 the
// backward's input gradient needs no recomputed convolution output. With dy = alpha * (y0 - m0)
// + gamma per (n, c) (the backward's coefficients) and y0 the convolution of x without bias,
//   dx[a, p] = sum over taps k in V(p), input channels b and lags d of
//              Q[(a, k), (b, k + d)] * xc[b, p + d * dilation]  +  sum over k in V(p) of E[a, k],
//   Q[(a, k), (b, k')] = sum_c alpha[c] w[c, a, k] w[c, b, k'],
//   E[a, k] = sum_c w[c, a, k] * (gamma[c] + alpha[c] * (sum_{b, k'} w[c, b, k'] mu[b] - m0[c])),
// per (sample, conv group): V(p) the taps whose output p + padding - k * dilation exists (per dim
// an interval [lo, hi]: lag_tap_range), xc = x - mu (mu: x's mean per (n, channel); -mu in the
// padding, so that y0 = conv(xc) + conv of the constant mu everywhere: no cancellation when x has
// a large mean). Summed over k for each lag d, Q gives one table per pattern of V: C_in/groups^2
// x (2k - 1)^3 products per input position (the headline's 3 x 3 x 125 = 1125) where
// recomputing y and transposing it takes 2 x C_out/groups x C_in/groups x k^3 (3888) plus the
// recomputation's halo. Family: stride 1, kD = 3 with dilation 1 along D, kH, kW <= 3,
// C_in/groups <= 4, fewer table products per input position than the direct input
// gradient's, and float32, float16 or bfloat16 (float sums; in double the kernel's registers
// spill). The backward uses it where the weight gradient is not asked for or comes from the
// Gram kernels (GramWeightGradPlan); where the recomputing tile kernel computes the weight
// gradient, it adds the input gradient for less than these kernels take
// (benchmarks/h100-2026-11-23-lag).
// alpha is GroupNorm's per (n, GroupNorm group): Q of an item (n, conv group) is
// sum over segments of alpha[n, segment] * Q_segment, Q_segment = sum_{c in segment} w[c] w[c]^T,
// a segment being the conv group's channels in one GroupNorm group. So are the tables, which
// are linear in Q: where the segments are fewer than the items, their tables are built once,
// in double, and each item's are combined from them (segment_tables), instead of built from
// the item's own Q.
constexpr int64_t kLagMaxTaps = 3;
constexpr int64_t kLagMaxSpan = 2 * kLagMaxTaps - 1;
constexpr int64_t kLagMaxInputChannels = 4;
constexpr int64_t kLagMaxPatterns = kLagMaxTaps * (kLagMaxTaps + 1) / 2 + 1;  // + empty
// A block's tile: 32 positions along W x 8 along H x a column along D (each thread's, in
// registers): D is cut into columns of 12 from 0, the rest into 8, 4, 2, 1. Along D only the
// first and last kD - 1 = 2 planes have short tap ranges, so they are always among a column's
// first two and last two planes (the kernel's correction slots). (Columns of 12, where they
// were 8: a row of the tables, 4 16-byte loads of the L1's busiest unit, serves 12 planes'
// products, and at the headline 2 columns, each with one corrected pair, where 3 columns had
// two corrected pairs among them and a plain one.)
constexpr int64_t kLagTileW = 32, kLagTileH = 8, kLagMaxTileD = 12, kLagRestTileD = 8;
// The values a footprint column of `planes` (a column's R + 4 along D) takes in shared memory:
// padded for 16-byte loads, and to an odd number of 16-byte vectors past 8 values, so that a
// warp's 16-byte loads of its columns are conflict-free (12 + 4 planes: 20 values; 16 would be
// 2-way bank conflicts).
FUSED_OPS_HOST_DEVICE constexpr int64_t lag_column_pitch(int64_t planes) {
  const int64_t vectors = (planes + 3) / 4;
  return 4 * (vectors > 2 && vectors % 2 == 0 ? vectors + 1 : vectors);
}
// The taps of one dim whose output p + padding - k * dilation lies in [0, out) (stride 1): the
// interval [lo, hi], or lo = 1, hi = 0 where there is none.
struct TapRange {
  int lo, hi;
};
// In I's arithmetic: the plan's in int64_t, the kernels' in int (a 64-bit division is a
// subroutine call of tens of instructions; the plan checks that out + padding fits in int).
template <typename I>
FUSED_OPS_HOST_DEVICE TapRange lag_tap_range(I p, I out, I k, I padding, I dilation) {
  const I top = p + padding;  // the output of tap 0
  I hi = top / dilation;
  if (hi > k - 1) {
    hi = k - 1;
  }
  const I past = top - (out - 1);  // > 0: the first taps' outputs lie past the end
  const I lo = past <= 0 ? 0 : (past + dilation - 1) / dilation;
  if (lo > hi) {
    return TapRange{1, 0};
  }
  return TapRange{static_cast<int>(lo), static_cast<int>(hi)};
}
struct LagInputGradPlan {
  bool supported = false;
  int64_t c_in_g = 0, c_out_g = 0;
  int64_t span[3] = {};      // lags per dim: 2k - 1
  int64_t row = 0;           // a table row: span[0] * c_in_g values, padded to a multiple of 4
  int64_t patterns[3] = {};  // tap-range patterns per dim
  // Per dim: pattern id of a tap range (index lo * kLagMaxTaps + hi), and each id's range.
  int8_t pattern_id[3][kLagMaxTaps * kLagMaxTaps] = {};
  int8_t pattern_lo[3][kLagMaxPatterns] = {}, pattern_hi[3][kLagMaxPatterns] = {};
  int64_t d_tiles = 0, h_tiles = 0, w_tiles = 0;
  // A tile's footprint rows (H) and columns (W); its planes (D): the tile's depth + span - 1.
  int64_t FH = 0, FW = 0;
  // Elements of one (sample, conv group)'s tables, [P][c_in_g][span_h][span_w][row] (its
  // constants, [P][4], are kept for all items at once): a multiple of 4, as row is (the
  // combine kernel writes pairs).
  int64_t table_elems = 0;
  // The tables from the segments' (see above; only where they are fewer than the items, fit
  // kLagSegmentTableBytes and number at most kLagMaxCombineSegments a conv group): the most
  // GroupNorm groups one conv group's channels meet; the segment tables are
  // [groups][segments_per_group] (a conv group that meets fewer has empty ones).
  bool segment_tables = false;
  int64_t segments_per_group = 0;
  // (sample, conv group) items per launch: their tables (and Q, without segment tables) within
  // the budget, table_bytes (where one item fits), in as few waves of the input-gradient kernel
  // as the device runs (given its multiprocessors), then in as few launches.
  int64_t items_per_chunk = 0;
  size_t smem_bytes = 0;  // the input-gradient kernel's (its footprint)
};
constexpr size_t kLagTableBytes = size_t{20} << 20;
// Where the Gram weight gradient's kernels run beside these (the backward's concurrent routes,
// FUSED_OPS_CONCURRENT_GRADS=1), the two workspaces are apart and each takes less:
// kLagConcurrentTableBytes here and kGramConcurrentPartialBytes there. At the Conv3d headline a
// step's peak is then 67.0 MiB (64.3 with one shared region, 84.1 with both whole budgets; the
// bound is eager's 696 / 10), and the backward took 0.75 ms against 0.79 one after the other
// (H100, 2026-11-27; the split measured against 10 and 8 MiB:
// benchmarks/h100-2026-11-27-concurrent-grads), before the Gram launches were sized to whole
// rounds (kGramPartialBytes), which made one after the other the faster.
constexpr size_t kLagConcurrentTableBytes = size_t{14} << 20;
// The segment tables and their Q (double): at most this, else the items' own tables.
constexpr size_t kLagSegmentTableBytes = size_t{16} << 20;
// Segments per conv group at most this with segment tables (the combine kernel keeps a tile of
// at least 8 items' alphas in shared memory: 16 KB of double).
constexpr int64_t kLagMaxCombineSegments = 256;
// Blocks of the input-gradient kernel per multiprocessor (its __launch_bounds__).
constexpr int64_t kLagBlocksPerMultiprocessor = 2;
// `num_groups`: GroupNorm's; `multiprocessors`: the device's (0: launches not sized to waves).
LagInputGradPlan plan_conv3d_group_norm_mean_lag_input_grad(const Conv3dShape& s,
                                                            int64_t num_groups, ScalarKind dtype,
                                                            size_t smem_limit,
                                                            int64_t multiprocessors,
                                                            size_t table_bytes = kLagTableBytes);
// The Gram weight gradient (conv3d_group_norm_mean_gram_weight_grad_cuda.cu): at stride 1 the
// backward's weight gradient needs no recomputed convolution output either. Per (sample n,
// conv group), with col_s the c_in_g * k^3 inputs output s reads (j = (b, tap) as in the
// weight), xe = x - mu (mu: x's mean per (n, channel); -mu in the padding), and the
// coefficients of dy = alpha * (y0 - m0) + gamma:
//   dweight[c, j] += alpha[c] * (sum_j' w[c, j'] * (R[j', j] + mu[j] * Sc[j']))
//                    + e[c] * (Sc[j] + S * mu[j]),
//   R[j', j] = sum over outputs s of xe(col_s)[j'] * xe(col_s)[j],  Sc[j] = sum_s xe(col_s)[j],
//   e[c] = gamma[c] + alpha[c] * (sum_j' w[c, j'] * mu[j'] - m0[c])
// (S outputs per sample; e is the per-channel constant of the lag input gradient's E[a, k]).
// R[(a, k1), (b, k2)] is a sum of xe[a, p] * xe[b, p + (k2 - k1) * dilation] over the positions
// p of a box of the padded input (per dim [k1 * dilation, k1 * dilation + out)): the lag
// products, c_in_g^2 * (2k - 1)^3 per input position (1125 at the headline), of which the
// kernel computes one half, 585 (R is symmetric), where the recomputing kernel's weight
// gradient takes the convolution, 1944 per output, plus its halo, and then 1944 more. The boxes'
// borders cut each dim of the padded input into at most 2k - 1 intervals ("classes"); a block
// stages a unit's window (a chunk of planes and rows) and sums the lag products of each of its
// pieces of rows (the chunk's part of one D-class, all of W on the lanes), writing per lag the
// total over the lanes and the values of the lanes some box along W leaves out; the finalize
// adds the pieces of each box in double: along D the classes inside the box, along H all rows
// minus the H-classes outside it ("edge" pieces, whose units stage only those rows), so that
// only the pieces of thin border classes need their own sums. Family: stride 1, k <= 3 per dim,
// C_in/groups <= 3, the padded input's W at most 32 (a lane per position), float32, float16 or
// bfloat16 (float sums per piece and lane, or per lane over a warp's rows for the window sums;
// double across them). Checked in float64 first (a prototype over paddings, dilations and mixed
// kernel sizes: equal to 1e-15), then by the tests. Where it takes the weight gradient, the
// recomputing tile kernel runs only for an input gradient outside the lag kernels' family (or with
// them off).
constexpr int64_t kGramMaxTaps = 3;
constexpr int64_t kGramMaxInputChannels = 3;
constexpr int64_t kGramMaxWidth = 32;                      // the padded input's W: the lanes
constexpr int64_t kGramMaxClasses = 2 * kGramMaxTaps - 1;  // intervals per dim
struct GramWeightGradPlan {
  bool supported = false;
  int64_t c_in_g = 0, c_out_g = 0;
  int64_t E[3] = {};      // the padded input: D + 2 * padding, ...
  int64_t reach[3] = {};  // (k - 1) * dilation: the largest lag, in positions
  // A window row in shared memory: the 32 lanes' positions from float `margin` (reach[2]
  // rounded up to 4: 16-byte aligned), zeros in the margins the W lags reach.
  int64_t margin = 0, row_floats = 0;
  // The input's rows are the window rows' 32 positions (W = 32, no padding along W): float32
  // windows then load by 16-byte copies where x is 16-byte aligned.
  bool whole_rows = false;
  // The classes along D and H: [lo, hi) each, and bit k1 of box_mask set where the class lies
  // inside box k1 ([k1 * dilation, k1 * dilation + out)).
  int64_t classes[2] = {};
  int32_t class_lo[2][kGramMaxClasses] = {}, class_hi[2][kGramMaxClasses] = {};
  uint8_t box_mask[2][kGramMaxClasses] = {};
  // The H-classes outside some box, whose rows get pieces of their own.
  int64_t edge_classes = 0;
  int8_t edge_class[kGramMaxClasses] = {};
  // Pieces (the partials' granularity) per (sample, conv group): the bulk ones, per D-segment x
  // chunk of bulk_rows rows of H, then the edge ones, per D-segment x edge class. D-segments:
  // the D-classes cut at the borders of a grid of chunks of bulk_planes (bulk) or edge_planes
  // (edge) planes from plane 0; d_segment_begin[c] (edge_segment_begin[c]): class c's first.
  int64_t bulk_planes = 0, bulk_rows = 0, h_chunks = 0, bulk_d_chunks = 0;
  int64_t edge_planes = 0, edge_d_chunks = 0;
  int32_t d_segment_begin[kGramMaxClasses + 1] = {}, edge_segment_begin[kGramMaxClasses + 1] = {};
  int64_t bulk_pieces = 0, pieces = 0;
  // Units (what a block stages one window for) per (sample, conv group): a bulk one per (D chunk,
  // H chunk), its D-segments' pieces, then an edge one per (D chunk, edge group): the edge
  // classes [edge_group_begin[g], edge_group_begin[g + 1]), consecutive ones whose rows with the
  // lags' reach along H overlap or touch, in one window, each D-segment's piece per class.
  int64_t edge_groups = 0;
  int8_t edge_group_begin[kGramMaxClasses + 1] = {};
  int64_t units_per_item = 0;
  // Floats a piece writes: per lag warp (dd, dw) c_in_g^2 x (2kH - 1) totals over the lanes
  // (a, b, dh), then the same values of each of its 2 x reach[2] edge lanes ([0, reach[2]) and
  // [Wo, E[2])), each set value_stride apart (the values rounded up to 4: 16-byte stores).
  int64_t value_stride = 0;
  int64_t piece_floats = 0;
  // A lag (dd, dw) per warp, one half of them (R is symmetric): (kD - 1) x (2kW - 1) + kW.
  int64_t warps = 0;
  int64_t items_per_launch = 0;  // (sample, conv group) items, partials within the budget
  size_t smem_bytes = 0;         // a window of the sums kernel (the largest unit's); it keeps two
  // The finalize's (per item and kGramGradChannels output channels): R and Sc, mu per column,
  // the channels' weights, w . Sc and e, in double.
  size_t finalize_smem_bytes = 0;
};
// One after the other, the lag and Gram kernels share one region of workspace (the larger of
// theirs). At the Conv3d headline the lag kernels' takes 28.1 MiB (tables and segment tables)
// and, within this budget, the Gram kernels' 27.9 MiB: 2 launches of 64 items, 512 units each,
// in 4 rounds of the sums kernel's 132 blocks (H100). With 16 MiB, 3 launches of 43 items took
// 3 rounds each (344 units: 2.6 a block): the sums kernel 0.294 -> 0.246 ms a step, the
// training step 1.006 -> 0.951 ms (2026-11-27, benchmarks/h100-2026-11-27-gram-rounds).
constexpr size_t kGramPartialBytes = size_t{24} << 20;
constexpr size_t kGramConcurrentPartialBytes = size_t{6} << 20;  // (see kLagConcurrentTableBytes)
// Pieces per item at most: the box sums keep a 2-byte code per piece in shared memory (48 KB;
// a padded D of ~65K planes at the headline's H and W).
constexpr int64_t kGramMaxPieces = 24576;
constexpr int64_t kGramGradChannels = 8;
// `multiprocessors`: the device's (0: launches not sized to the sums kernel's rounds).
GramWeightGradPlan plan_conv3d_group_norm_mean_gram_weight_grad(
    const Conv3dShape& s, ScalarKind dtype, size_t smem_limit, int64_t multiprocessors,
    size_t partial_bytes = kGramPartialBytes);
// The CUDA backward (defined only in builds with CUDA): `supported` says whether a problem is
// in its family on the current device.
struct OnePassBackwardCudaKernel {
  bool (*supported)(const Conv3dGroupNormMeanBackwardParams&);
  CudaKernel<Conv3dGroupNormMeanBackwardParams> kernel;
};
extern const OnePassBackwardCudaKernel conv3d_group_norm_mean_onepass_backward_cuda;

// The ReLU -> GroupNorm backward's input gradient as a convolution's operand, computed where the
// convolution loads it instead of read from memory (so that no pass writes it):
//   operand[n, c, s] = relu_group_norm_input_grad(coefficients[n * C + c], conv_output[n, c, s],
//                                                 grad_output[n, c, s])
// (group_norm_math.h), s over the D * H * W positions, C the operand's channels: the input
// gradient's convolution and the weight gradient's of a transposed convolution that runs as its
// forward rewrite (conv_stage.cpp), whose conv output the GroupNorm normalised. Float32, each
// tensor contiguous and 16-byte aligned; D * H * W a multiple of 4 (the tensor maps' strides).
struct ReluGroupNormGradOperand {
  const float* grad_output = nullptr;   // (N, C, D, H, W): the GroupNorm's output gradient
  const float* conv_output = nullptr;   // (N, C, D, H, W): the saved conv output, before the ReLU
  const float* coefficients = nullptr;  // (N * C, 3): (c1, c2, c3) per (n, c)
  FUSED_OPS_HOST_DEVICE bool defined() const { return grad_output != nullptr; }
};

// A forward 3-d convolution in float32, channels last, one conv group: x (N, D, H, W, C_in),
// weight (C_out, kD, kH, kW, C_in), bias (C_out; required: pass zeros for none), y (N, Do, Ho,
// Wo, C_out); all contiguous, x and y 16-byte aligned (the kernels' 16-byte copies and stores).
// `conv` gives the sizes in the usual (channels-first) names.
struct Conv3dChannelsLastParams {
  Conv3dShape conv;
  const float* x;
  const float* weight;
  const float* bias;
  float* y;
  // Optional (null: none; only where forward_relu_moments_supported): per (n, c_out) the
  // moments (mean, M2) of relu(y) over the sample's positions, [N][C_out], computed by the
  // convolution from its output tiles in shared memory: what a ReLU -> GroupNorm of y needs,
  // without reading y back.
  norm::Moments* relu_channel_moments;
  // Plain TF32 products (one tensor-core product per float32 product, as cuDNN's with
  // PyTorch's allow_tf32) instead of split-TF32 ones: forward takes them where
  // forward_tf32_supported (tf32_relu_group_norm_forward's launch sets them too). The
  // weights are rounded to TF32 (to nearest); x is read by the tensor cores as it lies, which
  // drops its low 13 bits (toward zero) unless it holds TF32 values: the callers round it (x's
  // transpose in the pipelined forward; the GroupNorm backward for the input gradient's dy).
  bool tf32_products = false;
  // y NCDHW (N, C_out, Do, Ho, Wo) instead of NDHWC: forward takes it where
  // forward_channels_first_supported (the wgmma kernel stages its tiles transposed and stores
  // them by tensor-map copies), without relu_channel_moments.
  bool y_channels_first = false;
  // `weight` is the transposed convolution's whose forward rewrite this is, (C_in, C_out, kD,
  // kH, kW) with one conv group, which the wgmma kernels' weight split reads flipped
  // (tf32_relu_group_norm_forward's launch only; saves the flip's and the permute's passes).
  bool weight_of_transposed = false;
  // Where defined (forward takes it where norm_grad_operand_supported, with y_channels_first):
  // x is this operand, computed as the plane-box kernel loads it (x itself null); with
  // tf32_products it is rounded to TF32 there.
  ReluGroupNormGradOperand x_from_norm;
};

// ConvTranspose3d -> ReLU -> GroupNorm's inference forward with TF32 products, pipelined
// (SplitTf32Conv3dCudaKernel::tf32_relu_group_norm_forward): the convolution is conv's forward
// rewrite (tf32_products: the launch sets it), whose NDHWC input conv.x the launch fills from
// x_ncdhw (N, C_in, D, H, W; transposed and rounded to TF32 as it goes) and whose output conv.y
// (NDHWC) it writes, with the statistics (conv.relu_channel_moments: ignored, the launch keeps them
// in its workspace); the GroupNorm is group_norm (float32, channels_last, x = conv.y,
// channel_moments ignored): its output y (N, C_out, Do, Ho, Wo), mean and rstd (N, G) written.
struct Tf32ConvReluGroupNormParams {
  Conv3dChannelsLastParams conv;
  const float* x_ncdhw;
  norm::ReluGroupNormForwardParams group_norm;
};

// The weight gradient of that convolution: x (N, D, H, W, C_in) and grad_y (N, Do, Ho, Wo,
// C_out) contiguous, grad_weight (C_out, kD, kH, kW, C_in) written.
struct Conv3dWeightGradChannelsLastParams {
  Conv3dShape conv;
  const float* x;
  const float* grad_y;
  float* grad_weight;
};

// The same weight gradient with x in NCDHW, the layout the module's input comes in (no
// transpose of x): grad_y (N, Do, Ho, Wo, C_out) and grad_weight as above.
struct Conv3dWeightGradNcdhwInputParams {
  Conv3dShape conv;
  const float* x;  // (N, C_in, D, H, W) contiguous
  const float* grad_y;
  float* grad_weight;
  // true: split-TF32 products (float32-grade); false: plain TF32 products (PyTorch's
  // allow_tf32 mode, as accurate as cuDNN's TF32 kernels and 3x fewer products).
  bool split_tf32;
  // Where defined (grad_y null then; where norm_grad_operand_supported): grad_y is this operand
  // (channels C_out, positions Do * Ho * Wo), computed as the kernel loads it.
  ReluGroupNormGradOperand grad_y_from_norm = {};
};

// Whether the split-TF32 tensor-core convolution (split_tf32_conv3d.cuh) takes this shape: one
// conv group, C_in and C_out multiples of 4 (its 16-byte loads and stores), and every size
// and element count within int32 (CUTLASS's problem size). Plain host logic, in every build.
inline bool split_tf32_conv3d_shape_supported(const Conv3dShape& s) {
  constexpr int64_t kMaxBytes = int64_t{1} << 31;  // CUTLASS's 32-bit offsets
  const int64_t x_elements = s.N * s.C_in * s.D * s.H * s.W;
  const int64_t w_elements = s.C_out * s.C_in * s.kD * s.kH * s.kW;
  const int64_t y_elements = s.N * s.C_out * s.Do * s.Ho * s.Wo;
  return s.groups == 1 && s.C_in % 4 == 0 && s.C_out % 4 == 0 && x_elements > 0 && y_elements > 0 &&
         x_elements * 4 < kMaxBytes && w_elements * 4 < kMaxBytes && y_elements * 4 < kMaxBytes;
}

// The split-TF32 convolution and its weight gradient on CUDA (defined only in builds with CUDA
// and CUTLASS; see FUSED_OPS_WITH_CUTLASS): `supported` says whether they run this shape on the
// current device (compute capability 8.0+, enough shared memory, CUTLASS accepts it).
struct SplitTf32Conv3dCudaKernel {
  bool (*supported)(const Conv3dShape&);
  // Which kernel runs the forward on the current device: "wgmma" (Hopper's warpgroup
  // instructions, split_tf32_wgmma_conv3d.cuh: sm_90 devices, for every shape but kernels of
  // more than 32 taps along D, H and W together) or "mma_sync" (CUTLASS's sm80 kernel).
  const char* (*forward_kernel)();
  CudaKernel<Conv3dChannelsLastParams> forward;
  // Whether forward fills relu_channel_moments for this shape on the current device (the
  // wgmma kernel, Do * Ho * Wo >= 128).
  bool (*forward_relu_moments_supported)(const Conv3dShape&);
  // Whether forward writes y NCDHW (y_channels_first) for this shape on the current device (the
  // wgmma kernel, Do * Ho * Wo a multiple of 4; y 16-byte aligned).
  bool (*forward_channels_first_supported)(const Conv3dShape&);
  // Whether forward takes tf32_products for this shape on the current device (the wgmma
  // kernel with the tensor memory accelerator's im2col copies: sm_90; Do * Ho * Wo >= 128;
  // padding and dilated taps within the im2col mode's limits), y in either layout.
  bool (*forward_tf32_supported)(const Conv3dShape&);
  // Whether tf32_relu_group_norm_forward is to run this shape (the forward rewrite's) on the
  // current device: forward_tf32_supported, and where the environment variable
  // FUSED_OPS_TF32_WGMMA (read per call: tests switch it) is "1"; where it is neither "0" nor
  // "1", where expected faster than cuDNN's path (wgmma_tf32_relu_group_norm_preferred).
  bool (*tf32_forward_chosen)(const Conv3dShape&);
  CudaKernel<Tf32ConvReluGroupNormParams> tf32_relu_group_norm_forward;
  CudaKernel<Conv3dWeightGradChannelsLastParams> weight_grad;
  // The weight gradient on Hopper's wgmma (split_tf32_wgmma_wgrad.cuh), x NCDHW: whether it
  // takes the shape on the current device (sm_90, stride 1, kW <= 3, W a multiple of 4, ...),
  // and the kernel; elsewhere weight_grad (CUTLASS's sm80 wgrad) runs with TF32 off, cuDNN's
  // with TF32 on.
  bool (*weight_grad_ncdhw_input_supported)(const Conv3dShape&);
  CudaKernel<Conv3dWeightGradNcdhwInputParams> weight_grad_ncdhw_input;
  // Whether both convolutions of a transposed convolution's backward take their operand from
  // the ReLU -> GroupNorm backward (ReluGroupNormGradOperand) on the current device: forward of
  // `input_grad` (the input gradient's convolution: split_tf32_input_grad_shape) with
  // x_from_norm, and weight_grad_ncdhw_input of `forward` (the forward rewrite) with
  // grad_y_from_norm; with split-TF32 products, or plain TF32 ones where tf32_products.
  bool (*norm_grad_operand_supported)(const Conv3dShape& input_grad, const Conv3dShape& forward,
                                      bool tf32_products);
};
extern const SplitTf32Conv3dCudaKernel split_tf32_conv3d_cuda;

}  // namespace conv
}  // namespace fused_ops
