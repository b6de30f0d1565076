// The weight gradient of a stride-1 float32 3-d convolution with float32-grade accuracy on
// Hopper's wgmma (sm_90a), the companion of split_tf32_wgmma_conv3d.cuh:
//
//   grad_w[k, t, r, s, c] = sum over n and input positions (z, p, q) of
//       x[n, c, z, p, q] * dy[n, z + pd - t*dd, p + ph - r*dh, q + pw - s*dw, k]
//
// (dd, dh, dw: the dilations)
//
// (zero where the dy position is outside dy), x NCDHW (the layout the module's input comes
// in), dy NDHWC (the layout the backward's GroupNorm pass writes and the input gradient's
// convolution reads), grad_w (C_out, kD, kH, kW, C_in).
//
// Computation: for each tap, a GEMM of M = C_out by N = C_in over K = the input positions,
// reduced one K block (32 positions of one row of x along W) at a time. The reduction runs
// over x's positions, not the outputs', so x's rows are whole aligned 128-byte lines and the
// taps only shift the dy rows, which the A operand reads from registers at any offset.
// Split TF32 as the forward: dy (A) split in registers, x (B) split by the producer into TF32
// high and low tiles in shared memory; three products per K block and tap, summed from zero
// by the tensor cores and added in float32 on the CUDA cores (wgmma's accumulation drifts:
// split_tf32_wgmma_conv3d.cuh, "Accumulation"). Plain TF32 (PyTorch's allow_tf32 mode): one
// product per K block and tap, of the operands rounded to TF32, into the accumulators directly
// (as the forward's plain path), all taps' products of a K block in one batch: one wait per K
// block.
//
// K order: the block's 32 positions in the forward's channel order (wgmma_conv_channel_of_k),
// so that a thread's fragment columns over the four k8 steps are positions 8t .. 8t + 7 of the
// block (t = lane % 4), and tap u's (shift u * dilation_w) are 8t + u * dw .. 8t + 7 + u * dw:
// all kW taps' fragments come from 8 + (kW - 1) * dw values per fragment row (10 at the
// headline) where a load per tap and fragment took 24. The producer stores x in that order;
// the dy rows are stored with their 16-byte chunks swizzled by the row's group of 8
// (wgrad_dy_offset), so the fragment loads, 8 rows apart, hit 32 banks.
//
// Tiling: a block owns 128 output channels (two consumer warpgroups of m64) by 64 input
// channels and a range of (pair, K block) units, pair = (t, r) the taps along D and H, with all
// kW <= 3 taps along W (they read the same dy rows, shifted). Split-K: the units are divided
// evenly over about one block per SM, so a block may end one pair and start the next (9 pairs
// do not divide 132 SMs); it writes its sums of each pair to a slot of its own, and
// wgmma_wgrad_reduce_kernel adds a pair's slots in block order (deterministic).
// Per K block a producer warpgroup copies the dy rows the taps reach (32 + (kW - 1) * dw rows
// of 128 channels, cp.async, zero-filled outside dy; rows of 136 floats), and splits the x
// tile (64 channels x 32 positions), which the copy engine brought into a staging slot
// kXAhead blocks before (a tiled tensor-map copy: zeros outside x and past C_in), into the
// stage's two tiles, 128-byte swizzled in the K order above (wgmma's B, through descriptors);
// it publishes each stage through the forward's StageRing, and the consumers fence the x tiles
// for the tensor cores (a proxy fence in the producer waited, each K block, for its loads).
//
// The GroupNorm backward's operand (NormOperand; norm_grad_operand.cuh): dy is not in memory but
// the ReLU -> GroupNorm backward's input gradient, from g and the saved conv output (both
// NCDHW). Thread 0 copies each K block's runs of the two (the block's 32 + (kW - 1) dw dy
// positions of 128 channels each, two blocks ahead, into three staging slots) instead of the
// producer's 16-byte copies of dy rows, and the producer's threads turn them into the stage's
// dy rows (the same layout), each stage published as soon as it is written.
//
// Measured (H100, 2026-11-28, benchmarks/h100-2026-11-28-wgrad-x-staging/notes.txt): at the
// headline the plain-TF32 kernel does 315-330 TFLOP/s of useful work, 0.85-0.89 ms (1.00-1.03
// ms when the producer loaded x into registers itself: the loads' latency held it), held now
// by the L2 reads of the dy rows (each pair's blocks read them: builds without the dy copies
// ran 0.66 ms, and the grid filling all SMs gained nothing); split TF32 (tensor-bound) 1.75-1.95.
#pragma once

