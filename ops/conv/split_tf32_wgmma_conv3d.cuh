// A float32 3-d convolution with float32-grade accuracy on Hopper's warpgroup tensor-core
// instructions (wgmma, sm_90a; nvcc only, CUTLASS's CuTe headers for the instruction atoms):
//
//   y[n, z, p, q, k] = bias[k] + sum over (t, r, s, c) of
//       x[n, z*sd - pd + t*dd, p*sh - ph + r*dh, q*sw - pw + s*dw, c] * w[k, t, r, s, c]
//
// x, y NDHWC (or y NCDHW: WgmmaConvParams::y_channels_first), zero outside x (the padding), one
// conv group: the forward convolution of split_tf32_conv3d.cuh, which runs CUTLASS's sm80
// mma.sync kernel; that one tops out at ~190 TFLOP/s of TF32 products on an H100
// (benchmarks/README.md), wgmma at about twice that.
//
// Computation: an implicit GEMM of M = N*Do*Ho*Wo output positions by N = C_out channels over
// K = kD*kH*kW*C_in, walked one (tap, 32 input channels) block at a time. Split TF32
// ("3xTF32"): a * b = a_hi b_hi + a_hi b_lo + a_lo b_hi with a_hi = a rounded to TF32 and
// a_lo = a - a_hi rounded to TF32 (the dropped a_lo b_lo is ~2^-22 of the product),
// accumulated in float32 by the tensor cores.
//   - The weights are split once per call (split_tf32_weights_kernel) into the B tiles of the
//     K blocks: per (tap, 32 channels, C_out tile) the high and the low TF32 parts, each a
//     kBN x 32 tile exactly as shared memory holds it (swizzled, zero in the padding, the 32
//     channels permuted into the kernel's K order: wgmma_conv_channel_of_k), so that one bulk
//     copy moves a K block's weights.
//   - x is split in registers: the A operand of wgmma may come from registers, so each
//     thread loads its fragment of the activation tile from shared memory (in that K order,
//     two 16-byte loads per row), rounds it (one instruction per rounding on sm_90) and
//     issues the three products (a_hi with w_hi and w_lo, a_lo with w_hi); B (the weights)
//     comes from shared memory through matrix descriptors.
//   Both warp roles are kept lean in instructions: the consumers' instructions (fragment
//   loads, rounding, the block sums' adds) and the producer's (addresses, predicates) share
//   the schedulers with each other, and the tensor cores wait on both (2026-11-26, H200:
//   302 -> 190 instructions per consumer warp and K block, 400 -> 230 per producer warp;
//   headline forward 2.85-2.89 -> 2.22-2.25 ms; benchmarks/h200-2026-11-26-wgmma-lean/).
//
// Plain TF32 (Tile::kSplit false: PyTorch's allow_tf32 mode, Conv3dChannelsLastParams::
// tf32_products): one product per float32 product, both operands read by the tensor cores from
// shared memory (x must hold TF32-rounded values, the weights tiles in the channels' own
// order), accumulated by the tensor cores throughout. Copied as the split's (below), it took
// 1.10-1.20 ms at the headline on an H100 where cuDNN's TF32 NDHWC convolution takes 0.81-0.85
// ms: per K block the tensor cores have a third of the split's work, and the consumers waited
// for the producer warpgroup's copies (~140 dependent instructions per K block). So its tiles
// copy the activations by the tensor memory accelerator's im2col mode (Tile::kTmaIm2col: one
// instruction per K block, by one thread; the map's bounding box gives the padding, zeros
// outside x), and with that the weights' copies from L2 became the limit (each 128-row tile
// reads the whole weight tensor again: as many bytes as its activations): clusters of blocks
// share them (Tile::kCluster: each block copies 1 / kCluster of a weight tile into all of the
// cluster's shared memories) and tiles of 256 rows (Tile::kMBlocks 2: two m64 blocks per
// consumer warpgroup) serve twice the products per weight tile. Measured at the headline on an
// H100 (2026-11-27, benchmarks/split_tf32_wgmma_check.cu, bitwise the same output as the
// producer's copies in every configuration): 128 x 128 tiles 1.21 ms with the copies, 1.03-1.07
// with im2col copies, 1.02 in clusters of 2, 0.90-0.93 in clusters of 4 (which leave 12 of the
// 132 SMs idle); 256 x 128: 0.90 alone, 0.87 in clusters of 2 or 4 (321 TFLOP/s); 6 stages
// instead of 4 (with the staged output in parts of 64 rows) did not help (1.13 ms at 128 x 128):
// the copies' latency was not the limit. The library runs 256 x 128 alone (faster than in
// clusters of 2 on an H200, 2026-11-28: 0.775 against 0.795 ms) and 256 x 64 where C_out <= 64
// in clusters of 2 (1.13 ms on the input gradient's shape on an H100, cuDNN's 1.15)
// (split_tf32_wgmma_conv3d_cuda.cu), over a range of rows per launch (WgmmaConvParams::row_begin,
// row_end), the producer warpgroup's idle warps doing the pipelined forward's side work
// (conv_side_work.cuh) meanwhile.
//
// Accumulation: the tensor cores' float32 accumulation (wgmma's, measured on an H100) rounds
// each instruction's sum with a bias (toward zero, about half an ulp of the accumulator per
// instruction): over the headline's 648 instructions an output was 1.1e-5 off (relative L2
// against float64), where CUTLASS's sm80 mma.sync kernel is 2.9e-7 off. So the tensor cores sum
// one K block at a time (12 instructions) from zero, and float32 adds on the CUDA cores (round
// to nearest) add the blocks: the bias is then relative to a block's sum, not the total's.
//
// Tiling and pipeline: a tile is kBM = 128 output positions (256 with Tile::kMBlocks 2;
// consecutive in the flattened M) by kBN channels, computed in K blocks of 32 channels of one tap.
// The kernel is persistent: a block per SM walks the tiles, so that its producer copies the next
// tile's first K blocks while the last one's finish (the block's setup and its pipeline's filling
// were per tile: 2.13-2.14 -> 2.04-2.05 ms at the headline on an H100, 2026-11-26). Four warpgroups
// (warp-specialized, as CUTLASS's sm90 kernels):
//   - a producer warpgroup copies each K block's activation rows (cp.async, 16 bytes a copy,
//     zero-filled in the padding and past C_in or M) and its weight tiles (one bulk copy, by
//     thread 0, which the "full" mbarrier counts in bytes) into a kStages-deep ring of shared
//     memory, 128-byte swizzled (each row of 32 floats is one 128-byte line, its 16-byte
//     chunks permuted by row % 8: the wgmma descriptors' SWIZZLE_128B mode, and
//     conflict-free fragment loads); each thread publishes a slot on its "full" mbarrier once
//     its own copies into it have landed (cp.async groups, kStages - 2 blocks behind its
//     newest copies): the activations are read by the consumers' loads (no proxy fence; the
//     weights' copy is the async proxy's own, as the tensor cores' reads) (StageRing); with
//     Tile::kTmaIm2col, its thread 0 alone issues both copies of a K block (the activations by
//     the im2col tensor map, x_map), counted in bytes on the "full" barrier;
//   - two consumer warpgroups, each kMBlocks x m64 x kBN accumulators (wgmma m64nBNk8), wait
//     on a slot's "full" barrier, multiply, and release the slot on its "empty" barrier (in a
//     cluster, on every block's: they all read that slot's weights); at the tile's end they
//     stage y = acc + bias in shared memory (OutTileHandoff; the whole tile, or with the
//     im2col copies one m64 block at a time) and go on;
//   - an epilogue warpgroup stores the staged tile (whole rows, 16 bytes a lane; into an NCDHW
//     y by the tensor memory accelerator's tiled stores, from boxes of channels by 32
//     positions that the consumers stage instead) and, where asked for, its moments, while
//     the consumers compute the next tile. (The consumers did this themselves, stores from the
//     accumulators and the moments by shuffles: Nsight Compute found them there ~8-12% of
//     their time, the tensor cores idle meanwhile; moved, the headline's forward with the
//     moments went 2.18 -> 2.07 ms, 2026-11-26. The NCDHW stores by the epilogue's threads
//     instead of tensor-map copies made the kernel 10-20% slower, 2026-11-28: the consumers
//     wait for the staged part to be stored.)
// The consumers never wait for each other: while one adds its block's sum and loads its next
// fragments, the other's products keep the tensor cores busy. Registers move from the producer
// and the epilogue warpgroup (which need few) to the consumers (setmaxnreg).
//
// Moments (tile_moments set: the ReLU -> GroupNorm consumer's statistics, so that no pass
// reads y back for them): per staged part (Tile::kOutRows rows) and sample it holds, the (mean,
// M2) of relu(y) per channel, centred (no E[v^2] - mean^2 cancellation): on the 128-channel
// im2col tiles, for a part within one sample, from one walk down the staged column in chunks
// of 16 rows (ColumnMoments), before the part's stores; otherwise two passes over the column
// after them (the mean, then the squared deviations from it). relu_moments_of_tiles_kernel
// combines the parts per (sample, channel) (in double). Rows are consecutive output positions, so a
// part holds one sample's rows, or two where it straddles a boundary (the host asks for the
// moments only where a sample has at least 128 rows: wgmma_conv_relu_moments_supported).
#pragma once

#include "common/cuda/async_proxy.cuh"
#include "common/cuda/device_info.cuh"
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/per_device.cuh"
#include "common/cuda/tensor_map_copies.cuh"
#include "conv/conv_kernels.h"
#include "conv/conv_side_work.cuh"

#include <cuda.h>  // CUtensorMap (the types only: the driver is reached through the runtime)
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <utility>

// (Included in both compilation passes: host and device must see the same declarations.)
#include "cute/arch/mma_sm90_desc.hpp"
#include "cute/arch/mma_sm90_gmma.hpp"
#include "cutlass/arch/reg_reconfig.h"

// The device pass for sm_90a: the only one that compiles the kernel's body.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FUSED_OPS_WGMMA_ENABLED 1
#endif

