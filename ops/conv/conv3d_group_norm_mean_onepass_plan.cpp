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
// Tensor cores: float32 products through split TF32 are float32-grade, but the tensor cores
// add into their float32 accumulator without rounding to nearest, and that error grows with
// the reduction's length: measured on an H100 (2026-11-22, benchmarks/numerics.py, TF32 off),
// at C_in = 16, k = 3 (K = 432) the output's error against float64 was 4.7x eager's and the
// GroupNorm weight's gradient 8.7x; at the headline's K = 81, within 2x. So the tensor-core
// kernel takes reductions up to kOnePassTensorCoreMaxReduction = 128, the direct kernel
// (FFMA, rounding every step) the longer ones.
//
// Box choice: every block runs `capacity` position slots, whatever the box's volume, so the
// plan minimises (boxes per sample) * (slot work + footprint loads) over the boxes that fit
// (TW = Wo up to 64, else 32, 16, 8, and every (TD, TH)), a footprint that the tensor-core
// kernel loads as whole input rows by 16-byte copies counting a quarter of the per-element
// walk. (At the Conv3d headline that picks 2 x 8 x 30 boxes of whole 32-float rows over
// 2 x 15 x 16 ones with 512 slots: the per-element walk was ~40% of the kernel's
// instructions, ncu on an H100, 2026-11-23; with wgmma's 384 slots, 2 x 6 x 30.)
#include "conv/conv_kernels.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

namespace fused_ops {
namespace conv {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t round_up_16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// The smallest pitch >= `at_least`, a multiple of `multiple`, whose residue modulo 32 banks is
// in [lo, hi].
int64_t pitch_with_residue(int64_t at_least, int64_t multiple, int64_t lo, int64_t hi) {
  int64_t p = (at_least + multiple - 1) / multiple * multiple;
  while (p % 32 < lo || p % 32 > hi) {
    p += multiple;
  }
  return p;
}

// Items per launch for a kernel run over `items` items in launches of at most `most` items,
// each item `blocks_per_item` blocks of equal work, `resident` blocks running at once (a wave;
// 0: unknown): as few waves (a last wave that fills a fraction of the device takes a whole
// wave's time), then as few launches (at most 4x the fewest: more would cost more than a
// wave), then as few items (the least workspace); where the device's size is unknown, as few
// launches, balanced.
int64_t items_per_launch_in_fewest_waves(int64_t items, int64_t most, int64_t blocks_per_item,
                                         int64_t resident) {
  const int64_t fewest_launches = ceil_div(items, most);
  if (resident <= 0) {
    return ceil_div(items, fewest_launches);
  }
  const auto waves = [&](int64_t chunk) {
    const int64_t rest = items % chunk;
    return items / chunk * ceil_div(chunk * blocks_per_item, resident) +
           (rest > 0 ? ceil_div(rest * blocks_per_item, resident) : 0);
  };
  int64_t best = 0, best_waves = 0, best_launches = 0;
  for (int64_t chunk = std::min(most, items); chunk >= 1; --chunk) {
    const int64_t launches = ceil_div(items, chunk);
    if (launches > 4 * fewest_launches) {
      break;
    }
    const int64_t w = waves(chunk);
    if (best == 0 || w < best_waves || (w == best_waves && launches <= best_launches)) {
      best = chunk, best_waves = w, best_launches = launches;
    }
  }
  return best;
}

// The last kEntries results of a plan function, by its arguments. A CUDA training step of
// Conv3dGroupNormMean asks for the one-pass forward's plan 6 times and the backward's 5 (each
// "supported" check, the workspace's size, the launch), and their box searches took 15-17 us
// each on the 2-core development VM (2026-11-27): ~0.18 ms of host time a step, where the host
// issues a step in about the GPU's time (benchmarks/h100-2026-11-27-gram-rounds/notes.txt). Keys
// hold int64_t fields only (no padding: compared bytewise); plans are returned by value.
template <typename Key, typename Plan>
class PlanMemo {
  static_assert(std::has_unique_object_representations_v<Key>, "a key is compared bytewise");

 public:
  template <typename Compute>
  Plan get(const Key& key, const Compute& compute) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int i = 0; i < filled_; ++i) {
        if (std::memcmp(&entries_[i].key, &key, sizeof(Key)) == 0) {
          return entries_[i].plan;
        }
      }
    }
    // (Computed outside the lock: two threads may both compute a missing plan, the same one.)
    const Plan plan = compute();
    std::lock_guard<std::mutex> lock(mutex_);
    entries_[next_] = Entry{key, plan};
    next_ = (next_ + 1) % kEntries;
    filled_ = std::min(filled_ + 1, kEntries);
    return plan;
  }

 private:
  static constexpr int kEntries = 8;
  struct Entry {
    Key key;
    Plan plan;
  };
  std::mutex mutex_;
  std::array<Entry, kEntries> entries_{};
  int next_ = 0, filled_ = 0;
};

// A problem the backward's kernels can plan at all: every input and output size positive, and
// the channels split evenly by the conv groups.
bool nonempty_grouped(const Conv3dShape& s) {
  return s.groups > 0 && s.C_in % s.groups == 0 && s.C_out % s.groups == 0 && s.N > 0 && s.Do > 0 &&
         s.Ho > 0 && s.Wo > 0 && s.D > 0 && s.H > 0 && s.W > 0;
}

}  // namespace