#include "conv/norm_grad_operand.cuh"
#include "conv/split_tf32_wgmma_conv3d.cuh"

namespace fused_ops {
namespace gpu {

struct WgmmaWgradParams {
  int N, D, H, W, C_in, C_out, kD, kH, kW, Do, Ho, Wo;
  int padding[3], dilation[3];
  int w_chunks;         // ceil(W / 32): K blocks per row of x
  int blocks;           // N * D * H * w_chunks: K blocks per (t, r) pair of taps
  int units_per_block;  // (pair, K block) units per block of the grid, at most `blocks`
  int grid_blocks;      // ceil(kD * kH * blocks / units_per_block)
  const float* x;       // (N, C_in, D, H, W)
  const float* dy;      // (N, Do, Ho, Wo, C_out); null where dy_from_norm is defined
  conv::ReluGroupNormGradOperand dy_from_norm;  // (the NormOperand kernel's)
  float* partial;  // [grid_blocks + kD * kH][kW][C_out][C_in]: wgrad_partial_slot
  float* dw;       // (C_out, kD, kH, kW, C_in)
};

constexpr int kWgradBM = 128;             // output channels per block (two m64 warpgroups)
constexpr int kWgradBN = 64;              // input channels per block
constexpr int kWgradBK = 32;              // positions per K block
constexpr int kWgradMaxKW = 3;            // taps along W per block
constexpr int kWgradMaxRows = 36;         // dy rows per K block: 32 + (kW - 1) * dilation_w at most
constexpr int kWgradRowFloats = 136;      // a dy row in shared memory: 128 channels + 8
constexpr int kWgradProducerBarrier = 1;  // the producer warpgroup's named barrier

// The k index of a K block's position: the inverse of the forward's channel order
// (wgmma_conv_channel_of_k), in which the producer stores x's tiles.
__host__ __device__ constexpr int wgrad_k_of_position(int position) {
  return 8 * ((position >> 1) & 3) + (position >> 3) + 4 * (position & 1);
}
__host__ __device__ constexpr bool wgrad_k_order_is_a_permutation() {
  for (int k = 0; k < kWgradBK; ++k) {
    if (wgrad_k_of_position(wgmma_conv_detail::wgmma_conv_channel_of_k(k)) != k) {
      return false;
    }
  }
  return true;
}
static_assert(wgrad_k_order_is_a_permutation(), "wgrad_k_of_position inverts the K order");

// The float offset of (row, channel) in a stage's dy rows: 16-byte chunk c of row r stored at
// chunk c ^ 2 * ((r / 8) % 4). A warp's fragment loads read rows 8t + j (t = 0..3) of 16
// channels; rows 8 apart are 1088 floats apart, the same bank, and the swizzle puts the four
// t on four different pairs of chunks.
__device__ __forceinline__ int wgrad_dy_offset(int row, int channel) {
  return row * kWgradRowFloats +
         ((((channel >> 2) ^ (((row >> 3) & 3) << 1)) << 2) | (channel & 3));
}

// The partial sums' slot of block `block` in pair `pair` (the slots of pair p are those of the
// blocks wgrad_pair_blocks gives, offset by p: a block covers at most two pairs, the last of one
// and the first of the next, which may share a block or not).
__host__ __device__ inline int64_t wgrad_partial_slot(int block, int pair) {
  return static_cast<int64_t>(block) + pair;
}
// The blocks that cover pair `pair`: [first, last].
__host__ __device__ inline void wgrad_pair_blocks(const WgmmaWgradParams& p, int pair, int& first,
                                                  int& last) {
  first = static_cast<int>(static_cast<int64_t>(pair) * p.blocks / p.units_per_block);
  last = static_cast<int>((static_cast<int64_t>(pair + 1) * p.blocks - 1) / p.units_per_block);
}

template <int Stages, bool Split, bool NormOperand = false>
struct WgmmaWgradTile {
  static constexpr int kStages = Stages;
  static constexpr bool kSplit = Split;
  static constexpr bool kNormOperand = NormOperand;
  // The operand's staged runs of g and the conv output (128 channels x kNormGradRunPositions
  // each), kRunAhead K blocks ahead (one block ahead measured alike, 3.25 against 3.19 ms at the
  // headline with TF32, H200 2026-11-28: the producers' work bounds the kernel, not the copies).
  static constexpr int kRunAhead = 2;
  static constexpr int kRunSlots = kRunAhead + 1;
  static constexpr int kRunBytes = kWgradBM * kNormGradRunPositions * 4;  // one tensor's
  static constexpr int kRunSlotBytes = 2 * kRunBytes;
  // The dy rows, rounded up to the 1024-byte swizzle atom the x tiles after them need.
  static constexpr int kABytes = (kWgradMaxRows * kWgradRowFloats * 4 + 1023) / 1024 * 1024;
  static constexpr int kBBytes = kWgradBN * 128;
  static constexpr int kStageBytes = kABytes + (Split ? 2 : 1) * kBBytes;  // (x's hi, lo tiles)
  // x's staging slots (64 channel rows of 32 positions, as in x): the copy engine brings a
  // block's tile kXAhead K blocks before the producer splits it. (3 and 6 measured alike.)
  static constexpr int kXAhead = 3;
  static constexpr int kXSlots = kXAhead + 1;
  static constexpr int kXSlotBytes = kWgradBN * kWgradBK * 4;
  static constexpr int kSmemBytes = kStages * kStageBytes + kXSlots * kXSlotBytes +
                                    (NormOperand ? kRunSlots : 0) * kRunSlotBytes + 1024;
  // The consumers hold kW x 32 sums, the K block's 2 x (8 + (kW - 1) * dw) dy values and the
  // taps' fragments (and, split, the values' low parts and a tap's block sums, 32).
  static constexpr int kProducerRegisters = 72;
  static constexpr int kConsumerRegisters = 216;
};

// kSplit: split TF32 (three products, float32-grade); else plain TF32 (one product of the
// operands rounded to TF32, for PyTorch's allow_tf32 mode: as accurate as cuDNN's TF32 kernels).
// kNormOperand: dy from p.dy_from_norm, through g_map and conv_map (the (Do * Ho * Wo, C_out, N)
// maps of its g and conv output: make_norm_grad_run_map, boxes of kNormGradRunPositions x 128
// channels); otherwise those two are not used.
template <int kStages, bool kSplit, bool kNormOperand = false>
__global__ void __launch_bounds__(kWgmmaConvThreads, 1)
    split_tf32_wgmma_wgrad_kernel(const WgmmaWgradParams p,
                                  const __grid_constant__ CUtensorMap x_map,
                                  const __grid_constant__ CUtensorMap g_map,
                                  const __grid_constant__ CUtensorMap conv_map) {
#ifdef FUSED_OPS_WGMMA_ENABLED
  using namespace wgmma_conv_detail;
  using Tile = WgmmaWgradTile<kStages, kSplit, kNormOperand>;
  constexpr int kAcc = kWgradBN / 2;  // accumulator floats per thread per m64 x n64 tile

  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full_bar[kStages], empty_bar[kStages];
  __shared__ uint64_t x_full[Tile::kXSlots];  // x's staging slots: the copy has landed
  __shared__ uint64_t run_full[3];            // the operand's run slots: both copies have landed
  // The operand's coefficients of the block's 128 channels in sample norm_coefficients_n.
  __shared__ alignas(16) float norm_coefficients[kNormOperand ? 3 * kWgradBM : 4];
  // The consumers fence the x tiles for the tensor cores (the producer's stores are ordinary
  // ones): a proxy fence waits for the thread's memory operations in flight, and in the
  // producer it waited every K block (when x came through its registers, for those loads).
  const StageRing<kStages, false> ring{full_bar, empty_bar};
  const uint32_t smem_base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_base - smem_u32(smem_raw));
  const uint32_t x_staging = smem_base + kStages * Tile::kStageBytes;
  const uint32_t run_staging = x_staging + Tile::kXSlots * Tile::kXSlotBytes;