namespace fused_ops {
namespace gpu {

// One launch of the wgmma convolution: sizes in PyTorch's names, pointers as above.
struct WgmmaConvParams {
  int64_t N, D, H, W, C_in, C_out;
  int64_t kD, kH, kW, Do, Ho, Wo;
  int64_t stride[3], padding[3], dilation[3];
  int64_t M;         // N * Do * Ho * Wo
  int64_t c_chunks;  // ceil(C_in / 32): K blocks per tap
  const float* x;
  // The weights as the B tiles of the kernel's K blocks, each copied by one bulk copy:
  // [tap][c_chunk][C_out tile of b_bn][part: high (, low)][b_bn rows][32], each tile's rows as
  // they lie in shared memory (128-byte swizzled), zero in the padding
  // (split_tf32_weights_kernel).
  const float* w_tiles;
  int64_t b_bn;     // the tiles' channels: the kernel's kBN
  int64_t b_parts;  // 2 (split products: high and low parts) or 1 (plain TF32)
  // The channels of each block of 32 in wgmma_conv_channel_of_k's order (the A operand from
  // registers: the split products, and wgmma_plane_conv3d.cuh's plain TF32 ones), else their
  // own (plain TF32 with A from shared memory).
  bool b_k_permuted;
  const float* bias;  // C_out
  // NDHWC (N, Do, Ho, Wo, C_out), or with y_channels_first NCDHW (N, C_out, Do, Ho, Wo): the
  // consumers stage the tile transposed and the epilogue warpgroup stores it by tensor-map
  // copies, so that an output wanted NCDHW (the gradient of an NCDHW module input) needs no
  // transpose pass after.
  float* y;
  bool y_channels_first;
  // Optional, null for none: per (row tile, segment 0/1, channel) the (mean, M2) of
  // relu(y) over the staged part's rows (Tile::kOutRows: a tile's 128, or 64 with the im2col
  // copies) of its first / second sample, [ceil(M / kOutRows)][2][C_out] (segment 1 written
  // only by parts that straddle samples). Needs spatial >= 128.
  float2* tile_moments;
  int64_t spatial;  // Do * Ho * Wo: rows per sample (> 0)
  // The launch's output rows [row_begin, row_end) of M (wgmma_conv_params: all of them): the
  // pipelined forward runs a few launches over consecutive ranges. row_begin is a multiple of
  // the tile's kBM * kCluster; rows past row_end are neither stored nor counted in the moments.
  int64_t row_begin, row_end;
  // With the im2col copies: what the producer warpgroup's idle warps do beside the
  // convolution (conv_side_work.cuh; none where its ranges are empty).
  ConvSideWork side;
  // Where defined, x is this operand (x null), NCDHW: the plane-box kernel's only
  // (wgmma_plane_conv3d.cuh, "The GroupNorm backward's operand").
  conv::ReluGroupNormGradOperand x_from_norm;
};

constexpr int kWgmmaConvBK = 32;        // input channels per K block: one 128-byte row
constexpr int kWgmmaConvThreads = 384;  // a producer and two consumer warpgroups
// The convolution's block adds an epilogue warpgroup.
constexpr int kWgmmaConvBlockThreads = kWgmmaConvThreads + 128;
constexpr int kWgmmaConvMaxBN = 128;      // the widest tile's channels
constexpr int kWgmmaConvMaxTapBits = 32;  // kD + kH + kW at most (the rows' tap masks)

template <int BN, int Stages, bool Split = true, bool TmaIm2col = false, int Cluster = 1,
          int MBlocks = 1, int OutBuffers = 1>
struct WgmmaConvTile {
  static constexpr int kBN = BN, kStages = Stages;
  // Split TF32 (3 products per float32 product), else plain TF32 (one, as cuDNN's with TF32
  // allowed; see "Plain TF32" above).
  static constexpr bool kSplit = Split;
  // The activation tiles copied by the tensor memory accelerator's im2col mode (one
  // instruction per K block, by one producer thread; "Plain TF32" above) instead of the
  // producer warpgroup's 16-byte copies. Plain TF32 only: the split products read the
  // activations in their own K order (wgmma_conv_channel_of_k), which TMA does not permute.
  static constexpr bool kTmaIm2col = TmaIm2col;
  static_assert(!(Split && TmaIm2col), "the im2col copies feed the plain TF32 products");
  // Blocks per cluster: the cluster's blocks take consecutive row tiles of one channel tile,
  // and each copies 1 / kCluster of every K block's weight tile into all of their shared
  // memories (multicast): the weights are then read from L2 once per cluster, not per block.
  // With the im2col copies only (the producer is one thread).
  static constexpr int kCluster = Cluster;
  static_assert(Cluster == 1 || (TmaIm2col && (Cluster == 2 || Cluster == 4)),
                "clusters of 2 or 4, with the im2col copies");
  // m64 blocks per consumer warpgroup: 2 (kBM = 256) halves the weights' copies per product,
  // with the im2col copies and plain TF32 only (the split's registers hold one).
  static constexpr int kMBlocks = MBlocks;
  static_assert(MBlocks == 1 || (MBlocks == 2 && TmaIm2col), "kBM = 256 with the im2col copies");
  static constexpr int kBM = 128 * MBlocks;  // two consumer warpgroups of kMBlocks x m64
  static constexpr int kABytes = kBM * 128;
  static constexpr int kBBytes = kBN * 128;
  static constexpr int kBParts = kSplit ? 2 : 1;  // the weights' TF32 parts: high (and low)
  static constexpr int kStageBytes = kABytes + kBParts * kBBytes;
  // The staged output (y = acc + bias, kOutRows rows of kBN floats): the whole tile, or, with
  // the im2col copies, one m64 block of one consumer warpgroup at a time (the two take turns),
  // which leaves room for the 4 stages of 48 KB of 256-row tiles (it costs the 128-row ones
  // ~5%, the second warpgroup waiting for the first's part to be stored; their 6 stages that
  // it also allows did not help: "Plain TF32" above). A row pitch of 8 modulo 32 words makes
  // the consumers' 8-byte stores conflict-free (each half warp's 4 rows x 4 column pairs cover
  // the 32 banks), 4 (two-way conflicts, once per part) where the 256-row tiles need the bytes;
  // rows stay 16-byte aligned for the epilogue warpgroup's row reads; its column reads are
  // conflict-free at any pitch.
  static constexpr int kOutRows = TmaIm2col ? 64 : kBM;  // (parts: one (WG, m64 block) each)
  static constexpr int kOutParts = kBM / kOutRows;       // staged parts per tile
  static constexpr int kOutPitch = kBN + (TmaIm2col ? 4 : 8);
  static constexpr int kOutBytes = kOutRows * kOutPitch * 4;
  // Staging buffers: 1, or 2 with parts (one per consumer warpgroup: neither waits for the
  // other's part to be stored; OutTileHandoff). Two fit the 256-row tiles only with 3 stages,
  // which cost more than the wait: 0.94 ms at the headline (0.99 with the moments) against 4
  // stages and one buffer's 0.87 (0.94) on an H100, 2026-11-27 (the check program's "2buf" rows).
  static constexpr int kOutBuffers = OutBuffers;
  static_assert(OutBuffers == 1 || (OutBuffers == 2 && kOutParts > 1), "2 buffers with parts");
  // + 1 KB to align the ring to the 1024-byte swizzle atom
  static constexpr int kSmemBytes = kStages * kStageBytes + kOutBuffers * kOutBytes + 1024;
  // Static shared memory besides: the ring's mbarriers and the staged output's.
  static constexpr int kStaticSmemBytes = 2 * kStages * 8 + (kOutBuffers + 2) * 8;
  // Registers per thread after setmaxnreg (the block's 4 x 128 threads share 64 K): the
  // producer keeps 2 per activation row it copies (8 rows), the consumers their accumulators
  // and a K block's sums (kBN floats) and fragments (16 floats), the epilogue warpgroup a few
  // sums per column. (Two m64 tiles per consumer, kBM = 256, spilled and serialized the
  // products with 256 x 64 tiles, and were slower where they compiled:
  // benchmarks/split_tf32_wgmma_check.cu, 2026-11-25; with plain TF32 products they compiled
  // and were slower too, 2026-11-26.)
  // (Plain TF32's consumers hold only their accumulators: 16 registers more for the
  // producer's thread of the im2col copies, which spilled its loop's state at 40 in clusters.)
  // Plain TF32 tiles of 128 channels: 32 registers moved from the consumers (184 hold their
  // 128 accumulators without a spill) to the producer warpgroup, whose idle warps do the
  // pipelined forward's side work (conv_side_work.cuh) with twice the loads in flight: at the
  // headline on an H100 (2026-11-27) the products with the whole batch's side work took 0.975
  // ms instead of 1.020 (0.876 without it, as before). The 64-channel tiles keep 56 / 200: they
  // spilled 120 bytes at 88 / 184 and were 1-2% slower.
  static constexpr bool kWideSideWork = !Split && BN == 128;
  static constexpr int kProducerRegisters = Split ? 40 : kWideSideWork ? 88 : 56;
  static constexpr int kConsumerRegisters = Split ? 208 : kWideSideWork ? 184 : 200;
  // The side work's positions per unit, in 32s: as many loads in flight as its registers hold.
  static constexpr int kSideHalves = kWideSideWork ? 4 : 2;
  static constexpr int kEpilogueRegisters = 56;
  static_assert(kSmemBytes + kStaticSmemBytes <= 227 * 1024, "an sm_90 block's shared memory");
  static_assert(kProducerRegisters + 2 * kConsumerRegisters + kEpilogueRegisters <= 512,
                "64 K registers a block of 512 threads");
  static_assert(kBN == 64 || kBN == 128, "the wgmma shapes instantiated: N = 64 or 128");
};

namespace wgmma_conv_detail {

// v = hi + lo, both TF32 rounded to nearest: hi is v rounded, lo the remainder (exact in float)
// rounded. The split of the weights (split_tf32_weights_kernel) and of the activations (in the
// kernel's registers). On sm_90 cvt.rn (ties to even) is one instruction (F2FP); cvt.rna (ties
// away, compute capability 8.0+, for the file's other images, which never run it) is emulated
// in five, which made the activations' split 60% of the consumers' instructions.
__device__ __forceinline__ void split_tf32_rounded(float v, uint32_t& hi, uint32_t& lo) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(v));
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(lo) : "f"(v - __uint_as_float(hi)));
#else
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(v));
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(lo) : "f"(v - __uint_as_float(hi)));
#endif
}