size_t onepass_tensor_core_weight_bytes(int64_t k_pad, int64_t cb, bool wgmma) {
  return wgmma ? static_cast<size_t>(ceil_div(k_pad, 32) * cb) * 2 * 128 + 1008
               : static_cast<size_t>(k_pad * cb) * 2 * sizeof(float);
}

FootprintPitches footprint_pitches(int64_t FD, int64_t FH, int64_t FW, bool padded) {
  if (!padded) {
    return FootprintPitches{FW, FH * FW, FD * FH * FW};
  }
  const int64_t multiple = FW % 4 == 0 ? 4 : 1;
  const int64_t row = pitch_with_residue(FW, multiple, 16, 20);
  const int64_t plane = pitch_with_residue(FH * row, multiple, 16, 16);
  return FootprintPitches{row, plane, pitch_with_residue(FD * plane, multiple, 24, 24)};
}

namespace {

OnePassPlan plan_onepass(const Conv3dShape& s, ScalarKind dtype, size_t smem_limit,
                         bool tensor_cores, bool wgmma) {
  OnePassPlan plan;
  if (s.groups <= 0 || s.C_in % s.groups != 0 || s.C_out % s.groups != 0 || s.N <= 0 || s.Do <= 0 ||
      s.Ho <= 0 || s.Wo <= 0) {
    return plan;
  }
  // The finalize kernel keeps every channel's moments and exact mean, and every GroupNorm
  // group's statistics (at most one group per channel), in shared memory.
  if (static_cast<size_t>(s.C_out) * 5 * sizeof(double) + 256 * sizeof(double) > smem_limit) {
    return plan;
  }
  const size_t acc_bytes = dtype == ScalarKind::kDouble ? 8 : 4;
  plan.c_in_g = s.C_in / s.groups;
  plan.c_out_g = s.C_out / s.groups;
  plan.K = plan.c_in_g * s.kD * s.kH * s.kW;
  if (plan.K > kOnePassMaxReduction) {
    return plan;
  }
  plan.tensor_cores =
      dtype == ScalarKind::kFloat && tensor_cores && plan.K <= kOnePassTensorCoreMaxReduction;
  plan.k_pad = plan.tensor_cores ? ceil_div(plan.K, 8) * 8 : plan.K;
  // (On wgmma, 3 m16 tiles a warp rather than 4: the accumulators and fragments take 20
  // fewer registers, and at the Conv3d headline the 2 x 6 x 30 boxes fill their 384 slots as
  // 2 x 8 x 30 filled 512 while Ho = 30 splits into whole boxes: 6% fewer slots, 7040 tiles
  // instead of 5632 (26.7 rounds of the persistent grid instead of 21.3). Kernel 175.0 ->
  // 174.1 us alone, 173.1 -> 170.2 us with the k loop's prefetch, H200, 2026-11-29.)
  plan.capacity = plan.tensor_cores ? onepass_tensor_core_capacity(wgmma) : kOnePassDirectCapacity;
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

  // Shared memory: the chunk's weights ([K][cb] values for the direct kernel; [k_pad][cb]
  // (high, low) TF32 pairs for the tensor-core one, in its products' layout:
  // onepass_tensor_core_weight_bytes), the taps' offsets [k_pad], the footprint
  // buffers (footprint_buffers of them), the reduction scratch, and the row table if any.
  const size_t weight_bytes = plan.tensor_cores
                                  ? onepass_tensor_core_weight_bytes(plan.k_pad, plan.cb, wgmma)
                                  : plan.K * plan.cb * acc_bytes;
  plan.koff_offset = round_up_16(weight_bytes);
  plan.footprint_offset = plan.koff_offset + round_up_16(plan.k_pad * sizeof(int));
  const size_t scratch_bytes =
      plan.tensor_cores
          ? kOnePassTensorCoreScratchBytesPerChannel * plan.cb + kOnePassTensorCoreScratchBytes
          : kOnePassDirectScratchBytesPerChannel * plan.cb;
  plan.footprint_buffers = plan.tensor_cores ? 2 : 1;
  // The tensor-map copies (OnePassPlan::tma_footprint): on wgmma, x's rows 16-byte multiples
  // (the map's strides) and every box's first column a multiple of 4 (the copy engine faults on
  // an innermost coordinate that is not 16-byte aligned:
  // benchmarks/h200-2026-11-28-norm-grad-operand), box sides of at most 256.
  const bool tma_kernel =
      plan.tensor_cores && wgmma && s.W % 4 == 0 && s.padding[2] % 4 == 0 && plan.c_in_g <= 256;
  double best_cost = std::numeric_limits<double>::infinity();
  const int64_t tw_options[] = {std::min<int64_t>(s.Wo, 64), std::min<int64_t>(s.Wo, 32),
                                std::min<int64_t>(s.Wo, 16), std::min<int64_t>(s.Wo, 8)};
  for (const int64_t TW : tw_options) {
    for (int64_t TH = 1; TH <= std::min(s.Ho, plan.capacity / TW); ++TH) {
      for (int64_t TD = 1; TD <= std::min(s.Do, plan.capacity / (TW * TH)); ++TD) {
        const int64_t FD = (TD - 1) * s.stride[0] + (s.kD - 1) * s.dilation[0] + 1;
        const int64_t FH = (TH - 1) * s.stride[1] + (s.kH - 1) * s.dilation[1] + 1;
        const int64_t FW = (TW - 1) * s.stride[2] + (s.kW - 1) * s.dilation[2] + 1;
        FootprintPitches pitches = footprint_pitches(FD, FH, FW, plan.tensor_cores);
        // (The tensor-map layout's plane and channel pitches are the box's, FH and FD times
        // the row pitch; a row pitch of 20 modulo 32 spreads a warp's fragment loads over the
        // banks at 3 m16 tiles a warp: benchmarks/h200-2026-11-29-wgmma-m-tiles/.)
        const int64_t tma_row = pitch_with_residue(ceil_div(FW, 4) * 4, 4, 20, 20);
        const bool tma = tma_kernel && (ceil_div(s.Wo, TW) == 1 || (TW * s.stride[2]) % 4 == 0) &&
                         tma_row <= 256 && FH <= 256 && FD <= 256;
        if (tma) {  // the box's layout: the padded row (16-byte multiple), dense above it
          pitches = FootprintPitches{tma_row, FH * tma_row, FD * FH * tma_row};
        }
        const int64_t footprint = plan.c_in_g * pitches.channel;
        // (Offsets into the footprint are 32-bit.)
        if (footprint >= (int64_t{1} << 30)) {
          continue;
        }
        const bool whole_rows =
            dtype == ScalarKind::kFloat && boxes_are_whole_input_rows(s, FW, ceil_div(s.Wo, TW));
        // The tensor-core kernel's table of the footprint's rows (whole rows only; the rows'
        // x offsets from the box's corner, ((ci * D + fd) * H + fh) * W, in 32 bits). Tensor-map
        // plans keep it for the asynchronous copies where the map is not used.
        const bool row_table =
            plan.tensor_cores && whole_rows &&
            (((plan.c_in_g - 1) * s.D + FD - 1) * s.H + FH - 1) * s.W < (int64_t{1} << 31);
        const size_t row_table_bytes = row_table ? plan.c_in_g * FD * FH * sizeof(int) * 4 : 0;
        const size_t buffer_bytes =
            tma ? (footprint * acc_bytes + 127) / 128 * 128 : round_up_16(footprint * acc_bytes);
        const size_t smem = plan.footprint_offset + (tma ? kOnePassTmaAlignSlack : 0) +
                            plan.footprint_buffers * buffer_bytes + scratch_bytes + row_table_bytes;
        if (smem > smem_limit) {
          continue;
        }
        const int64_t boxes = ceil_div(s.Do, TD) * ceil_div(s.Ho, TH) * ceil_div(s.Wo, TW);
        // Per box: the slots' multiply-adds, and the footprint's loads (a load ~ 8 of them;
        // where a float32 kernel loads whole input rows by 16-byte copies, a quarter of that;
        // at run time it also needs x 16-byte aligned).
        const double load_cost = whole_rows ? 2.0 : 8.0;  // (not yet measured for tma)
        const double cost = static_cast<double>(boxes) *
                            (static_cast<double>(plan.capacity * plan.K * plan.cb) +
                             load_cost * static_cast<double>(plan.c_in_g * FD * FH * FW));
        if (cost < best_cost) {
          best_cost = cost;
          plan.TD = TD;
          plan.TH = TH;
          plan.TW = TW;
          plan.FD = FD;
          plan.FH = FH;
          plan.FW = FW;
          plan.row_pitch = pitches.row;
          plan.plane_pitch = pitches.plane;
          plan.channel_pitch = pitches.channel;
          plan.footprint = footprint;
          plan.footprint_bytes = buffer_bytes;
          plan.tma_footprint = tma;
          plan.row_table_offset = row_table ? smem - row_table_bytes : 0;
          plan.smem_bytes = smem;
        }
      }
    }
  }
  if (plan.TD == 0) {
    return plan;  // no box fits
  }
  plan.scratch_offset = plan.footprint_offset + (plan.tma_footprint ? kOnePassTmaAlignSlack : 0) +
                        plan.footprint_buffers * plan.footprint_bytes;
  // Windows: each quad of lanes takes ceil(rows / 4) triples, 3 slots each, 2 slots a K step
  // (pairs of triples in 3 steps, an odd last one in 2); only where that is no more K steps
  // than the taps' own (at the Conv3d headline, 27 rows: 11 steps either way).
  if (plan.tensor_cores && wgmma && s.kW == 3 && s.stride[2] == 1 && s.dilation[2] == 1 &&
      plan.TW % 6 == 0 && plan.row_pitch % 2 == 0 && plan.plane_pitch % 2 == 0 &&
      plan.channel_pitch % 2 == 0) {
    const int64_t rows = plan.c_in_g * s.kD * s.kH;
    const int64_t triples = ceil_div(rows, 4);
    if (8 * ceil_div(3 * triples, 2) == plan.k_pad) {
      plan.windows = true;
      plan.window_rows = rows;
      plan.window_triples = triples;
    }
  }
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
  // Per tile and channel of the chunk: the direct kernel's (mean, M2) doubles, the tensor-core
  // kernel's (deviations, shift, squares, count) floats of each of its groups of warps.
  plan.workspace_bytes = static_cast<size_t>(plan.tiles * plan.cb) * 2 * sizeof(double) *
                         (plan.tensor_cores ? kOnePassTensorCoreWarpGroups : 1);
  plan.supported = true;
  return plan;
}

}  // namespace