  const int tid = threadIdx.x;
  const int k0 = blockIdx.y * kWgradBM;
  const int c0 = blockIdx.z * kWgradBN;
  // This block's units: [u_begin, u_begin + k_blocks) of pair * blocks + K block, pair = (t, r)
  // the taps along D and H. It starts in pair0 and crosses into the next pair at most once
  // (units_per_block <= blocks), after first_blocks K blocks.
  const int64_t u_begin = static_cast<int64_t>(blockIdx.x) * p.units_per_block;
  const int64_t units = static_cast<int64_t>(p.kD) * p.kH * p.blocks;
  const int k_blocks = static_cast<int>(
      (u_begin + p.units_per_block < units ? u_begin + p.units_per_block : units) - u_begin);
  const int pair0 = static_cast<int>(u_begin / p.blocks);
  const int b_begin = static_cast<int>(u_begin % p.blocks);
  const int first_blocks = min(k_blocks, p.blocks - b_begin);

  if (tid == 0) {
    for (int slot = 0; slot < Tile::kXSlots; ++slot) {
      mbarrier_init(smem_u32(&x_full[slot]), 1);
    }
    for (int slot = 0; kNormOperand && slot < Tile::kRunSlots; ++slot) {
      mbarrier_init(smem_u32(&run_full[slot]), 1);
    }
    ring.init();
  }
  __syncthreads();