// The K order within a block of 32 channels: wgmma's k index kk * 8 + c (k8 step kk, column c
// of the step) is input channel 8 * (c % 4) + 2 * kk + c / 4. A thread's fragment columns are
// c = t and t + 4 of every step (t = lane % 4), i.e. channels 8t .. 8t + 7: two 16-byte loads
// per fragment row instead of eight 4-byte ones. The split weights are stored in this order.
__host__ __device__ constexpr int wgmma_conv_channel_of_k(int k) {
  return 8 * ((k % 8) % 4) + 2 * (k / 8) + (k % 8) / 4;
}

#ifdef FUSED_OPS_WGMMA_ENABLED

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy, zero-filled where !valid (src is then not read).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory by
// the copy engine (the async proxy, as the tensor cores' reads), completing on mbarrier `bar`.
__device__ __forceinline__ void bulk_copy_to_shared(uint32_t dst, const void* src, uint32_t bytes,
                                                    uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// bulk_copy_to_shared into the same offset of the shared memory of every block of the
// cluster in `cta_mask`, completing on each one's mbarrier at `bar`'s offset.
__device__ __forceinline__ void bulk_copy_to_cluster(uint32_t dst, const void* src, uint32_t bytes,
                                                     uint32_t bar, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "h"(cta_mask)
      : "memory");
}
// Every thread of the cluster's blocks: arrive (releasing its writes) and wait for all.
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// The im2col copy of the tensor memory accelerator (x_map: make_x_im2col_map): kBM
// consecutive output positions' rows of 32 channels from channel `c`, the first position's
// window corner at (w, h, d) of sample n (negative in the padding), each row shifted by the
// tap's offsets (ow, oh, od) within the window; zeros outside x (padding, channels past C_in,
// positions past the last sample), 128-byte swizzled as the map says; completes on `bar`.
__device__ __forceinline__ void im2col_copy_to_shared(uint32_t dst, const CUtensorMap* x_map,
                                                      int32_t c, int32_t w, int32_t h, int32_t d,
                                                      int32_t n, uint16_t ow, uint16_t oh,
                                                      uint16_t od, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2], {%8, %9, %10};\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(x_map)), "r"(bar), "r"(c), "r"(w), "r"(h), "r"(d), "r"(n),
      "h"(ow), "h"(oh), "h"(od)
      : "memory");
}
// The tiled store of the tensor memory accelerator: shared memory at src to the box of `map`
// whose corner is at coordinates (c0, c1, c2) (innermost first); elements outside the tensor
// are not written. In this thread's bulk group (bulk_stores_commit_and_wait_read).
__device__ __forceinline__ void tiled_store_from_shared_3d(const CUtensorMap* map, uint32_t src,
                                                           int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// Closes this thread's bulk group and waits until its stores have read their shared memory.
__device__ __forceinline__ void bulk_stores_commit_and_wait_read() {
  asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Byte offset of element (row, col) in a 128-byte-swizzled tile of 32-float rows.
__device__ __forceinline__ uint32_t swizzled(int row, int col) {
  return static_cast<uint32_t>(row * 128 + ((((col >> 2) ^ (row & 7)) << 4) | ((col & 3) << 2)));
}

// Matrix descriptor of a K-major, 128-byte-swizzled tile at `smem` (1024-byte aligned): rows of
// 128 bytes, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t k_major_sw128_desc(uint32_t smem) {
  cute::GmmaDescriptor desc;
  desc.bitfield.start_address_ = static_cast<uint16_t>(smem >> 4);
  desc.bitfield.leading_byte_offset_ = 1;  // unused for swizzled K-major layouts
  desc.bitfield.stride_byte_offset_ = 1024 >> 4;
  desc.bitfield.base_offset_ = 0;
  desc.bitfield.layout_type_ = static_cast<uint8_t>(cute::SM90::GMMA::LayoutType::B128);
  return desc.desc_;
}

// The m64 x kBN x k8 TF32 products: A from registers (Op) or from shared memory (SharedOp).
template <int kBN>
struct Wgmma;
template <>
struct Wgmma<128> {
  using Op = cute::SM90::GMMA::MMA_64x128x8_F32TF32TF32_RS_TN<>;
  using SharedOp = cute::SM90::GMMA::MMA_64x128x8_F32TF32TF32_SS_TN<>;
};
template <>
struct Wgmma<64> {
  using Op = cute::SM90::GMMA::MMA_64x64x8_F32TF32TF32_RS_TN<>;
  using SharedOp = cute::SM90::GMMA::MMA_64x64x8_F32TF32TF32_SS_TN<>;
};

// acc (m64 x kBN, kBN / 2 floats a thread) += a (this thread's 4 values of the m64 x k8
// fragment) * the k8 x kBN tile that `desc` describes.
// (scale Zero: acc = the product, overwriting it.)
template <int kBN, size_t... I>
__device__ __forceinline__ void wgmma_rs(float* acc, const uint32_t (&a)[4], uint64_t desc,
                                         cute::SM90::GMMA::ScaleOut scale,
                                         std::index_sequence<I...>) {
  Wgmma<kBN>::Op::fma(a[0], a[1], a[2], a[3], desc, acc[I]..., scale);
}

// acc += the m64 x k8 tile that `desc_a` describes * the k8 x kBN tile of `desc_b`.
template <int kBN, size_t... I>
__device__ __forceinline__ void wgmma_ss(float* acc, uint64_t desc_a, uint64_t desc_b,
                                         std::index_sequence<I...>) {
  Wgmma<kBN>::SharedOp::fma(desc_a, desc_b, acc[I]..., cute::SM90::GMMA::ScaleOut::One);
}

// acc += partial once the products into `partial` are done (warpgroup_wait): a K block's sum,
// added in float32 on the CUDA cores (see "Accumulation" above).
template <int N>
__device__ __forceinline__ void add_block_sum(float (&acc)[N], float (&partial)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    cute::warpgroup_fence_operand(partial[i]);
    acc[i] += partial[i];
  }
}

// The m64 x k8 TF32 fragment of k8 step kk from this thread's rows g and g + 8 (rows[0],
// rows[1]: channels 8t .. 8t + 3 and 8t + 4 .. 8t + 7 each, in wgmma_conv_channel_of_k's order):
// (row g, col t), (g + 8, t), (g, t + 4), (g + 8, t + 4), i.e. channels 8t + 2kk and
// 8t + 2kk + 1 of rows g and g + 8.
__device__ __forceinline__ void fragment_of_step(const float4 (&rows)[2][2], int kk,
                                                 float (&v)[4]) {
  const float4& row_g = rows[0][kk / 2];
  const float4& row_g8 = rows[1][kk / 2];
  v[0] = kk % 2 == 0 ? row_g.x : row_g.z;
  v[1] = kk % 2 == 0 ? row_g8.x : row_g8.z;
  v[2] = kk % 2 == 0 ? row_g.y : row_g.w;
  v[3] = kk % 2 == 0 ? row_g8.y : row_g8.w;
}

// One K block's split-TF32 products from this thread's fragment rows into `partial`, from zero:
// per k8 step the fragment split in registers, then a_lo w_hi + a_hi w_lo + a_hi w_hi (the
// small products first: the block's first overwrites `partial`), B's high and low parts
// through desc_hi and desc_lo. The caller commits and waits.
template <int kBN>
__device__ __forceinline__ void split_block_products(float (&partial)[kBN / 2],
                                                     const float4 (&rows)[2][2], uint64_t desc_hi,
                                                     uint64_t desc_lo) {
#pragma unroll
  for (int kk = 0; kk < kWgmmaConvBK / 8; ++kk) {
    float v[4];
    fragment_of_step(rows, kk, v);
    uint32_t a_hi[4], a_lo[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      split_tf32_rounded(v[i], a_hi[i], a_lo[i]);
    }
    cute::warpgroup_arrive();
    // 32 bytes (k8) further along the swizzled rows: the descriptor's address is in 16 bytes.
    const uint64_t k_step = static_cast<uint64_t>(kk * 2);
    const auto first = kk == 0 ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One;
    wgmma_rs<kBN>(partial, a_lo, desc_hi + k_step, first, std::make_index_sequence<kBN / 2>{});
    wgmma_rs<kBN>(partial, a_hi, desc_lo + k_step, cute::SM90::GMMA::ScaleOut::One,
                  std::make_index_sequence<kBN / 2>{});
    wgmma_rs<kBN>(partial, a_hi, desc_hi + k_step, cute::SM90::GMMA::ScaleOut::One,
                  std::make_index_sequence<kBN / 2>{});
  }
}

// y = acc + bias over kMBlocks m64 blocks of kBN columns from n0 (accumulator 4j + e of a
// block: row g + 8 (e / 2), column 8j + 2t + e % 2); columns past C_out keep acc (0: the
// weights' padding).
template <int kBN, int kMBlocks>
__device__ __forceinline__ void add_bias(float* acc, const float* bias, int n0, int64_t C_out,
                                         int t) {
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int col = n0 + 8 * j + 2 * t;
    if (col < C_out) {  // C_out is even: both columns or neither
      const float2 b = *reinterpret_cast<const float2*>(bias + col);
#pragma unroll
      for (int i = 0; i < kMBlocks; ++i) {
        float* const a = acc + i * (kBN / 2) + 4 * j;
        a[0] += b.x, a[1] += b.y, a[2] += b.x, a[3] += b.y;
      }
    }
  }
}

// One m64 block's outputs (acc: its kBN / 2 accumulators) staged transposed, for tensor-map
// stores into an NCDHW y: boxes of 32 rows as [kBN channels][32 positions], 128-byte swizzled
// (row r, channel c: box r / 32, line c, position r % 32), which a warp's stores fill
// conflict-free; out_row0: this thread's row g in the staged part.
template <int kBN>
__device__ __forceinline__ void stage_block_transposed(uint8_t* boxes, const float* acc,
                                                       int out_row0, int t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = out_row0 + 8 * half;
    uint8_t* const box = boxes + (r >> 5) * (kBN * 128);
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const float* const a = acc + 4 * j + 2 * half;
      *reinterpret_cast<float*>(box + swizzled(8 * j + 2 * t, r & 31)) = a[0];
      *reinterpret_cast<float*>(box + swizzled(8 * j + 2 * t + 1, r & 31)) = a[1];
    }
  }
}