OnePassPlan plan_conv3d_group_norm_mean_onepass(const Conv3dShape& s, ScalarKind dtype,
                                                size_t smem_limit, bool tensor_cores, bool wgmma) {
  struct Key {
    Conv3dShape s;
    int64_t dtype, smem_limit, tensor_cores, wgmma;
  };
  static PlanMemo<Key, OnePassPlan> memo;
  const Key key{s, static_cast<int64_t>(dtype), static_cast<int64_t>(smem_limit), tensor_cores,
                wgmma};
  return memo.get(key, [&] {
    const OnePassPlan plan = plan_onepass(s, dtype, smem_limit, tensor_cores, wgmma);
    if (!plan.supported && plan.tensor_cores) {
      // (A footprint that the tensor-core kernel's two buffers cannot hold may fit the direct
      // kernel's one.)
      return plan_onepass(s, dtype, smem_limit, false, wgmma);
    }
    return plan;
  });
}

namespace {

// The backward plan. Family: the forward's (reduction length at most kOnePassMaxReduction),
// whose boxes fit the shared memory.
//
// Along one dim, the outputs whose gradient reaches input positions [p0, p0 + B) are the s
// with s * stride - padding + k * dilation in that range for some tap k: at most
// (B - 1 + (k - 1) * dilation) / stride + 1 of them (and at most the output size); their input
// footprint spans (R - 1) * stride + (k - 1) * dilation + 1 positions.
//
// Box choice: per box, the kernel recomputes the convolution over the region (R positions)
// and computes two products over the box (input gradient; weight gradient of the owned
// outputs, about one per input position at stride 1), so the plan minimises
// (boxes per sample) * (region + 2 * box) * K, plus the footprint's loads (by rows of 32).
OnePassBackwardPlan plan_onepass_backward(const Conv3dShape& s, ScalarKind dtype,
                                          size_t smem_limit) {
  OnePassBackwardPlan plan;
  if (!nonempty_grouped(s)) {
    return plan;
  }
  const size_t acc_bytes = dtype == ScalarKind::kDouble ? 8 : 4;
  constexpr int64_t cb = kOnePassBackwardChannels;
  plan.c_in_g = s.C_in / s.groups;
  plan.c_out_g = s.C_out / s.groups;
  plan.K = plan.c_in_g * s.kD * s.kH * s.kW;
  if (plan.K > kOnePassMaxReduction) {
    return plan;
  }
  plan.chunks = ceil_div(plan.c_out_g, cb);
  plan.koff_offset = round_up_16(plan.K * cb * acc_bytes);
  plan.region_offset = plan.koff_offset + round_up_16(plan.K * sizeof(int));

  auto region_of = [](int64_t B, int64_t k, int64_t stride, int64_t dilation, int64_t out) {
    return std::min(out, (B - 1 + (k - 1) * dilation) / stride + 1);
  };
  auto footprint_of = [](int64_t R, int64_t k, int64_t stride, int64_t dilation) {
    return (R - 1) * stride + (k - 1) * dilation + 1;
  };
  double best_cost = std::numeric_limits<double>::infinity();
  const int64_t bw_options[] = {std::min<int64_t>(s.W, 32), std::min<int64_t>(s.W, 16),
                                std::min<int64_t>(s.W, 8), std::min<int64_t>(s.W, 4)};
  for (const int64_t BW : bw_options) {
    for (int64_t BH = 1; BH <= std::min(s.H, kOnePassBackwardBoxCapacity / BW); ++BH) {
      for (int64_t BD = 1; BD <= std::min(s.D, kOnePassBackwardBoxCapacity / (BW * BH)); ++BD) {
        const int64_t RD = region_of(BD, s.kD, s.stride[0], s.dilation[0], s.Do);
        const int64_t RH = region_of(BH, s.kH, s.stride[1], s.dilation[1], s.Ho);
        const int64_t RW = region_of(BW, s.kW, s.stride[2], s.dilation[2], s.Wo);
        const int64_t FD = footprint_of(RD, s.kD, s.stride[0], s.dilation[0]);
        const int64_t FH = footprint_of(RH, s.kH, s.stride[1], s.dilation[1]);
        const int64_t FW = footprint_of(RW, s.kW, s.stride[2], s.dilation[2]);
        const int64_t region = RD * RH * RW;
        const int64_t footprint = plan.c_in_g * FD * FH * FW;
        const int64_t box = BD * BH * BW;
        // (Offsets into the footprint are ints, as are the region table's entries.)
        if (footprint >= (int64_t{1} << 30)) {
          continue;
        }
        const size_t owned_offset = plan.region_offset + round_up_16(region * sizeof(int));
        const size_t owned_dims_offset = owned_offset + round_up_16(region * sizeof(int));
        const size_t footprint_offset =
            owned_dims_offset + round_up_16((3 + RD + RH + RW) * sizeof(int));
        const size_t dy_offset = footprint_offset + round_up_16(footprint * acc_bytes);
        const size_t dx_offset = dy_offset + round_up_16(region * cb * acc_bytes);
        const size_t coef_offset = dx_offset + round_up_16(plan.c_in_g * box * acc_bytes);
        const size_t smem = coef_offset + round_up_16(3 * cb * acc_bytes);
        if (smem > smem_limit) {
          continue;
        }
        const int64_t boxes = ceil_div(s.D, BD) * ceil_div(s.H, BH) * ceil_div(s.W, BW);
        // (A warp loads a footprint row of up to 32 elements at once: narrow rows waste lanes.)
        const int64_t row_loads = plan.c_in_g * FD * FH * ceil_div(FW, 32) * 32;
        const double cost = static_cast<double>(boxes) *
                            (static_cast<double>((region + 2 * box) * plan.K * plan.c_out_g) +
                             8.0 * static_cast<double>(row_loads));
        if (cost < best_cost) {
          best_cost = cost;
          plan.BD = BD;
          plan.BH = BH;
          plan.BW = BW;
          plan.box = box;
          plan.RD = RD;
          plan.RH = RH;
          plan.RW = RW;
          plan.region = region;
          plan.FD = FD;
          plan.FH = FH;
          plan.FW = FW;
          plan.footprint = footprint;
          plan.owned_offset = owned_offset;
          plan.owned_dims_offset = owned_dims_offset;
          plan.footprint_offset = footprint_offset;
          plan.dy_offset = dy_offset;
          plan.dx_offset = dx_offset;
          plan.coef_offset = coef_offset;
          plan.smem_bytes = smem;
        }
      }
    }
  }
  if (plan.BD == 0) {
    return plan;  // no box fits
  }
  plan.boxes_d = ceil_div(s.D, plan.BD);
  plan.boxes_h = ceil_div(s.H, plan.BH);
  plan.boxes_w = ceil_div(s.W, plan.BW);
  plan.boxes = plan.boxes_d * plan.boxes_h * plan.boxes_w;
  plan.tiles = s.N * s.groups * plan.boxes;
  // (The kernel indexes tiles, sizes and a sample's elements in 32 bits.)
  constexpr int64_t kMax32 = (int64_t{1} << 31) - 1;
  if (plan.tiles > kMax32 || s.D * s.H * s.W > kMax32 || s.Do * s.Ho * s.Wo > kMax32) {
    return plan;
  }
  plan.supported = true;
  return plan;
}

}  // namespace