  if (tid < 128) {
    // ---- Producer. dy: 16-byte chunk (tid % 32) of rows tid / 32 + 4 j, copied; x: the copy
    // engine brings block kb + kXAhead's tile into its staging slot (thread 0 issues it), and
    // each thread splits chunk (tid % 8) (4 positions) of channel rows tid / 8 + 16 j of block
    // kb into the stage's tiles.
    cutlass::arch::warpgroup_reg_dealloc<Tile::kProducerRegisters>();
    const int dy_chunk = tid & 31, dy_row0 = tid >> 5;
    const int x_chunk = tid & 7, x_row0 = tid >> 3;
    const int rows = kWgradBK + (p.kW - 1) * p.dilation[2];
    const bool dy_chunk_valid = k0 + 4 * dy_chunk < p.C_out;
    // The K block's pair of taps (td, th) and row of x (n, z, y) and chunk of W, stepped along.
    int td = pair0 / p.kH, th = pair0 % p.kH;
    int n = 0, z = 0, y = 0, wc = 0;
    {
      int rest = b_begin;
      wc = rest % p.w_chunks;
      rest /= p.w_chunks;
      y = rest % p.H;
      rest /= p.H;
      z = rest % p.D;
      n = rest / p.D;
    }
    // (Past the last K block of a pair, the first: n wraps; the caller steps the pair.)
    const auto advance = [&](int& n_, int& z_, int& y_, int& wc_) {
      if (++wc_ == p.w_chunks) {
        wc_ = 0;
        if (++y_ == p.H) {
          y_ = 0;
          if (++z_ == p.D) {
            z_ = 0;
            if (++n_ == p.N) {
              n_ = 0;
              return true;
            }
          }
        }
      }
      return false;
    };
    // Thread 0: block kb's x tile (64 channels x 32 positions, zeros outside x) into its
    // staging slot, completing on the slot's barrier; the position of the next block to copy.
    int ahead_n = n, ahead_z = z, ahead_y = y, ahead_wc = wc;
    const auto stage_x = [&](int kb) {
      const int slot = kb % Tile::kXSlots;
      const uint32_t bar = smem_u32(&x_full[slot]);
      mbarrier_arrive_expect_bytes(bar, Tile::kXSlotBytes);
      tiled_copy_to_shared_5d(x_staging + slot * Tile::kXSlotBytes, &x_map, ahead_wc * kWgradBK,
                              ahead_y, ahead_z, c0, ahead_n, bar);
      advance(ahead_n, ahead_z, ahead_y, ahead_wc);
    };
    // The operand's runs (thread 0): block kb's into run slot kb % kRunSlots, from the dy
    // positions (oz, oy, ox0 ..) of the block whose place the cursor holds, stepped along as the
    // blocks'.
    int run_n = n, run_z = z, run_y = y, run_wc = wc, run_td = td, run_th = th;
    int norm_coefficients_n = -1;
    const auto stage_runs = [&](int kb) {
      const uint32_t bar = smem_u32(&run_full[kb % Tile::kRunSlots]);
      mbarrier_arrive_expect_bytes(bar, Tile::kRunSlotBytes);
      const int oz = run_z + p.padding[0] - run_td * p.dilation[0];
      const int oy = run_y + p.padding[1] - run_th * p.dilation[1];
      const int ox0 = run_wc * kWgradBK + p.padding[2] - (p.kW - 1) * p.dilation[2];
      // (masked where outside dy; from a 16-byte aligned start: norm_grad_run_start)
      const int32_t start = norm_grad_run_start((oz * p.Ho + oy) * p.Wo + ox0).aligned;
      const uint32_t dst = run_staging + (kb % Tile::kRunSlots) * Tile::kRunSlotBytes;
      tiled_copy_to_shared_3d(dst, &g_map, start, k0, run_n, bar);
      tiled_copy_to_shared_3d(dst + Tile::kRunBytes, &conv_map, start, k0, run_n, bar);
      if (advance(run_n, run_z, run_y, run_wc) && ++run_th == p.kH) {
        run_th = 0;
        ++run_td;
      }
    };
    if (tid == 0) {
      for (int kb = 0; kb < min(Tile::kXAhead, k_blocks); ++kb) {
        stage_x(kb);
      }
      for (int kb = 0; kNormOperand && kb < min(Tile::kRunAhead, k_blocks); ++kb) {
        stage_runs(kb);
      }
    }
    for (int kb = 0; kb < k_blocks; ++kb) {
      const int slot = kb % kStages;
      // Block kb + kXAhead's x tile, into the slot of block kb - 1, which every producer
      // thread has read (and the operand's runs of block kb + kRunAhead, the same).
      named_barrier_sync(kWgradProducerBarrier, 128);
      if (tid == 0 && kb + Tile::kXAhead < k_blocks) {
        stage_x(kb + Tile::kXAhead);
      }
      if (kNormOperand && tid == 0 && kb + Tile::kRunAhead < k_blocks) {
        stage_runs(kb + Tile::kRunAhead);
      }
      ring.producer_acquire(kb);
      const uint32_t stage = smem_base + slot * Tile::kStageBytes;
      if constexpr (kNormOperand) {
        // dy rows from the runs: item i (this thread's: tid, tid + 128, ...) is channels
        // 4q .. 4q + 3 of row r, i = q * rows + r, zeros where the position is outside dy.
        const int oz = z + p.padding[0] - td * p.dilation[0];
        const int oy = y + p.padding[1] - th * p.dilation[1];
        const int ox0 = wc * kWgradBK + p.padding[2] - (p.kW - 1) * p.dilation[2];
        const bool plane_valid = oz >= 0 && oz < p.Do && oy >= 0 && oy < p.Ho;
        const int shift = norm_grad_run_start((oz * p.Ho + oy) * p.Wo + ox0).shift;
        if (n != norm_coefficients_n) {
          // (Every producer thread steps the same blocks, and all are past this block's first
          // barrier: none reads the sample before.)
          const float* const from =
              p.dy_from_norm.coefficients + 3 * (static_cast<int64_t>(n) * p.C_out + k0);
          for (int i = tid; i < 3 * kWgradBM; i += 128) {
            norm_coefficients[i] = k0 + i / 3 < p.C_out ? from[i] : 0.f;
          }
          named_barrier_sync(kWgradProducerBarrier, 128);
          norm_coefficients_n = n;
        }
        mbarrier_wait(smem_u32(&run_full[kb % Tile::kRunSlots]), (kb / Tile::kRunSlots) & 1);
        const float* const g_run = reinterpret_cast<const float*>(
            smem + (run_staging - smem_base) + (kb % Tile::kRunSlots) * Tile::kRunSlotBytes);
        const float* const x_run = g_run + kWgradBM * kNormGradRunPositions;
        uint8_t* const dy_rows = smem + slot * Tile::kStageBytes;
        int q = tid / rows, r = tid - q * rows;
        for (; q < kWgradBM / 4; r += 128) {
          while (r >= rows) {
            r -= rows;
            ++q;
          }
          if (q >= kWgradBM / 4) {
            break;
          }
          float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
          if (plane_valid && static_cast<unsigned>(ox0 + r) < static_cast<unsigned>(p.Wo) &&
              k0 + 4 * q < p.C_out) {
            v = norm_grad_quad(g_run, x_run, 4 * q, r + shift, norm_coefficients + 12 * q,
                               /*round=*/false);
          }
          *reinterpret_cast<float4*>(dy_rows + 4 * wgrad_dy_offset(r, 4 * q)) = v;
        }
      } else {
        // dy rows: output positions (oz, oy, ox0 + row), ox0 the leftmost the taps reach. This
        // thread's are rows dy_row0 + 4j: the source steps by 4 rows of dy, the place in the stage
        // by 4 rows, its chunk swizzled by the row's group of 8 (j / 2). (Addressed by steps: the
        // producer has one warp per scheduler.)
        const int oz = z + p.padding[0] - td * p.dilation[0];
        const int oy = y + p.padding[1] - th * p.dilation[1];
        const int ox0 = wc * kWgradBK + p.padding[2] - (p.kW - 1) * p.dilation[2] + dy_row0;
        const bool plane_valid = oz >= 0 && oz < p.Do && oy >= 0 && oy < p.Ho && dy_chunk_valid;
        const float* const dy_row =
            p.dy + (static_cast<int64_t>(((n * p.Do + oz) * p.Ho + oy) * p.Wo + ox0) * p.C_out +
                    k0 + 4 * dy_chunk);
        const uint32_t dst_row = stage + static_cast<uint32_t>(dy_row0 * kWgradRowFloats * 4);
#pragma unroll
        for (int j = 0; j < (kWgradMaxRows + 3) / 4; ++j) {
          if (j < kWgradBK / 4 || dy_row0 + 4 * j < rows) {
            const bool valid =
                plane_valid && static_cast<unsigned>(ox0 + 4 * j) < static_cast<unsigned>(p.Wo);
            const uint32_t dst = dst_row + static_cast<uint32_t>(4 * j * kWgradRowFloats * 4) +
                                 static_cast<uint32_t>(16 * (dy_chunk ^ (((j >> 1) & 3) << 1)));
            cp_async_16(dst, dy_row + 4 * j * p.C_out, valid);  // (not read unless valid)
          }
        }
        cp_async_commit();
      }
      // x: this block's tile, split, into the two swizzled tiles in the K order.
      mbarrier_wait(smem_u32(&x_full[kb % Tile::kXSlots]), (kb / Tile::kXSlots) & 1);
      const float4* const staged =
          reinterpret_cast<const float4*>(smem + kStages * Tile::kStageBytes +
                                          (kb % Tile::kXSlots) * Tile::kXSlotBytes) +
          x_row0 * (kWgradBK / 4) + x_chunk;
      float4 x_values[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        x_values[j] = staged[16 * j * (kWgradBK / 4)];
      }
      uint8_t* const b_tiles = smem + slot * Tile::kStageBytes + Tile::kABytes;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int row = x_row0 + 16 * j;
        const float in[4] = {x_values[j].x, x_values[j].y, x_values[j].z, x_values[j].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          uint32_t hi, lo;
          split_tf32_rounded(in[e], hi, lo);
          const uint32_t at = swizzled(row, wgrad_k_of_position(4 * x_chunk + e));
          *reinterpret_cast<uint32_t*>(b_tiles + at) = hi;
          if (kSplit) {
            *reinterpret_cast<uint32_t*>(b_tiles + Tile::kBBytes + at) = lo;
          }
        }
      }
      // Block kb - kLag: its dy rows have landed (this thread's), its x tiles were stored
      // before (the consumers' proxy fence orders them before the tensor cores' reads). The
      // operand's rows were stored by this thread: block kb itself.
      if constexpr (kNormOperand) {
        mbarrier_arrive(smem_u32(&full_bar[slot]));
      } else {
        ring.producer_publish(kb);
      }
      if (advance(n, z, y, wc) && ++th == p.kH) {
        th = 0;
        ++td;
      }
    }
    if constexpr (!kNormOperand) {
      ring.producer_finish(k_blocks);
    }
    return;
  }