// The ring of kStages shared-memory slots between a kernel's producer warpgroup (128 threads)
// and its two consumer warpgroups (256), one K block per slot: a "full" mbarrier per slot,
// on which every producer thread arrives once its own copies into the slot have landed, and
// an "empty" one, on which every consumer thread arrives once done with the slot. A producer
// thread publishes K block kb - kLag after issuing (and committing, as one cp.async group)
// block kb's copies, so kLag blocks stay in flight; a proxy fence first orders its writes
// before the tensor cores' reads of the slot (the async proxy; kProducerProxyFence false where
// no tensor core reads them, or its readers fence), the arrive releases them to the
// consumers' acquire. The kernels of split_tf32_wgmma_conv3d.cuh and _wgrad.cuh.
template <int kStages, bool kProducerProxyFence = true>
struct StageRing {
  static constexpr int kLag = kStages - 2;  // (producer_publish's: at least 1)
  uint64_t* full;
  uint64_t* empty;

  // By one thread, before a __syncthreads. (extra_full_arrivals: a thread that issues bulk
  // copies arrives once more per block, expecting their bytes.)
  // (producer_threads: 0 where thread 0 issues every copy of a block, by the copy engine: its
  // extra arrival is then the only one.)
  // (consumer_arrivals: 8 * blocks where a warp's lane 0 arrives for the warp, on the barriers
  // of every block of its cluster: consumer_release_cluster.)
  __device__ void init(uint32_t extra_full_arrivals = 0, uint32_t producer_threads = 128,
                       uint32_t consumer_arrivals = 256) const {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(smem_u32(&full[s]), producer_threads + extra_full_arrivals);
      mbarrier_init(smem_u32(&empty[s]), consumer_arrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Producer: before writing block kb's slot, the consumers are done with its last block.
  __device__ void producer_acquire(int kb) const {
    if (kb >= kStages) {
      mbarrier_wait(smem_u32(&empty[kb % kStages]), ((kb / kStages) - 1) & 1);
    }
  }
  // Producer, after committing block kb's copies: publishes block kb - kLag.
  __device__ void producer_publish(int kb) const {
    static_assert(kLag >= 1, "publishing lags the copies by 1 .. kStages - 1 blocks");
    if (kb >= kLag) {
      cp_async_wait<kLag>();
      if (kProducerProxyFence) {
        fence_proxy_async_shared();
      }
      mbarrier_arrive(smem_u32(&full[(kb - kLag) % kStages]));
    }
  }
  // Producer, after its last block: publishes the blocks still unpublished.
  __device__ void producer_finish(int k_blocks) const {
    cp_async_wait<0>();
    if (kProducerProxyFence) {
      fence_proxy_async_shared();
    }
    for (int kb = k_blocks > kLag ? k_blocks - kLag : 0; kb < k_blocks; ++kb) {
      mbarrier_arrive(smem_u32(&full[kb % kStages]));
    }
  }
  // Consumer: block kb's slot is full; then, once this thread is done with it, free.
  __device__ void consumer_wait(int kb) const {
    mbarrier_wait(smem_u32(&full[kb % kStages]), (kb / kStages) & 1);
  }
  __device__ void consumer_release(int kb) const {
    mbarrier_arrive(smem_u32(&empty[kb % kStages]));
  }
  // The same where the slot is filled for all kCluster blocks of a cluster at once (multicast
  // copies): once the warp is done with it, its lane 0 arrives on the slot's "empty" barrier
  // in every block of the cluster.
  template <int kCluster>
  __device__ void consumer_release_cluster(int kb) const {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) {
      const uint32_t bar = smem_u32(&empty[kb % kStages]);
#pragma unroll
      for (int rank = 0; rank < kCluster; ++rank) {
        asm volatile(
            "{\n"
            ".reg .b32 remote;\n"
            "mapa.shared::cluster.u32 remote, %0, %1;\n"
            "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
            "}\n" ::"r"(bar),
            "r"(rank)
            : "memory");
      }
    }
  }
};

// The producers' K block: its tap (tt, tr, ts) and chunk of 32 input channels, stepped in the
// K loop's order without divisions (the next chunk of channels, else the next tap).
struct KBlockCursor {
  int tt = 0, tr = 0, ts = 0, c_chunk = 0;
  // To the next K block; whether its tap is another.
  __device__ bool next(int c_chunks, int kH, int kW) {
    if (++c_chunk < c_chunks) {
      return false;
    }
    c_chunk = 0;
    if (++ts == kW) {
      ts = 0;
      if (++tr == kH) {
        tr = 0;
        ++tt;
      }
    }
    return true;
  }
};

// Over rows [lo, hi) of a staged column (pitch kPitch floats): the sum of relu(v) - center,
// squared if `square`, in 8 interleaved sums added pairwise (NaN kept).
template <int kPitch>
__device__ __forceinline__ float sum_column_rows(const float* column, int lo, int hi, float center,
                                                 bool square) {
  float part[8] = {};
  for (int r0 = lo; r0 < hi; r0 += 8) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (r0 + k < hi) {
        const float v = column[(r0 + k) * kPitch];
        const float d = (v < 0.f ? 0.f : v) - center;
        part[k] += square ? d * d : d;
      }
    }
  }
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// The (mean, M2) of relu(v) over a staged column's rows, from one read of it: per chunk of
// kChunk rows (held in registers) the chunk's mean and its sum of squared deviations from it,
// summed pairwise; the chunks combined in order by Chan et al.'s update (the deviation of the
// chunk's mean from the running mean, weighted by n_a n_b / (n_a + n_b)). Centred throughout:
// no E[v^2] - mean^2 cancellation. relu(v) as stored (NaN kept).
struct ColumnMoments {
  static constexpr int kChunk = 16;
  float mean = 0.f, m2 = 0.f;
  template <int kN>
  __device__ static float pairwise_sum(const float (&a)[kN]) {
    float s[kN / 2];
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      s[i] = a[2 * i] + a[2 * i + 1];
    }
    if constexpr (kN == 2) {
      return s[0];
    } else {
      return pairwise_sum<kN / 2>(s);
    }
  }
  // Chunk `chunk` (0, 1, ...: the chunks before it are in mean and m2).
  __device__ void add_chunk(int chunk, const float (&v)[kChunk]) {
    float a[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      a[i] = v[i] < 0.f ? 0.f : v[i];
    }
    const float chunk_mean = pairwise_sum(a) * (1.f / kChunk);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const float d = a[i] - chunk_mean;
      a[i] = d * d;
    }
    const float chunk_m2 = pairwise_sum(a);
    if (chunk == 0) {
      mean = chunk_mean;
      m2 = chunk_m2;
    } else {
      // n_a = chunk * kChunk rows so far, n_b = kChunk.
      const float delta = chunk_mean - mean;
      mean += delta * (1.f / static_cast<float>(chunk + 1));
      m2 += chunk_m2 + delta * delta * (static_cast<float>(chunk * kChunk) / (chunk + 1));
    }
  }
};

// The staged output between the consumer warpgroups and the epilogue warpgroup, in parts:
//   - one part a tile (kParts 1), written by both consumer warpgroups: for the block's u-th
//     tile they wait for the buffer to be free (the epilogue warpgroup's 128 arrivals on
//     free[0] for tile u - 1), fill it and arrive on `full` (256 arrivals);
//   - parts of 64 rows (kParts 2 or 4): part h of the block's sequence written by consumer
//     warpgroup h % 2 alone (128 arrivals on `full`), the two taking turns; the epilogue
//     warpgroup arrives on free[h % 2] once done with part h, and the writer of part h + 1
//     (the other warpgroup) waits for that. Each warpgroup so waits for every phase of its
//     peer's barrier in turn (a parity wait cannot tell a phase from the one two later; with
//     one barrier, a warpgroup staging its two blocks back to back skipped its peer's phase).
//   - with two buffers (kBuffers 2, parts only): warpgroup wg's parts go to buffer wg, each
//     with its own `full` barrier; before its part h the writer waits for the epilogue to be
//     done with part h - 2, its own previous one (free[wg]), not with its peer's.
// The epilogue warpgroup waits for every phase of `full` (each buffer's) in turn. mbarriers:
// the arrivals release the writes (or reads) before them, the waits acquire them.
template <int kParts, int kBuffers = 1>
struct OutTileHandoff {
  uint64_t* full;                 // [kBuffers]
  uint64_t* free;                 // [2]
  __device__ void init() const {  // by one thread, before a __syncthreads
    for (int b = 0; b < kBuffers; ++b) {
      mbarrier_init(smem_u32(&full[b]), kParts == 1 ? 256 : 128);
    }
    mbarrier_init(smem_u32(&free[0]), 128);
    mbarrier_init(smem_u32(&free[1]), 128);
  }
  // Before consumer warpgroup wg fills part h (the tile's, or its block's): the epilogue is
  // done with the part before (with two buffers: this warpgroup's part before). `waited`: this
  // thread's waits so far (the phases seen).
  __device__ void consumer_wait_free(int h, int wg, int& waited) const {
    if (kBuffers == 2 ? h >= 2 : h > 0) {
      mbarrier_wait(smem_u32(&free[kParts == 1 ? 0 : kBuffers == 2 ? wg : 1 - wg]), waited & 1);
      ++waited;
    }
  }
  __device__ void consumer_arrive_full(int wg) const {
    mbarrier_arrive(smem_u32(&full[kBuffers == 2 ? wg : 0]));
  }
  __device__ void epilogue_wait_full(int h) const {
    mbarrier_wait(smem_u32(&full[h % kBuffers]), (h / kBuffers) & 1);
  }
  __device__ void epilogue_arrive_free(int h) const {
    mbarrier_arrive(smem_u32(&free[kParts == 1 ? 0 : h % 2]));
  }
};

#endif  // FUSED_OPS_WGMMA_ENABLED

}  // namespace wgmma_conv_detail