OnePassBackwardPlan plan_conv3d_group_norm_mean_onepass_backward(const Conv3dShape& s,
                                                                 ScalarKind dtype,
                                                                 size_t smem_limit) {
  struct Key {
    Conv3dShape s;
    int64_t dtype, smem_limit;
  };
  static PlanMemo<Key, OnePassBackwardPlan> memo;
  return memo.get(Key{s, static_cast<int64_t>(dtype), static_cast<int64_t>(smem_limit)},
                  [&] { return plan_onepass_backward(s, dtype, smem_limit); });
}

// The lag input gradient's plan (conv_kernels.h has the identity). Per dim, the tap ranges
// V(p) of the input positions are few (at most kLagMaxPatterns for k <= 3): their product is
// the set of tables per (sample, conv group). Along D, columns of kLagMaxTileD positions, the
// rest in columns of 8, 4, 2 and 1 (kernel templates): no position is computed twice.
LagInputGradPlan plan_conv3d_group_norm_mean_lag_input_grad(const Conv3dShape& s,
                                                            int64_t num_groups, ScalarKind dtype,
                                                            size_t smem_limit,
                                                            int64_t multiprocessors,
                                                            size_t table_bytes) {
  LagInputGradPlan plan;
  if (!nonempty_grouped(s) || num_groups <= 0 || s.C_out % num_groups != 0) {
    return plan;
  }
  const int64_t in[3] = {s.D, s.H, s.W}, out[3] = {s.Do, s.Ho, s.Wo}, k[3] = {s.kD, s.kH, s.kW};
  for (int d = 0; d < 3; ++d) {
    if (s.stride[d] != 1 || k[d] < 1 || k[d] > kLagMaxTaps) {
      return plan;
    }
  }
  if (s.kD != kLagMaxTaps || s.dilation[0] != 1) {
    return plan;  // (the kernel's column: 5 lags along D, consecutive footprint planes)
  }
  if (dtype == ScalarKind::kDouble) {
    return plan;  // (its column's sums and table rows in double spill registers)
  }
  plan.c_in_g = s.C_in / s.groups;
  plan.c_out_g = s.C_out / s.groups;
  if (plan.c_in_g > kLagMaxInputChannels) {
    return plan;
  }
  const int64_t taps = s.kD * s.kH * s.kW;
  for (int d = 0; d < 3; ++d) {
    plan.span[d] = 2 * k[d] - 1;
  }
  // Products per input position and input channel: the tables' against the direct input
  // gradient's (which also needs the recomputed output around it).
  if (plan.c_in_g * plan.span[0] * plan.span[1] * plan.span[2] > plan.c_out_g * taps) {
    return plan;
  }
  plan.row = ceil_div(plan.span[0] * plan.c_in_g, 4) * 4;
  for (int d = 0; d < 3; ++d) {
    for (auto& id : plan.pattern_id[d]) {
      id = -1;
    }
    int64_t count = 0;
    for (int64_t p = 0; p < in[d]; ++p) {
      const TapRange r = lag_tap_range(p, out[d], k[d], s.padding[d], s.dilation[d]);
      int8_t& id = plan.pattern_id[d][r.lo * kLagMaxTaps + r.hi];
      if (id < 0) {
        id = static_cast<int8_t>(count);
        plan.pattern_lo[d][count] = static_cast<int8_t>(r.lo);
        plan.pattern_hi[d][count] = static_cast<int8_t>(r.hi);
        ++count;
      }
    }
    plan.patterns[d] = count;
  }
  plan.d_tiles = s.D / kLagMaxTileD;
  for (int64_t part = kLagRestTileD; part > 0; part /= 2) {
    plan.d_tiles += ((s.D % kLagMaxTileD) & part) != 0 ? 1 : 0;
  }
  plan.h_tiles = ceil_div(s.H, kLagTileH);
  plan.w_tiles = ceil_div(s.W, kLagTileW);
  plan.FH = kLagTileH + (plan.span[1] - 1) * s.dilation[1];
  plan.FW = kLagTileW + (plan.span[2] - 1) * s.dilation[2];
  const size_t acc_bytes = dtype == ScalarKind::kDouble ? 8 : 4;
  // (c_in_g x FH x FW columns of a tile's planes, lag_column_pitch apart: those of the deepest
  // D column the plan has, 12 + 4 planes where D >= 12.)
  int64_t deepest = kLagMaxTileD;
  while (deepest > s.D) {
    deepest = deepest == kLagMaxTileD ? kLagRestTileD : deepest / 2;
  }
  plan.smem_bytes = static_cast<size_t>(plan.c_in_g * lag_column_pitch(deepest + plan.span[0] - 1) *
                                        plan.FH * plan.FW) *
                    acc_bytes;
  if (plan.smem_bytes > smem_limit) {
    return plan;
  }
  const int64_t P = plan.patterns[0] * plan.patterns[1] * plan.patterns[2];
  plan.table_elems = P * plan.c_in_g * plan.span[1] * plan.span[2] * plan.row;
  const int64_t reduction = plan.c_in_g * taps;
  if (static_cast<size_t>(reduction * reduction) * 8 > smem_limit) {
    return plan;  // (the tables kernel stages Q in shared memory: 93 KB at most, K = 108)
  }
  const int64_t items = s.N * s.groups;
  // The segments: per conv group, the GroupNorm groups of its first and last channel and those
  // between.
  const int64_t group_channels = s.C_out / num_groups;
  for (int64_t cg = 0; cg < s.groups; ++cg) {
    const int64_t first = cg * plan.c_out_g / group_channels;
    const int64_t last = ((cg + 1) * plan.c_out_g - 1) / group_channels;
    plan.segments_per_group = std::max(plan.segments_per_group, last - first + 1);
  }
  const int64_t segment_bytes =
      s.groups * plan.segments_per_group * (reduction * reduction + plan.table_elems) * 8;
  plan.segment_tables = s.groups * plan.segments_per_group < items &&
                        segment_bytes <= static_cast<int64_t>(kLagSegmentTableBytes) &&
                        plan.segments_per_group <= kLagMaxCombineSegments;
  // An item's workspace: its tables, and without segment tables its Q in double.
  const int64_t item_bytes = plan.table_elems * static_cast<int64_t>(acc_bytes) +
                             (plan.segment_tables ? 0 : reduction * reduction * 8);
  const int64_t most = std::min<int64_t>(
      std::max<int64_t>(1, static_cast<int64_t>(table_bytes) / item_bytes), 65535);
  // As few waves of the input-gradient kernel, then as few launches.
  const int64_t resident =
      multiprocessors *
      std::min<int64_t>(kLagBlocksPerMultiprocessor,
                        static_cast<int64_t>(smem_limit / std::max<size_t>(plan.smem_bytes, 1)));
  plan.items_per_chunk = items_per_launch_in_fewest_waves(
      items, most, plan.d_tiles * plan.h_tiles * plan.w_tiles, resident);
  // (The kernels index a sample's elements, grid sizes and table elements in 32 bits; the D
  // columns, the tables kernel's blocks per source and, with segment tables, the conv groups are
  // grid dims of at most 65535.)
  constexpr int64_t kMax32 = (int64_t{1} << 31) - 1;
  const int64_t table_threads = P * plan.c_in_g * plan.span[0] * plan.span[1] * plan.span[2];
  // (The kernels compute tap ranges in int, lag_tap_range: a position plus the padding, the
  // output extent plus the padding, the dilation.)
  bool ranges_fit = true;
  for (int d = 0; d < 3; ++d) {
    ranges_fit =
        ranges_fit && std::max(in[d], out[d]) + s.padding[d] <= kMax32 && s.dilation[d] <= kMax32;
  }
  if (!ranges_fit || s.D * s.H * s.W > kMax32 || s.N * s.C_in > kMax32 ||
      plan.items_per_chunk * plan.table_elems > kMax32 || plan.w_tiles * plan.h_tiles > kMax32 ||
      plan.d_tiles > 65535 || ceil_div(table_threads, 256) > 65535 ||
      (plan.segment_tables && s.groups > 65535)) {
    return plan;
  }
  plan.supported = true;
  return plan;
}