  // ---- Consumers: warpgroup wg has output channels k0 + wg * 64 + [0, 64).
  cutlass::arch::warpgroup_reg_alloc<Tile::kConsumerRegisters>();
  const int warp = (tid >> 5) - 4, lane = tid & 31;
  const int wg = warp >> 2;
  const int g = lane >> 2, t = lane & 3;
  const int frag_row0 = wg * 64 + (warp & 3) * 16 + g;  // A rows: output channels
  // acc[u]: the tap along W whose dy rows are shifted by u * dw (tap kW - 1 - u).
  float acc[kWgradMaxKW][kAcc];
  const auto zero_sums = [&] {
#pragma unroll
    for (int u = 0; u < kWgradMaxKW; ++u) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        acc[u][i] = 0.f;
        cute::warpgroup_fence_operand(acc[u][i]);
      }
    }
  };
  zero_sums();
  // Epilogue of a pair of taps: this block's sums into its slot of the pair (the sums are
  // complete: each K block ends with a wait). Accumulator i: channel row g + 8 * ((i / 2) % 2),
  // column 8 * (i / 4) + 2 * t + i % 2.
  const auto store_sums = [&](int pair) {
#pragma unroll
    for (int u = 0; u < kWgradMaxKW; ++u) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        cute::warpgroup_fence_operand(acc[u][i]);
      }
    }