// x_map: x's im2col tensor map where Tile::kTmaIm2col (make_x_im2col_map), else unused; y_map:
// y's NCDHW tensor map where p.y_channels_first (make_y_ncdhw_map), else unused.
template <typename Tile>
__global__ void __launch_bounds__(kWgmmaConvBlockThreads, 1)
    split_tf32_wgmma_conv3d_kernel(const WgmmaConvParams p,
                                   const __grid_constant__ CUtensorMap x_map,
                                   const __grid_constant__ CUtensorMap y_map) {
#ifdef FUSED_OPS_WGMMA_ENABLED
  using namespace wgmma_conv_detail;
  constexpr int kBN = Tile::kBN, kStages = Tile::kStages, kBM = Tile::kBM;
  constexpr int kAcc = kBN / 2;  // accumulator floats per thread

  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full_bar[kStages], empty_bar[kStages], out_bar[Tile::kOutBuffers + 2];
  const StageRing<kStages, false> ring{full_bar, empty_bar};
  const OutTileHandoff<Tile::kOutParts, Tile::kOutBuffers> out_handoff{&out_bar[0],
                                                                       &out_bar[Tile::kOutBuffers]};
  const uint32_t smem_base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_base - smem_u32(smem_raw));
  // The staged output, after the ring: kOutBuffers x [kOutRows][kOutPitch] floats.
  float* const out_tiles = reinterpret_cast<float*>(smem + kStages * Tile::kStageBytes);
  constexpr int kOutFloats = Tile::kOutBytes / 4;

  const int tid = threadIdx.x;
  // Persistent: the tiles in groups of kCluster consecutive row tiles of one channel tile;
  // cluster c (block b alone where kCluster is 1) takes groups c, c + clusters, ...; group g
  // is row tiles (g / n_tiles) * kCluster + rank (the block's rank in its cluster) of channel
  // tile g % n_tiles (the channel tiles of a row tile run side by side: x is read from L2 once
  // for them). A row tile past M (the last group's, with clusters) is computed on clamped
  // rows and not stored. The ring's K blocks are counted over all of the block's tiles.
  constexpr int kCluster = Tile::kCluster;
  const int n_tiles = static_cast<int>((p.C_out + kBN - 1) / kBN);
  const int64_t first_row_tile = p.row_begin / kBM;  // the launch's rows (WgmmaConvParams)
  const int64_t end_row_tile = (p.row_end + kBM - 1) / kBM;
  const int64_t groups = (end_row_tile - first_row_tile + kCluster - 1) / kCluster * n_tiles;
  const int64_t first_group = blockIdx.x / kCluster, group_step = gridDim.x / kCluster;
  const int rank = static_cast<int>(blockIdx.x % kCluster);
  const auto row_tile_of = [&](int64_t group) {
    return first_row_tile + group / n_tiles * kCluster + rank;
  };
  // All the cluster's threads meet before leaving: the other blocks may still copy into this
  // one's shared memory, or arrive on its barriers.
  const auto finish = [] {
    if constexpr (kCluster > 1) {
      cluster_sync_all();
    }
  };
  const int c_chunks = static_cast<int>(p.c_chunks);
  const int k_blocks = static_cast<int>(p.kD * p.kH * p.kW) * c_chunks;

  if (tid == 0) {
    // Thread 0's bulk copy of the weights (and, with the im2col copies, of the activations:
    // then it is the producer's only thread).
    ring.init(/*extra_full_arrivals=*/1, /*producer_threads=*/Tile::kTmaIm2col ? 0 : 128,
              /*consumer_arrivals=*/kCluster > 1 ? 8 * kCluster : 256);
    out_handoff.init();
  }
  if constexpr (kCluster > 1) {
    cluster_sync_all();  // every block's barriers initialized before any copy or arrival
  } else {
    __syncthreads();
  }

  if (Tile::kTmaIm2col && tid < 128) {
    // ---- Producer, im2col copies: thread 0 issues each K block's two copies (the activation
    // tile by the tensor map, the weight tile by a bulk copy), both completing on the slot's
    // "full" barrier in bytes; its warps 1-3 do the launch's side work (p.side), and the
    // rest of warp 0 only gives its registers back.
    cutlass::arch::warpgroup_reg_dealloc<Tile::kProducerRegisters>();
    if (tid != 0) {
      if (tid >= 32) {
        run_conv_side_work<Tile::kSideHalves>(p.side, blockIdx.x * 3 + (tid >> 5) - 1,
                                              gridDim.x * 3, tid & 31);
      }
      finish();
      return;
    }
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&x_map)) : "memory");
    constexpr int kBTileFloats = kBN * kWgmmaConvBK;
    const int kH = static_cast<int>(p.kH), kW = static_cast<int>(p.kW);
    const int64_t Wo = p.Wo, Ho = p.Ho, Do = p.Do;
    int kb = 0;
    for (int64_t group = first_group; group < groups; group += group_step) {
      const int64_t m0 = min(row_tile_of(group), end_row_tile - 1) * kBM;  // (clamped: not stored)
      const int n_tile = static_cast<int>(group % n_tiles);
      // The tile's first output position, and its window's corner in x.
      const int64_t q = m0 % Wo, r = m0 / Wo % Ho, z = m0 / (Wo * Ho) % Do, n = m0 / (Wo * Ho * Do);
      const int32_t corner_w = static_cast<int32_t>(q * p.stride[2] - p.padding[2]);
      const int32_t corner_h = static_cast<int32_t>(r * p.stride[1] - p.padding[1]);
      const int32_t corner_d = static_cast<int32_t>(z * p.stride[0] - p.padding[0]);
      const float* w_tile = p.w_tiles + static_cast<int64_t>(n_tile) * kBTileFloats;
      const int64_t w_tile_step = static_cast<int64_t>(n_tiles) * kBTileFloats;
      KBlockCursor at;
      for (int j = 0; j < k_blocks; ++j, ++kb, w_tile += w_tile_step, at.next(c_chunks, kH, kW)) {
        const int slot = kb % kStages;
        ring.producer_acquire(kb);
        const uint32_t full = smem_u32(&full_bar[slot]);
        const uint32_t stage = smem_base + slot * Tile::kStageBytes;
        mbarrier_arrive_expect_bytes(full, Tile::kABytes + kBTileFloats * 4);
        im2col_copy_to_shared(stage, &x_map, at.c_chunk * kWgmmaConvBK, corner_w, corner_h,
                              corner_d, static_cast<int32_t>(n),
                              static_cast<uint16_t>(at.ts * p.dilation[2]),
                              static_cast<uint16_t>(at.tr * p.dilation[1]),
                              static_cast<uint16_t>(at.tt * p.dilation[0]), full);
        if constexpr (kCluster > 1) {
          // This block's share of the weight tile (rows rank * kBN / kCluster ..), to all.
          constexpr int kShareBytes = kBTileFloats * 4 / kCluster;
          bulk_copy_to_cluster(stage + Tile::kABytes + rank * kShareBytes,
                               w_tile + rank * (kBTileFloats / kCluster), kShareBytes, full,
                               static_cast<uint16_t>((1u << kCluster) - 1));
        } else {
          bulk_copy_to_shared(stage + Tile::kABytes, w_tile, kBTileFloats * 4, full);
        }
      }
    }
    finish();
    return;
  }

  if (tid < 128) {
    // ---- Producer: thread tid copies 16-byte chunk (tid % 8) of rows tid / 8 + 16 i.
    cutlass::arch::warpgroup_reg_dealloc<Tile::kProducerRegisters>();
    constexpr int kRowsA = kBM / 16;  // activation rows per thread and K block
    const int chunk = tid & 7;
    const int row_base = tid >> 3;
    // The K block's tap (tt, tr, ts), its channel chunk and the tap's offset in x from a
    // row's corner, stepped along with kb (no divisions in the loop). Offsets: in elements;
    // into x in 32-bit unsigned arithmetic (modulo 2^32, so a corner in the padding or a large
    // dilation step wraps harmlessly: the sum copied from is inside x, below 2^29 elements).
    const int kD = static_cast<int>(p.kD), kH = static_cast<int>(p.kH);
    const int kW = static_cast<int>(p.kW), C_in = static_cast<int>(p.C_in);
    const uint32_t tap_step[3] = {static_cast<uint32_t>(p.dilation[0] * p.H * p.W * p.C_in),
                                  static_cast<uint32_t>(p.dilation[1] * p.W * p.C_in),
                                  static_cast<uint32_t>(p.dilation[2] * p.C_in)};
    // Output coordinates by 32-bit divisions (M < 2^31: split_tf32_conv3d_shape_supported).
    const uint32_t Wo = static_cast<uint32_t>(p.Wo), Ho = static_cast<uint32_t>(p.Ho);
    const uint32_t Do = static_cast<uint32_t>(p.Do);
    const float* const x = p.x;
    constexpr int kBTileFloats = Tile::kBParts * kBN * kWgmmaConvBK;
    // This thread's 16-byte chunk of its rows, swizzled: rows row_base + 16 i share row % 8.
    const uint32_t dst_in_tile =
        static_cast<uint32_t>(row_base * 128 + ((chunk ^ (row_base & 7)) << 4));
    int kb = 0;  // the ring's K block, over all tiles
    for (int64_t group = first_group; group < groups; group += group_step) {
      const int64_t m0 = row_tile_of(group) * kBM;  // (no clusters here: inside M)
      const int n_tile = static_cast<int>(group % n_tiles);
      // Each activation row's window: the offset of its corner (tap 0) in x, in elements,
      // modulo 2^32 (negative in the padding; see "Offsets" above), and which taps of each dim
      // fall inside x (bits 0.. of the D taps, then the H taps, then the W taps:
      // kWgmmaConvMaxTapBits in all); rows past M have no tap inside.
      uint32_t corner_offset[kRowsA];
      uint32_t tap_mask[kRowsA];
#pragma unroll
      for (int i = 0; i < kRowsA; ++i) {
        const int64_t m = m0 + row_base + 16 * i;
        corner_offset[i] = 0;
        tap_mask[i] = 0;
        if (m < p.M) {
          uint32_t rest = static_cast<uint32_t>(m);
          const int64_t q = rest % Wo;
          rest /= Wo;
          const int64_t r = rest % Ho;
          rest /= Ho;
          const int64_t z = rest % Do;
          const int64_t n = rest / Do;
          const int64_t corner[3] = {z * p.stride[0] - p.padding[0], r * p.stride[1] - p.padding[1],
                                     q * p.stride[2] - p.padding[2]};
          corner_offset[i] = static_cast<uint32_t>(
              (((n * p.D + corner[0]) * p.H + corner[1]) * p.W + corner[2]) * p.C_in);
          const int64_t k[3] = {p.kD, p.kH, p.kW}, size[3] = {p.D, p.H, p.W};
          int bit = 0;
#pragma unroll
          for (int dim = 0; dim < 3; ++dim) {
            for (int64_t tap = 0; tap < k[dim]; ++tap, ++bit) {
              const int64_t at = corner[dim] + tap * p.dilation[dim];
              tap_mask[i] |= (at >= 0 && at < size[dim] ? 1u : 0u) << bit;
            }
          }
        }
      }
      // The tile's B tiles, in the order the K loop walks them (split_tf32_weights_kernel):
      // K block j's is B tile j * n_tiles + n_tile.
      const float* w_tile = p.w_tiles + static_cast<int64_t>(n_tile) * kBTileFloats;
      const int64_t w_tile_step = static_cast<int64_t>(n_tiles) * kBTileFloats;
      KBlockCursor at;
      uint32_t tap_offset = 0;
      for (int j = 0; j < k_blocks; ++j, ++kb, w_tile += w_tile_step) {
        const int slot = kb % kStages;
        ring.producer_acquire(kb);
        if (tid == 0) {
          const uint32_t full = smem_u32(&full_bar[slot]);
          mbarrier_arrive_expect_bytes(full, kBTileFloats * 4);
          bulk_copy_to_shared(smem_base + slot * Tile::kStageBytes + Tile::kABytes, w_tile,
                              kBTileFloats * 4, full);
        }
        // The tap's bits in the masks (the same for every row).
        const uint32_t tap_bits = (1u << at.tt) | (1u << (kD + at.tr)) | (1u << (kD + kH + at.ts));
        const int c = at.c_chunk * kWgmmaConvBK + chunk * 4;
        const bool c_valid = c < C_in;
        const uint32_t a_smem = smem_base + slot * Tile::kStageBytes + dst_in_tile;
#pragma unroll
        for (int i = 0; i < kRowsA; ++i) {
          const bool valid = c_valid && (tap_mask[i] & tap_bits) == tap_bits;
          const uint32_t offset = valid ? corner_offset[i] + tap_offset + c : 0u;
          cp_async_16(a_smem + i * 16 * 128, x + offset, valid);
        }
        cp_async_commit();
        ring.producer_publish(kb);
        if (at.next(c_chunks, kH, kW)) {  // the next K block: another tap
          tap_offset =
              at.tt * tap_step[0] + at.tr * tap_step[1] + at.ts * tap_step[2];  // (unsigned)
        }
      }
    }
    ring.producer_finish(kb);
    return;
  }

  if (tid >= kWgmmaConvThreads) {
    // ---- Epilogue warpgroup: per tile, once the consumers have staged y = acc + bias, stores
    // it (whole rows: 16 bytes a lane) and, where asked for, the moments of relu(y) per column
    // and sample (thread c: column c), while the consumers go on with the next tile.
    cutlass::arch::warpgroup_reg_dealloc<Tile::kEpilogueRegisters>();
    const int etid = tid - kWgmmaConvThreads, ewarp = etid >> 5, elane = etid & 31;
    constexpr int kLanesPerRow = kBN / 4, kRowsPerStep = 4 * (32 / kLanesPerRow);
    const int row_in_step = ewarp * (32 / kLanesPerRow) + elane / kLanesPerRow;
    const int col4 = 4 * (elane % kLanesPerRow);
    constexpr int kOutRows = Tile::kOutRows;
    // The column walk (below) where a thread has a column to itself and parts are 64 rows.
    constexpr bool kColumnWalk = kBN == 128 && kOutRows == 64;
    int u = 0;  // the block's staged parts
    for (int64_t part = first_group * Tile::kOutParts; part < groups * Tile::kOutParts; ++u) {
      const int64_t group = part / Tile::kOutParts;
      const int64_t m0 = row_tile_of(group) * kBM + part % Tile::kOutParts * kOutRows;
      const int n0 = static_cast<int>(group % n_tiles) * kBN;
      const int64_t rows = min(static_cast<int64_t>(kOutRows), p.row_end - m0);  // <= 0: past it
      // The part's row where the next sample begins (past its rows: the part is in one sample).
      const auto next_sample_row = [&] { return (m0 / p.spatial + 1) * p.spatial - m0; };
      // The next part: this tile's next, else the block's next tile's first.
      part = (part + 1) % Tile::kOutParts != 0 ? part + 1 : (group + group_step) * Tile::kOutParts;
      out_handoff.epilogue_wait_full(u);
      const float* const out_tile = out_tiles + u % Tile::kOutBuffers * kOutFloats;
      if constexpr (kColumnWalk) {
        // A whole part within one sample, with its moments (the common case): first the
        // moments, thread c walking column c once (ColumnMoments), then the stores (whole rows,
        // 16 bytes a lane, unrolled), then the buffer is free: the consumers wait for the
        // part's epilogue before staging the next, so its length counts. At the headline on an
        // H200 (2026-11-28, the check program, 256 x 128 tiles alone, best of 20 or median:
        // benchmarks/h200-2026-11-28-free-moments/notes.txt) the convolution took 0.779-0.800
        // ms with the moments against 0.773-0.785 without; with the moments' two passes over
        // the column after the stores (below, for the other parts) 0.858-0.863, and with this
        // walk storing its column itself (4-byte stores) 0.842 even without the moments.
        if (p.tile_moments != nullptr && !p.y_channels_first && rows == kOutRows &&
            next_sample_row() >= kOutRows) {
          const int c = etid;  // (kBN == 128: a column a thread)
          ColumnMoments moments;
#pragma unroll
          for (int chunk = 0; chunk < kOutRows / ColumnMoments::kChunk; ++chunk) {
            float v[ColumnMoments::kChunk];
#pragma unroll
            for (int i = 0; i < ColumnMoments::kChunk; ++i) {
              v[i] = out_tile[(chunk * ColumnMoments::kChunk + i) * Tile::kOutPitch + c];
            }
            moments.add_chunk(chunk, v);
          }
          if (n0 + col4 < p.C_out) {  // C_out % 4 == 0: all 4 columns or none
#pragma unroll
            for (int step = 0; step < kOutRows / kRowsPerStep; ++step) {
              const int r = row_in_step + step * kRowsPerStep;
              *reinterpret_cast<float4*>(p.y + (m0 + r) * p.C_out + n0 + col4) =
                  *reinterpret_cast<const float4*>(out_tile + r * Tile::kOutPitch + col4);
            }
          }
          out_handoff.epilogue_arrive_free(u);
          if (n0 + c < p.C_out) {
            p.tile_moments[(m0 / kOutRows * 2) * p.C_out + n0 + c] =
                make_float2(moments.mean, moments.m2);
          }
          continue;
        }
      }
      if (p.y_channels_first) {
        // The part staged as boxes of [kBN channels][32 positions] (the consumers' transposed
        // staging). A box within one sample: one thread stores it by the tensor map (y_map:
        // positions s .. s + 31 of channels n0 .. of sample n; channels past C_out are left
        // unwritten by the copy engine) and arrives on `free` once the copies have read the
        // part. A box that runs past its sample's last position: every thread stores its
        // elements itself (a tensor-map store cannot start at a negative position: an illegal
        // instruction on an H100), before arriving. The copies' writes complete with the kernel.
        if (rows > 0) {
          const uint8_t* const staged = reinterpret_cast<const uint8_t*>(out_tile);
          bool copies = false;
          for (int b = 0; b < kOutRows / 32 && 32 * b < rows; ++b) {
            const int64_t m = m0 + 32 * b, n = m / p.spatial, s = m - n * p.spatial;
            if (s + 32 <= p.spatial) {
              if (etid == 0) {
                if (!copies) {
                  fence_proxy_async_shared();  // the consumers' stores (generic proxy) first
                  copies = true;
                }
                tiled_store_from_shared_3d(&y_map, smem_u32(staged + b * kBN * 128),
                                           static_cast<int32_t>(s), n0, static_cast<int32_t>(n));
              }
            } else {
              const int c = etid % kBN;
              for (int i = etid / kBN; i < 32; i += 128 / kBN) {
                const int64_t mi = m + i, ni = mi / p.spatial;
                if (mi < p.M && n0 + c < p.C_out) {
                  p.y[(ni * p.C_out + n0 + c) * p.spatial + (mi - ni * p.spatial)] =
                      *reinterpret_cast<const float*>(staged + b * kBN * 128 + swizzled(c, i));
                }
              }
            }
          }
          if (copies) {
            bulk_stores_commit_and_wait_read();
          }
        }
      } else if (rows > 0 && n0 + col4 < p.C_out) {  // C_out % 4 == 0: all 4 columns or none
        for (int r = row_in_step; r < rows; r += kRowsPerStep) {
          *reinterpret_cast<float4*>(p.y + (m0 + r) * p.C_out + n0 + col4) =
              *reinterpret_cast<const float4*>(out_tile + r * Tile::kOutPitch + col4);
        }
      }
      if (p.tile_moments != nullptr && rows > 0 && etid < kBN && n0 + etid < p.C_out) {
        // Per sample the part's rows hold (one, or two where it straddles a boundary: the
        // host asks for the moments only where a sample has at least 128 rows), two passes
        // over the column in shared memory: the mean, then the sum of squared deviations
        // from it (no E[v^2] - mean^2 cancellation), each summed in 8 interleaved float sums
        // added pairwise (a sum of up to 128 terms in order was ~5x further from float64;
        // double sums cost the products time: the tensor cores share their pipe with FP64).
        // relu(y) as stored (NaN kept).
        const float* column = out_tile + etid;
        const int64_t boundary = next_sample_row();
        const int segments = boundary < rows ? 2 : 1;
        for (int segment = 0; segment < segments; ++segment) {
          const int lo = segment == 0 ? 0 : static_cast<int>(boundary);
          const int hi =
              segment == 0 ? static_cast<int>(min(boundary, rows)) : static_cast<int>(rows);
          const float mean =
              sum_column_rows<Tile::kOutPitch>(column, lo, hi, 0.f, false) / (hi - lo);
          const float m2 = sum_column_rows<Tile::kOutPitch>(column, lo, hi, mean, true);
          p.tile_moments[(m0 / kOutRows * 2 + segment) * p.C_out + n0 + etid] =
              make_float2(mean, m2);
        }
      }
      out_handoff.epilogue_arrive_free(u);
    }
    finish();
    return;
  }

  // ---- Consumers.
  cutlass::arch::warpgroup_reg_alloc<Tile::kConsumerRegisters>();
  const int warp = (tid >> 5) - 4, lane = tid & 31;
  const int wg = warp >> 2;  // consumer warpgroup: 0 or 1
  const int g = lane >> 2, t = lane & 3;
  // First row of this thread in the tile (the epilogue's, and the split products' fragments'),
  // and where its 16-byte chunks 2t and 2t + 1 of that row lie (swizzled; see
  // wgmma_conv_channel_of_k: channels 8t .. 8t + 7 of the K block).
  const int frag_row0 = wg * 64 + (warp & 3) * 16 + g;
  const uint32_t frag_chunk[2] = {swizzled(frag_row0, 8 * t), swizzled(frag_row0, 8 * t + 4)};

  int kb = 0;          // the ring's K block, over all tiles
  int u = 0;           // the block's tile count
  int free_waits = 0;  // (OutTileHandoff::consumer_wait_free)
  for (int64_t group = first_group; group < groups; group += group_step, ++u) {
    const int n0 = static_cast<int>(group % n_tiles) * kBN;
    // Block i's accumulators: acc[i * kAcc ..], rows (2 i + wg) * 64 .. of the tile.
    constexpr int kMBlocks = Tile::kMBlocks;
    float acc[kMBlocks * kAcc];
#pragma unroll
    for (int i = 0; i < kMBlocks * kAcc; ++i) {
      acc[i] = 0.f;
    }

    if constexpr (Tile::kSplit) {
      // The tensor cores accumulate one K block (12 products of each output a thread holds)
      // into `partial`, from zero; the block's sum is then added into `acc` in float32 on the
      // CUDA cores (see "Accumulation" above).
      float partial[kAcc];
      for (int j = 0; j < k_blocks; ++j, ++kb) {
        const int slot = kb % kStages;
        ring.consumer_wait(kb);
        const uint8_t* a_tile = smem + slot * Tile::kStageBytes;
        const uint32_t b_hi = smem_base + slot * Tile::kStageBytes + Tile::kABytes;
        const uint64_t desc_hi = k_major_sw128_desc(b_hi);
        const uint64_t desc_lo = k_major_sw128_desc(b_hi + Tile::kBBytes);
        // Rows g and g + 8 (8 * 128 bytes further), channels 8t .. 8t + 3 and 8t + 4 .. 8t + 7.
        float4 q[2][2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            q[half][i] = *reinterpret_cast<const float4*>(a_tile + frag_chunk[i] + half * 8 * 128);
          }
        }
        split_block_products<kBN>(partial, q, desc_hi, desc_lo);
        cute::warpgroup_commit_batch();
        cute::warpgroup_wait<0>();
        // The slot is free once this thread's products (and its fragment loads) are done.
        ring.consumer_release(kb);
        add_block_sum(acc, partial);
      }
    } else {
      const auto release = [&](int block) {
        if constexpr (kCluster > 1) {
          ring.template consumer_release_cluster<kCluster>(block);
        } else {
          ring.consumer_release(block);
        }
      };
      // Plain TF32: both operands from shared memory (x and the weights already TF32 values,
      // in the channels' own order), into `acc` directly (TF32's rounding of the operands,
      // ~2^-11 relative, dwarfs the accumulation's bias). One K block's products stay in
      // flight while the next block's are issued; a slot is released once its products are
      // done. (The proxy fence: x's tile was written by ordinary copies.)
#pragma unroll
      for (int i = 0; i < kMBlocks * kAcc; ++i) {
        cute::warpgroup_fence_operand(acc[i]);
      }
      for (int j = 0; j < k_blocks; ++j, ++kb) {
        const int slot = kb % kStages;
        ring.consumer_wait(kb);
        if constexpr (!Tile::kTmaIm2col) {  // (the copy engine's writes need none)
          fence_proxy_async_shared();
        }
        const uint32_t stage = smem_base + slot * Tile::kStageBytes;
        const uint64_t desc_b = k_major_sw128_desc(stage + Tile::kABytes);
        cute::warpgroup_arrive();
#pragma unroll
        for (int i = 0; i < kMBlocks; ++i) {
          // This WG's rows of block i.
          const uint64_t desc_a = k_major_sw128_desc(stage + (2 * i + wg) * 64 * 128);
#pragma unroll
          for (int kk = 0; kk < kWgmmaConvBK / 8; ++kk) {
            const uint64_t k_step = static_cast<uint64_t>(kk * 2);  // 32 bytes, in 16s
            wgmma_ss<kBN>(acc + i * kAcc, desc_a + k_step, desc_b + k_step,
                          std::make_index_sequence<kAcc>{});
          }
        }
        cute::warpgroup_commit_batch();
        cute::warpgroup_wait<1>();  // the previous block's products are done
        if (j > 0) {
          release(kb - 1);
        }
      }
      cute::warpgroup_wait<0>();
      release(kb - 1);
#pragma unroll
      for (int i = 0; i < kMBlocks * kAcc; ++i) {
        cute::warpgroup_fence_operand(acc[i]);
      }
    }

    // Epilogue. Accumulator i of the m64 x kBN tile: row g + 8 * ((i / 2) % 2), column
    // 8 * (i / 4) + 2 * t + i % 2. acc becomes y = acc + bias.
    add_bias<kBN, kMBlocks>(acc, p.bias, n0, p.C_out, t);
    // Staged for the epilogue warpgroup, once it is done with the last part: the tile, or
    // (parts of 64 rows) block i of this warpgroup as part 2 i + wg.