GramWeightGradPlan plan_conv3d_group_norm_mean_gram_weight_grad(const Conv3dShape& s,
                                                                ScalarKind dtype, size_t smem_limit,
                                                                int64_t multiprocessors,
                                                                size_t partial_bytes) {
  GramWeightGradPlan plan;
  if (!nonempty_grouped(s) || dtype == ScalarKind::kDouble) {
    return plan;  // (float sums: the double kernel would spill its accumulators)
  }
  const int64_t in[3] = {s.D, s.H, s.W}, out[3] = {s.Do, s.Ho, s.Wo}, k[3] = {s.kD, s.kH, s.kW};
  for (int d = 0; d < 3; ++d) {
    if (s.stride[d] != 1 || k[d] < 1 || k[d] > kGramMaxTaps || s.dilation[d] < 1) {
      return plan;
    }
    plan.E[d] = in[d] + 2 * s.padding[d];
    plan.reach[d] = (k[d] - 1) * s.dilation[d];
    if (plan.E[d] != out[d] + plan.reach[d]) {
      return plan;
    }
  }
  plan.c_in_g = s.C_in / s.groups;
  plan.c_out_g = s.C_out / s.groups;
  if (plan.c_in_g > kGramMaxInputChannels || plan.E[2] > kGramMaxWidth) {
    return plan;
  }
  // The classes of D and H: the intervals between the boxes' borders.
  for (int d = 0; d < 2; ++d) {
    std::vector<int64_t> borders;
    for (int64_t k1 = 0; k1 < k[d]; ++k1) {
      borders.push_back(k1 * s.dilation[d]);
      borders.push_back(k1 * s.dilation[d] + out[d]);
    }
    std::sort(borders.begin(), borders.end());
    borders.erase(std::unique(borders.begin(), borders.end()), borders.end());
    // (borders run from 0 to E: tap 0's box starts at 0, the last one's ends at E.)
    for (size_t i = 0; i + 1 < borders.size(); ++i) {
      const int64_t c = plan.classes[d]++;
      plan.class_lo[d][c] = static_cast<int32_t>(borders[i]);
      plan.class_hi[d][c] = static_cast<int32_t>(borders[i + 1]);
      for (int64_t k1 = 0; k1 < k[d]; ++k1) {
        if (borders[i] >= k1 * s.dilation[d] && borders[i + 1] <= k1 * s.dilation[d] + out[d]) {
          plan.box_mask[d][c] |= static_cast<uint8_t>(1u << k1);
        }
      }
    }
  }
  const uint8_t every_box = static_cast<uint8_t>((1u << k[1]) - 1);
  for (int64_t c = 0; c < plan.classes[1]; ++c) {
    if (plan.box_mask[1][c] != every_box) {
      plan.edge_class[plan.edge_classes++] = static_cast<int8_t>(c);
    }
  }
  plan.warps = (k[0] - 1) * (2 * k[2] - 1) + k[2];
  const int64_t values = plan.c_in_g * plan.c_in_g * (2 * k[1] - 1);
  const int64_t edge_lanes = 2 * plan.reach[2];
  plan.value_stride = ceil_div(values, 4) * 4;
  plan.piece_floats = plan.warps * plan.value_stride * (1 + edge_lanes);
  plan.margin = ceil_div(plan.reach[2], 4) * 4;
  plan.row_floats = kGramMaxWidth + 2 * plan.margin;
  plan.whole_rows = s.padding[2] == 0 && s.W == kGramMaxWidth;
  if (plan.row_floats > plan.warps * kGramMaxWidth) {
    return plan;  // (a window row's columns are spread over the block's threads)
  }
  // The window of a unit: its planes and rows with the lags' reach (along D above it only: the
  // kernel's lags dd are >= 0), a row of row_floats per (plane, row). The sums kernel keeps two
  // (the next unit's copies overlap this one's products).
  const auto window = [&](int64_t planes, int64_t rows) {
    return static_cast<size_t>(plan.c_in_g * (planes + plan.reach[0]) * (rows + 2 * plan.reach[1]) *
                               plan.row_floats) *
           sizeof(float);
  };
  // A grid of chunks along D for units of `rows` rows: from `most` planes, halved while two
  // windows would not fit, then the fewest chunks of that size cut into equal ones.
  const auto chunk_planes = [&](int64_t most, int64_t rows, int64_t& planes, int64_t& chunks) {
    planes = most;
    while (planes > 1 && 2 * window(planes, rows) > smem_limit) {
      planes /= 2;
    }
    chunks = ceil_div(plan.E[0], planes);
    planes = ceil_div(plan.E[0], chunks);
  };
  // Bulk units of ~128 rows (four planes of 32 at the headline: a unit's copies and barrier
  // amortised over more rows), fewer planes where two windows would not fit; chunks of equal
  // size along D and H.
  plan.h_chunks = ceil_div(plan.E[1], kGramMaxWidth);
  plan.bulk_rows = ceil_div(plan.E[1], plan.h_chunks);
  chunk_planes(std::min(plan.E[0], std::max<int64_t>(1, 128 / plan.bulk_rows)), plan.bulk_rows,
               plan.bulk_planes, plan.bulk_d_chunks);
  plan.smem_bytes = window(plan.bulk_planes, plan.bulk_rows);
  // Edge groups: consecutive edge classes whose rows with the reach along H overlap or touch
  // share a window (rows 0 and 1 at the headline: 6 rows where apart each took 5), as long as
  // it is no taller than a bulk unit's.
  const auto group_rows = [&](int64_t first, int64_t last) -> int64_t {  // reach aside
    return plan.class_hi[1][plan.edge_class[last]] - plan.class_lo[1][plan.edge_class[first]];
  };
  int64_t edge_rows = 0;
  for (int64_t e = 0; e < plan.edge_classes; ++e) {
    const int64_t first = plan.edge_group_begin[plan.edge_groups];
    const bool joins = e > first &&
                       plan.class_lo[1][plan.edge_class[e]] - plan.reach[1] <=
                           plan.class_hi[1][plan.edge_class[e - 1]] + plan.reach[1] &&
                       group_rows(first, e) <= plan.bulk_rows;
    if (e > first && !joins) {
      edge_rows = std::max(edge_rows, group_rows(first, e - 1));
      plan.edge_group_begin[++plan.edge_groups] = static_cast<int8_t>(e);
    }
  }
  if (plan.edge_classes > 0) {
    edge_rows = std::max(
        edge_rows, group_rows(plan.edge_group_begin[plan.edge_groups], plan.edge_classes - 1));
    plan.edge_group_begin[++plan.edge_groups] = static_cast<int8_t>(plan.edge_classes);
    // Edge units of up to 32 planes (all 24 at the headline), fewer where two windows would not
    // fit.
    chunk_planes(std::min<int64_t>(plan.E[0], 32), edge_rows, plan.edge_planes, plan.edge_d_chunks);
    plan.smem_bytes = std::max(plan.smem_bytes, window(plan.edge_planes, edge_rows));
  }
  // D-segments: per class, the chunks of the grid it meets.
  const auto chunks_met = [&](int64_t c, int64_t planes) {
    return static_cast<int32_t>((plan.class_hi[0][c] - 1) / planes - plan.class_lo[0][c] / planes +
                                1);
  };
  for (int64_t c = 0; c < plan.classes[0]; ++c) {
    plan.d_segment_begin[c + 1] = plan.d_segment_begin[c] + chunks_met(c, plan.bulk_planes);
    if (plan.edge_classes > 0) {
      plan.edge_segment_begin[c + 1] = plan.edge_segment_begin[c] + chunks_met(c, plan.edge_planes);
    }
  }
  plan.bulk_pieces = plan.d_segment_begin[plan.classes[0]] * plan.h_chunks;
  plan.pieces = plan.bulk_pieces + plan.edge_segment_begin[plan.classes[0]] * plan.edge_classes;
  plan.units_per_item = plan.bulk_d_chunks * plan.h_chunks + plan.edge_d_chunks * plan.edge_groups;
  // (units and pieces per launch are counted in 32 bits: checked below.)
  const int64_t J = plan.c_in_g * k[0] * k[1] * k[2];
  plan.finalize_smem_bytes =
      static_cast<size_t>(J * J + 2 * J + kGramGradChannels * (J + 2)) * sizeof(double);
  if (2 * plan.smem_bytes > smem_limit || plan.finalize_smem_bytes > smem_limit) {
    return plan;
  }
  const int64_t items = s.N * s.groups;
  const int64_t item_bytes = plan.pieces * plan.piece_floats * static_cast<int64_t>(sizeof(float));
  const int64_t most = std::min<int64_t>(
      std::max<int64_t>(1, static_cast<int64_t>(partial_bytes) / item_bytes), 65535);
  // The sums kernel's persistent grid (a block per multiprocessor) walks a launch's units in
  // rounds of one unit a block: as few rounds, then as few launches (the Conv3d headline's:
  // kGramPartialBytes).
  plan.items_per_launch =
      items_per_launch_in_fewest_waves(items, most, plan.units_per_item, multiprocessors);
  constexpr int64_t kMax32 = (int64_t{1} << 31) - 1;
  if (s.D * s.H * s.W > kMax32 || plan.E[0] * plan.E[1] * plan.E[2] > kMax32 ||
      s.N * s.C_in > kMax32 || plan.pieces > kGramMaxPieces ||
      plan.items_per_launch * plan.pieces * plan.piece_floats > kMax32 ||
      plan.items_per_launch * plan.units_per_item > kMax32) {
    return plan;
  }
  plan.supported = true;
  return plan;
}

}  // namespace conv
}  // namespace fused_ops