#pragma unroll
    for (int u = 0; u < kWgradMaxKW; ++u) {
      if (u < p.kW) {
        float* const out =
            p.partial + (wgrad_partial_slot(blockIdx.x, pair) * p.kW + (p.kW - 1 - u)) *
                            static_cast<int64_t>(p.C_out) * p.C_in;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int k = k0 + frag_row0 + 8 * half;
          if (k < p.C_out) {
#pragma unroll
            for (int j = 0; j < kWgradBN / 8; ++j) {
              const int c = c0 + 8 * j + 2 * t;
              if (c < p.C_in) {  // C_in is a multiple of 4: both columns or neither
                *reinterpret_cast<float2*>(out + static_cast<int64_t>(k) * p.C_in + c) =
                    make_float2(acc[u][4 * j + 2 * half], acc[u][4 * j + 2 * half + 1]);
              }
            }
          }
        }
      }
    }
  };
  // The K blocks, with the taps along W and dilation_w constants: the fragments select
  // registers by shift, and the products of a K block run without branches (a branch between
  // them makes the compiler fence the next).
  const auto consume = [&](auto taps_w, auto dilation_w) {
    constexpr int kTapsW = decltype(taps_w)::value;
    constexpr int kDw = decltype(dilation_w)::value;
    // This thread's dy values: positions 8t .. 8t + kSpan - 1 of the block.
    constexpr int kSpan = 8 + (kTapsW - 1) * kDw;
    static_assert(kTapsW <= kWgradMaxKW && kSpan <= kWgradMaxRows - kWgradBK + 8,
                  "the taps' dy rows fit a stage");
    // Block kb's slot is full; its x tiles then ordered before this thread's products.
    const auto wait_full = [&](int kb) {
      ring.consumer_wait(kb);
      fence_proxy_async_shared();
    };
    // This thread's dy values of block kb: positions 8t + j, channel rows g and g + 8.
    const auto load_values = [&](int kb, float (&v)[kSpan][2]) {
      const float* const a_tile =
          reinterpret_cast<const float*>(smem + (kb % kStages) * Tile::kStageBytes);
#pragma unroll
      for (int j = 0; j < kSpan; ++j) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          v[j][half] = a_tile[wgrad_dy_offset(8 * t + j, frag_row0 + 8 * half)];
        }
      }
    };
    // Plain TF32 loads block kb + 1's values while block kb's products run: the consumers'
    // batches are short, and waiting on the loads between them left the tensor cores idle.
    // (Split TF32's batches are three times as long; it has no registers to spare.)
    // The K blocks of each pair this block covers: [0, first_blocks), then the rest.
    for (int begin = 0, end = first_blocks; begin < k_blocks; begin = end, end = k_blocks) {
      float values[kSpan][2];
      if (!kSplit) {
        wait_full(begin);
        load_values(begin, values);
      }
      for (int kb = begin; kb < end; ++kb) {
        if (kSplit) {
          wait_full(kb);
          load_values(kb, values);
        }
        const uint32_t b_hi = smem_base + (kb % kStages) * Tile::kStageBytes + Tile::kABytes;
        const uint64_t desc_hi = k_major_sw128_desc(b_hi);
        const uint64_t desc_lo = k_major_sw128_desc(b_hi + Tile::kBBytes);
        // The values rounded to TF32 (and, split, their low parts).
        uint32_t hi[kSpan][2], lo[kSpan][2];  // (lo unused by plain TF32)
#pragma unroll
        for (int j = 0; j < kSpan; ++j) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            split_tf32_rounded(values[j][half], hi[j][half], lo[j][half]);
          }
        }
        // The m64 x k8 fragments of shift u: step kk's (channel g, column t), (g + 8, t),
        // (g, t + 4), (g + 8, t + 4) are positions 8t + 2kk + u * dw and the one after. Copied
        // into registers of their own before the products (wgmma takes its A operand from an
        // aligned register quad, which the shifted selections are not: copies between the
        // products would make the compiler insert a fence before each).
        const auto fragments = [&](const uint32_t (&v)[kSpan][2], int u,
                                   uint32_t (&f)[kWgradBK / 8][4]) {
#pragma unroll
          for (int kk = 0; kk < kWgradBK / 8; ++kk) {
            const int j = 2 * kk + u * kDw;
            f[kk][0] = v[j][0], f[kk][1] = v[j][1], f[kk][2] = v[j + 1][0], f[kk][3] = v[j + 1][1];
          }
        };
        if constexpr (!kSplit) {
          // All taps' products into the accumulators directly (TF32's rounding of the operands,
          // ~2^-11 relative, dwarfs the accumulation's bias), one wait per K block.
          uint32_t frag[kTapsW][kWgradBK / 8][4];
#pragma unroll
          for (int u = 0; u < kTapsW; ++u) {
            fragments(hi, u, frag[u]);
          }
          cute::warpgroup_arrive();
#pragma unroll
          for (int u = 0; u < kTapsW; ++u) {
#pragma unroll
            for (int kk = 0; kk < kWgradBK / 8; ++kk) {
              wgmma_rs<kWgradBN>(acc[u], frag[u][kk], desc_hi + static_cast<uint64_t>(kk * 2),
                                 cute::SM90::GMMA::ScaleOut::One, std::make_index_sequence<kAcc>{});
            }
          }
          cute::warpgroup_commit_batch();
          if (kb + 1 < end) {
            wait_full(kb + 1);
            load_values(kb + 1, values);
          }
          cute::warpgroup_wait<0>();
        } else {
          // Per tap, the block's three products summed from zero, then added in float32.
          float partial[kAcc];
#pragma unroll
          for (int u = 0; u < kTapsW; ++u) {
            uint32_t frag_hi[kWgradBK / 8][4], frag_lo[kWgradBK / 8][4];
            fragments(hi, u, frag_hi);
            fragments(lo, u, frag_lo);
            cute::warpgroup_arrive();
#pragma unroll
            for (int kk = 0; kk < kWgradBK / 8; ++kk) {
              const uint64_t k_step = static_cast<uint64_t>(kk * 2);
              const auto first =
                  kk == 0 ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One;
              wgmma_rs<kWgradBN>(partial, frag_lo[kk], desc_hi + k_step, first,
                                 std::make_index_sequence<kAcc>{});
              wgmma_rs<kWgradBN>(partial, frag_hi[kk], desc_lo + k_step,
                                 cute::SM90::GMMA::ScaleOut::One, std::make_index_sequence<kAcc>{});
              wgmma_rs<kWgradBN>(partial, frag_hi[kk], desc_hi + k_step,
                                 cute::SM90::GMMA::ScaleOut::One, std::make_index_sequence<kAcc>{});
            }
            cute::warpgroup_commit_batch();
            cute::warpgroup_wait<0>();
            add_block_sum(acc[u], partial);
          }
        }
        ring.consumer_release(kb);
      }
      if (end < k_blocks) {  // into the next pair
        store_sums(pair0);
        zero_sums();
      }
    }
  };
  // wgmma_wgrad_supported: kW <= 3 and 32 + (kW - 1) * dw <= 36.
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  using Three = std::integral_constant<int, 3>;
  using Four = std::integral_constant<int, 4>;
  const int dw = p.dilation[2];
  if (p.kW == 1) {
    consume(One{}, One{});
  } else if (p.kW == 3) {
    if (dw == 1) {
      consume(Three{}, One{});
    } else {
      consume(Three{}, Two{});
    }
  } else if (dw == 1) {
    consume(Two{}, One{});
  } else if (dw == 2) {
    consume(Two{}, Two{});
  } else if (dw == 3) {
    consume(Two{}, Three{});
  } else {
    consume(Two{}, Four{});
  }
  store_sums(pair0 + (first_blocks < k_blocks ? 1 : 0));