#pragma unroll
    for (int i = 0; i < kMBlocks; ++i) {
      out_handoff.consumer_wait_free(Tile::kOutParts == 1 ? u : u * Tile::kOutParts + 2 * i + wg,
                                     wg, free_waits);
      const int out_row0 = Tile::kOutParts == 1 ? frag_row0 : (warp & 3) * 16 + g;
      float* const out_tile = out_tiles + (Tile::kOutBuffers == 2 ? wg : 0) * kOutFloats;
      if (p.y_channels_first) {
        // Transposed, for the epilogue's tensor-map stores into an NCDHW y.
        stage_block_transposed<kBN>(reinterpret_cast<uint8_t*>(out_tile), acc + i * kAcc, out_row0,
                                    t);
      } else {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float* const out_row = out_tile + (out_row0 + 8 * half) * Tile::kOutPitch + 2 * t;
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j) {
            const float* const a = acc + i * kAcc + 4 * j + 2 * half;
            *reinterpret_cast<float2*>(out_row + 8 * j) = make_float2(a[0], a[1]);
          }
        }
      }
      out_handoff.consumer_arrive_full(wg);
    }
  }
  finish();
#else
  __trap();  // built without sm_90a code: the host never launches it (wgmma_conv_available)
#endif
}

// Whether x's im2col tensor map (make_x_im2col_map) can describe the convolution: x 16-byte
// aligned with rows of a multiple of 4 channels, and the limits of the im2col mode with three
// spatial dims: the bounding box's corners (-padding and padding - dilation * (k - 1)) in
// [-16, 15], the taps' offsets (dilation * (k - 1)) below 32, traversal strides of at most 8.
inline bool x_im2col_map_supported(const WgmmaConvParams& p) {
  const int64_t k[3] = {p.kD, p.kH, p.kW};
  for (int i = 0; i < 3; ++i) {
    const int64_t lower = -p.padding[i], upper = p.padding[i] - p.dilation[i] * (k[i] - 1);
    if (lower < -16 || lower > 15 || upper < -16 || upper > 15 ||
        p.dilation[i] * (k[i] - 1) >= 32 || p.stride[i] < 1 || p.stride[i] > 8) {
      return false;
    }
  }
  return p.C_in % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
}

// x's (NDHWC) tensor map for the im2col copies of the kernel's activation tiles: per copy
// `pixels` (the tile's kBM) output positions by 32 channels, 128-byte swizzled as the wgmma
// descriptors read them, zeros outside x. By the driver's cuTensorMapEncodeIm2col, reached through
// the runtime (the library does not link the driver).
inline cudaError_t make_x_im2col_map(const WgmmaConvParams& p, int pixels, CUtensorMap* map) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                              const cuuint64_t*, const cuuint64_t*, const int*, const int*,
                              cuuint32_t, cuuint32_t, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = reinterpret_cast<Encode>(driver_function("cuTensorMapEncodeIm2col"));
  if (encode == nullptr || !x_im2col_map_supported(p)) {
    return cudaErrorNotSupported;
  }
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(p.C_in), static_cast<cuuint64_t>(p.W),
                              static_cast<cuuint64_t>(p.H), static_cast<cuuint64_t>(p.D),
                              static_cast<cuuint64_t>(p.N)};
  const auto strides = dense_float_strides(dims);
  // The box of window corners (W, H, D): from -padding to the last output's corner.
  const int lower[3] = {static_cast<int>(-p.padding[2]), static_cast<int>(-p.padding[1]),
                        static_cast<int>(-p.padding[0])};
  const int upper[3] = {static_cast<int>(p.padding[2] - p.dilation[2] * (p.kW - 1)),
                        static_cast<int>(p.padding[1] - p.dilation[1] * (p.kH - 1)),
                        static_cast<int>(p.padding[0] - p.dilation[0] * (p.kD - 1))};
  const cuuint32_t element_strides[5] = {1, static_cast<cuuint32_t>(p.stride[2]),
                                         static_cast<cuuint32_t>(p.stride[1]),
                                         static_cast<cuuint32_t>(p.stride[0]), 1};
  const CUresult r =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, const_cast<float*>(p.x), dims, strides.data(),
             lower, upper, /*channelsPerPixel=*/kWgmmaConvBK, /*pixelsPerColumn=*/pixels,
             element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// Whether y NCDHW can have its tensor map (make_y_ncdhw_map): 16-byte aligned, with planes of a