#else
  __trap();  // built without sm_90a code: the host never launches it (wgmma_conv_available)
#endif
}

// dw[k][tap][c] = the sums of the blocks that covered the tap's pair, in block order.
__global__ void wgmma_wgrad_reduce_kernel(const WgmmaWgradParams p);

// Host side (split_tf32_wgmma_conv3d_cuda.cu). Whether the kernel takes this shape on the
// current device (stride 1, kW <= 3 with 32 + (kW - 1) * dilation_w <= 36, W a multiple of 4,
// the split-TF32 family's channel and size limits, and wgmma_conv_available()); its workspace
// (the blocks' partial sums); the launch (the kernel, then the reduction).
// `split`: the split-TF32 kernel, else the plain TF32 one. With dy_from_norm defined (dy_ndhwc
// null), dy is that operand (NCDHW tensors), where wgmma_wgrad_norm_operand_supported.
bool wgmma_wgrad_supported(const conv::Conv3dShape& s);
bool wgmma_wgrad_norm_operand_supported(const conv::Conv3dShape& s);
size_t wgmma_wgrad_workspace_bytes(const conv::Conv3dShape& s);
cudaError_t wgmma_wgrad_launch(const conv::Conv3dShape& s, const float* x_ncdhw,
                               const float* dy_ndhwc,
                               const conv::ReluGroupNormGradOperand& dy_from_norm, float* dw,
                               void* workspace, bool split, cudaStream_t stream);

}  // namespace gpu
}  // namespace fused_ops