// multiple of 4 positions (the map's strides are multiples of 16 bytes).
inline bool y_ncdhw_map_supported(const WgmmaConvParams& p) {
  return p.spatial % 4 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
}

// y's (NCDHW) tensor map for the epilogue's stores with y_channels_first: (N, C_out, spatial)
// in boxes of 32 positions by kBN channels of one sample, 128-byte swizzled as the consumers
// stage them.
inline cudaError_t make_y_ncdhw_map(const WgmmaConvParams& p, int bn, CUtensorMap* map) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr || !y_ncdhw_map_supported(p)) {
    return cudaErrorNotSupported;
  }
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(p.spatial), static_cast<cuuint64_t>(p.C_out),
                              static_cast<cuuint64_t>(p.N)};
  const auto strides = dense_float_strides(dims);
  const cuuint32_t box[3] = {32, static_cast<cuuint32_t>(bn), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, p.y, dims, strides.data(), box,
             element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// A launch configuration of `grid` blocks of kWgmmaConvBlockThreads in clusters of
// `blocks_per_cluster` (along x), with `smem_bytes` of dynamic shared memory, for
// cudaOccupancyMaxActiveClusters and cudaLaunchKernelEx. (Not copyable: config points at
// cluster.)
struct ClusterLaunchConfig {
  cudaLaunchAttribute cluster{};
  cudaLaunchConfig_t config{};
  ClusterLaunchConfig(int blocks_per_cluster, unsigned grid, size_t smem_bytes,
                      cudaStream_t stream) {
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = static_cast<unsigned>(blocks_per_cluster);
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.blockDim = dim3(kWgmmaConvBlockThreads);
    config.dynamicSmemBytes = smem_bytes;
    config.stream = stream;
    config.attrs = &cluster;
    config.numAttrs = 1;
    config.gridDim = dim3(grid);
  }
  ClusterLaunchConfig(const ClusterLaunchConfig&) = delete;
  ClusterLaunchConfig& operator=(const ClusterLaunchConfig&) = delete;
};

// The blocks a launch of the kernel with `Tile` runs at once on the current device (persistent:
// a block per SM, in clusters of Tile::kCluster as many as fit together: the GPCs' sizes may
// leave SMs out), into *blocks. Queried once per device (PerDevice).
template <typename Tile>
cudaError_t wgmma_conv_resident_blocks(int* blocks) {
  static PerDevice<int> cache;
  cudaError_t error = cudaErrorInvalidDevice;  // (where the device cannot be queried)
  const int* resident = cache.current([&error](int) -> std::unique_ptr<int> {
    const auto kernel = split_tf32_wgmma_conv3d_kernel<Tile>;
    error =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes);
    const int sms = current_device_info().multiprocessors;
    if (error != cudaSuccess || sms == 0) {
      return nullptr;
    }
    if constexpr (Tile::kCluster == 1) {
      return std::make_unique<int>(sms);
    } else {
      const ClusterLaunchConfig launch(Tile::kCluster,
                                       static_cast<unsigned>(sms / Tile::kCluster * Tile::kCluster),
                                       Tile::kSmemBytes, nullptr);
      int clusters = 0;
      error = cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.config);
      if (error == cudaSuccess && clusters <= 0) {
        error = cudaErrorInvalidConfiguration;
      }
      return error == cudaSuccess ? std::make_unique<int>(clusters * Tile::kCluster) : nullptr;
    }
  });
  if (resident == nullptr) {
    return error != cudaSuccess ? error : cudaErrorInvalidDevice;
  }
  *blocks = *resident;
  return cudaSuccess;
}

// Runs the kernel with `Tile` on weights already split into its B tiles (p.w_tiles), over the
// rows [p.row_begin, p.row_end).
template <typename Tile>
cudaError_t launch_split_tf32_wgmma_conv3d(const WgmmaConvParams& p, cudaStream_t stream) {
  if (p.b_bn != Tile::kBN || p.b_parts != Tile::kBParts ||
      p.row_begin % (Tile::kBM * Tile::kCluster) != 0 || p.row_end <= p.row_begin ||
      p.row_end > p.M) {
    return cudaErrorInvalidValue;  // weights split for another tile, or rows not the tiles'
  }
  int resident = 0;
  const cudaError_t e = wgmma_conv_resident_blocks<Tile>(&resident);
  if (e != cudaSuccess) {
    return e;
  }
  CUtensorMap x_map{}, y_map{};
  if constexpr (Tile::kTmaIm2col) {
    const cudaError_t m = make_x_im2col_map(p, Tile::kBM, &x_map);
    if (m != cudaSuccess) {
      return m;
    }
  }
  if (p.y_channels_first) {
    // (Every row of the launch's: the epilogue stores a box's rows into whichever samples they
    // fall in, up to M; and no moments, which read the tile as staged for NDHWC.)
    if (p.row_begin != 0 || p.row_end != p.M || p.tile_moments != nullptr) {
      return cudaErrorInvalidValue;
    }
    const cudaError_t m = make_y_ncdhw_map(p, Tile::kBN, &y_map);
    if (m != cudaSuccess) {
      return m;
    }
  }
  // Groups of Tile::kCluster row tiles (see the kernel), a cluster per group at most.
  constexpr int kCluster = Tile::kCluster;
  const int64_t row_tiles = (p.row_end - p.row_begin + Tile::kBM - 1) / Tile::kBM;
  const int64_t groups =
      (row_tiles + kCluster - 1) / kCluster * ((p.C_out + Tile::kBN - 1) / Tile::kBN);
  const auto kernel = split_tf32_wgmma_conv3d_kernel<Tile>;
  // (Set where it launches: wgmma_conv_resident_blocks sets it once per device, and a program
  // that instantiates these templates in two files may link that one from the other file,
  // whose kernel is its own.)
  const cudaError_t a =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes);
  if (a != cudaSuccess) {
    return a;
  }
  const unsigned grid = static_cast<unsigned>(
      (groups < resident / kCluster ? groups : resident / kCluster) * kCluster);
  if constexpr (kCluster == 1) {
    kernel<<<grid, kWgmmaConvBlockThreads, Tile::kSmemBytes, stream>>>(p, x_map, y_map);
    return cudaGetLastError();
  } else {
    const ClusterLaunchConfig launch(kCluster, grid, Tile::kSmemBytes, stream);
    return cudaLaunchKernelEx(&launch.config, kernel, p, x_map, y_map);
  }
}

// Host side (split_tf32_wgmma_conv3d_cuda.cu). Whether the current device runs this kernel (and
// the weight gradient's, split_tf32_wgmma_wgrad.cuh): an sm_90 device running this file's
// sm_90a image, and FUSED_OPS_SPLIT_TF32_WGMMA not "0" (which keeps CUTLASS's sm80 kernels with
// TF32 off and cuDNN's weight gradient with TF32 on, for comparisons); read once per device.
bool wgmma_conv_available();
// Whether it takes this shape on the current device.
bool wgmma_conv_supported(const conv::Conv3dShape& s);
// Whether it also computes the ReLU -> GroupNorm statistics (Conv3dChannelsLastParams::
// relu_channel_moments) for this shape: where it takes the shape and a row tile's 128 rows
// hold at most two samples (Do * Ho * Wo >= 128).
bool wgmma_conv_relu_moments_supported(const conv::Conv3dShape& s);
// Whether it writes y NCDHW (Conv3dChannelsLastParams::y_channels_first) for this shape: where it
// takes the shape, Do * Ho * Wo is a multiple of 4 and the driver encodes tiled tensor maps
// (the output 16-byte aligned, which the launch checks).
bool wgmma_conv_channels_first_supported(const conv::Conv3dShape& s);
// Whether it runs the shape with plain TF32 products (Conv3dChannelsLastParams::tf32_products),
// the ReLU -> GroupNorm statistics included: on the im2col-copy tiles (make_x_im2col_map's
// limits), where a sample has at least 128 rows.
bool wgmma_conv_tf32_supported(const conv::Conv3dShape& s);
// The split weights' B tiles (room for either tile width), and the row tiles' moments where
// asked for, in bytes.
size_t wgmma_conv_workspace_bytes(const conv::Conv3dChannelsLastParams& p);
// The kernel's parameters for `p` (the split weights in `workspace`, as B tiles for the tile
// the library runs on the shape: WgmmaConvParams::b_bn, b_parts), and the weights' split into
// it (by p's b_bn and b_parts), enqueued on `stream`.
WgmmaConvParams wgmma_conv_params(const conv::Conv3dChannelsLastParams& p, void* workspace);
cudaError_t split_tf32_weights(const conv::Conv3dChannelsLastParams& p, const WgmmaConvParams& wp,
                               cudaStream_t stream);
// Splits the weights into `workspace`, then runs the convolution on `stream` (and, with
// p.relu_channel_moments, relu_moments_of_tiles_kernel after it).
cudaError_t wgmma_conv_launch(const conv::Conv3dChannelsLastParams& p, void* workspace,
                              cudaStream_t stream);
// Whether the pipelined forward below is expected to be faster than cuDNN's convolution with a
// statistics pass (the default where FUSED_OPS_TF32_WGMMA is neither "0" nor "1"): C_out a
// multiple of the wide tile's 128 channels, and enough tiles (kPreferredPipelineRounds).
bool wgmma_tf32_relu_group_norm_preferred(const conv::Conv3dShape& s);
// The pipelined ConvTranspose3d -> ReLU -> GroupNorm inference forward with TF32 products
// (conv::Tf32ConvReluGroupNormParams), where wgmma_conv_tf32_supported: its workspace, and its
// launches: the weights' split; x's transpose for the first launch's samples; the convolution
// in up to kMaxPipelineLaunches launches over consecutive rows (one where the side work does not
// take the tensors: conv_side_work_supported), each followed by the moments, statistics and
// affine of the samples it completed, and doing as side work the transpose of the next launch's
// samples and the output of the samples completed before it; the output of the samples left.
size_t wgmma_tf32_relu_group_norm_workspace_bytes(const conv::Tf32ConvReluGroupNormParams& p);
cudaError_t wgmma_tf32_relu_group_norm_launch(const conv::Tf32ConvReluGroupNormParams& p,
                                              void* workspace, cudaStream_t stream);

}  // namespace gpu
}  // namespace fused_ops
