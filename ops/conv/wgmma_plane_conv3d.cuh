// A stride-1 float32 3-d convolution on Hopper's wgmma (sm_90a) that reads its activations one
// plane box at a time, for the input gradient of ConvTranspose3d -> ReLU -> GroupNorm:
//
//   y[n, k, z, p, q] = bias[k] + sum over (t, r, s, c) of
//       x[n, z - pd + t*dd, p - ph + r*dh, q - pw + s*dw, c] * w[k, t, r, s, c]
//
// x NDHWC (zero outside it: the padding), y NCDHW, one conv group, stride 1: the same products
// as split_tf32_wgmma_conv3d.cuh's kernel (split TF32, or plain TF32 on TF32-rounded x), with
// the activations brought into shared memory differently.
//
// Why: that kernel copies each K block's activation tile (kBM output positions by 32 channels
// of one tap), so every activation value is read from L2 once per tap, 27 times at k = 3. The
// plain-TF32 input gradient at the headline was L2-bound that way (H100, 2026-11-28, Nsight
// Compute: L2 throughput 82% of its peak, 7.25 GB of activation reads for 1.13 ms;
// benchmarks/h100-2026-11-28-conv-bias-grad/notes.txt). Here a tile's activations of one D tap
// and 32 channels are copied once, as a box of the x plane the tile's taps reach, and the kH x kW
// taps of that plane read their rows out of it: about 6x fewer activation bytes from L2 at the
// headline (the weights' B tiles are the same).
// The box is also where an operand transform applied as it is loaded goes, once per value
// instead of once per tap ("The GroupNorm backward's operand" below).
//
// Tiling: a tile is kRowsH output rows (along H) of 32 positions (along W) of one (n, z): kBM =
// 32 kRowsH rows of the GEMM (positions past Ho or Wo are computed and not stored) by 64 output
// channels. K runs over 32-channel chunks (outer), then the D taps, then the kH x kW taps.
// Per (chunk, D tap) the producer thread copies the plane box: (kRowsH + (kH - 1) dh) rows of
// (32 + (kW - 1) dw) positions by 32 channels, one tensor-map tiled copy (zeros outside x),
// 128-byte swizzled (a position's 32 channels are one 128-byte line, its 16-byte chunks
// permuted by the line's index % 8); per K block (tap, chunk) the weights' B tile (one bulk
// copy of split_tf32_wgmma_conv3d.cuh's tiles, in the K order wgmma_conv_channel_of_k for both
// kinds of product). Two rings: plane boxes (kPlaneStages) and B tiles (kBStages).
//
// Products: A from registers. A consumer thread's fragment rows, g and g + 8 of its warp's 16,
// are positions 8 apart of one output row: at tap (r, s) they are box lines b and b + 8 with b
// = (row + r dh) * box_w + column + s dw, the same swizzle phase, read as two 16-byte loads each
// (channels 8t .. 8t + 7: wgmma_conv_channel_of_k). The tap only moves b, so no descriptor ever
// starts inside a swizzle atom (which reads the tile wrongly: the slab experiment of
// 2026-11-28). Split TF32: the values split in registers, three products per k8 step, each K
// block's sum from zero added in float32 (split_tf32_wgmma_conv3d.cuh, "Accumulation"); one m64
// block per consumer warpgroup (kBM 128). Plain TF32: x already holds TF32 values (the caller
// rounds it), one product per k8 step into the accumulators; two m64 blocks per consumer
// warpgroup (kBM 256: half the weight copies per product).
//
// Epilogue: y = acc + bias staged per m64 block (64 rows: two output rows of 32) transposed, as
// boxes of [64 channels][32 positions] (the layout of split_tf32_wgmma_conv3d.cuh's NCDHW
// epilogue), which an epilogue warpgroup's thread stores by tensor-map copies into y's
// (W, H, D, C, N) map: a box per output row, clipped by the copy engine at Wo, Ho and C_out.
//
// The GroupNorm backward's operand (Tile::kRowStages > 0; norm_grad_operand.cuh): x is not in
// memory but the ReLU -> GroupNorm backward's input gradient, computed from g and the saved
// conv output (both NCDHW) as the box is built. Per box row, the producer's warps 1-3 turn the
// row's runs of g and of the conv output (kNormGradRunPositions positions x 32 channels each,
// a ring of kRowStages runs that warp 1's first thread keeps filling, by tensor-map copies,
// kRowStages rows ahead) into the box's swizzled lines (zeros outside x: the padding), rounded
// to TF32 for plain TF32 products, and publish the box with one arrival each. Thread 0 issues
// the B tiles as before. Each value is computed once per box (box rows / tile rows, 1.25x at the
// headline's 8-row tiles, times the kD boxes that reach its plane) where the elementwise pass
// computed it once and wrote it. (Each run is copied from its first position aligned down to a
// multiple of 4: norm_grad_run_start.)
#pragma once

#include "conv/norm_grad_operand.cuh"
#include "conv/split_tf32_wgmma_conv3d.cuh"

namespace fused_ops {
namespace gpu {

struct WgmmaPlaneConvParams {
  // The convolution (stride 1; x NDHWC, y NCDHW, w_tiles with b_bn 64 and the permuted K
  // order: WgmmaConvParams::b_k_permuted; x null where conv.x_from_norm is defined).
  WgmmaConvParams conv;
  int box_w, box_h;      // the plane box's positions along W and its rows along H
  int h_tiles, w_tiles;  // tiles along Ho (kRowsH rows each) and along Wo (32 positions each)
  int64_t row_tiles;     // N * Do * h_tiles * w_tiles
};

template <bool Split, int MBlocks, int PlaneStages, int BStages, int RowStages = 0>
struct WgmmaPlaneTile {
  static constexpr int kBN = 64;  // output channels
  static constexpr bool kSplit = Split;
  static constexpr int kMBlocks = MBlocks;  // m64 blocks per consumer warpgroup
  static_assert(MBlocks == 1 || (MBlocks == 2 && !Split), "the split's registers hold one");
  static constexpr int kBM = 128 * MBlocks;
  static constexpr int kRowsH = kBM / 32;
  static constexpr int kPlaneStages = PlaneStages, kBStages = BStages;
  // The GroupNorm backward's operand: staged runs of g and the conv output per box row (0: x
  // in memory, copied as boxes).
  static constexpr int kRowStages = RowStages;
  static constexpr int kRunBytes = kWgmmaConvBK * kNormGradRunPositions * 4;  // one tensor's
  static constexpr int kRowStageBytes = 2 * kRunBytes;
  // The largest box: k = 3 at dilation 1 (kRowsH + 2 rows of 34), in lines of 128 bytes,
  // rounded up to the 1024-byte swizzle atom (8 lines).
  static constexpr int kMaxBoxLines = ((kRowsH + 2) * 34 + 7) / 8 * 8;
  static constexpr int kPlaneBytes = kMaxBoxLines * 128;
  static constexpr int kBParts = Split ? 2 : 1;
  static constexpr int kBBytes = kBParts * kBN * 128;
  static constexpr int kOutBytes = 2 * kBN * 128;  // an m64 block, as two [64][32] boxes
  static constexpr int kParts = kBM / 64;          // staged parts (m64 blocks) per tile
  static constexpr int kSmemBytes = kPlaneStages * kPlaneBytes + kBStages * kBBytes + kOutBytes +
                                    kRowStages * kRowStageBytes + 1024;
  // (The barriers, and the operand's coefficients: two boxes' of 32 channels.)
  static constexpr int kStaticSmemBytes =
      2 * (kPlaneStages + kBStages + (kRowStages > 0 ? kRowStages : 1)) * 8 + 3 * 8 +
      2 * (kRowStages > 0 ? 3 * kWgmmaConvBK : 4) * 4;
  // (The operand's producer warps compute: they take registers from the epilogue's thread.)
  static constexpr int kProducerRegisters = RowStages > 0 ? 56 : 40;
  static constexpr int kEpilogueRegisters = RowStages > 0 ? 40 : 56;
  static constexpr int kConsumerRegisters = 208;
  static_assert(kSmemBytes + kStaticSmemBytes <= 227 * 1024, "an sm_90 block's shared memory");
  static_assert(kProducerRegisters + 2 * kConsumerRegisters + kEpilogueRegisters <= 512,
                "64 K registers a block of 512 threads");
};

// The library's tiles (wgmma_plane_conv3d_cuda.cu): split TF32 128 x 64 with 4 plane boxes of
// 26 KB and 4 B tiles of 16 KB; plain TF32 256 x 64 with 3 plane boxes of 43 KB and 6 B tiles of
// 8 KB. With the GroupNorm backward's operand: 2 plane boxes and 6 staged runs of 10 KB.
using PlaneSplitTile = WgmmaPlaneTile<true, 1, 4, 4>;
using PlaneTf32Tile = WgmmaPlaneTile<false, 2, 3, 6>;
using PlaneSplitNormTile = WgmmaPlaneTile<true, 1, 2, 4, 6>;
using PlaneTf32NormTile = WgmmaPlaneTile<false, 2, 2, 6, 6>;

namespace wgmma_conv_detail {
#ifdef FUSED_OPS_WGMMA_ENABLED
// The tiled store of the tensor memory accelerator into a 5-d map (tiled_store_from_shared_3d's
// companion): shared memory at src to the box whose corner is at (c0 .. c4), innermost first.
__device__ __forceinline__ void tiled_store_from_shared_5d(const CUtensorMap* map, uint32_t src,
                                                           int32_t c0, int32_t c1, int32_t c2,
                                                           int32_t c3, int32_t c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::
          "l"(reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
#endif
}  // namespace wgmma_conv_detail

// A tile's place: sample n, output plane z, first output row h0 and column w0, first channel n0.
struct PlaneTileOrigin {
  int n, z, h0, w0, n0;
  __device__ PlaneTileOrigin(const WgmmaPlaneConvParams& pp, int64_t group, int n_tiles,
                             int rows_h) {
    n0 = static_cast<int>(group % n_tiles) * 64;
    int64_t rest = group / n_tiles;
    w0 = static_cast<int>(rest % pp.w_tiles) * 32;
    rest /= pp.w_tiles;
    h0 = static_cast<int>(rest % pp.h_tiles) * rows_h;
    rest /= pp.h_tiles;
    z = static_cast<int>(rest % pp.conv.Do);
    n = static_cast<int>(rest / pp.conv.Do);
  }
};

// x_map: x's (C_in, W, H, D, N) tiled map, boxes of (32, box_w, box_h, 1, 1), 128-byte swizzled;
// y_map: y's (Wo, Ho, Do, C_out, N) tiled map, boxes of (32, 1, 1, 64, 1), 128-byte swizzled
// (wgmma_plane_conv3d_cuda.cu). With Tile::kRowStages x_map is not used, and g_map and conv_map
// are the (D * H * W, C_in, N) maps of the operand's g and conv output (make_norm_grad_run_map,
// boxes of kNormGradRunPositions x 32 channels); without, those two are not used.
template <typename Tile>
__global__ void __launch_bounds__(kWgmmaConvBlockThreads, 1)
    wgmma_plane_conv3d_kernel(const WgmmaPlaneConvParams pp,
                              const __grid_constant__ CUtensorMap x_map,
                              const __grid_constant__ CUtensorMap y_map,
                              const __grid_constant__ CUtensorMap g_map,
                              const __grid_constant__ CUtensorMap conv_map) {
#ifdef FUSED_OPS_WGMMA_ENABLED
  using namespace wgmma_conv_detail;
  constexpr int kBN = Tile::kBN, kAcc = kBN / 2, kMBlocks = Tile::kMBlocks;
  constexpr int kPS = Tile::kPlaneStages, kBS = Tile::kBStages;
  constexpr int kRS = Tile::kRowStages > 0 ? Tile::kRowStages : 1;
  constexpr bool kNormOperand = Tile::kRowStages > 0;
  constexpr int kTransformThreads = 96;  // the producer's warps 1-3
  constexpr int kBuilderBarrier = 3;     // their named barrier (2: the epilogue warpgroup's)
  const WgmmaConvParams& p = pp.conv;

  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t plane_full[kPS], plane_empty[kPS], b_full[kBS], b_empty[kBS], out_bar[3];
  __shared__ uint64_t run_full[kRS], run_empty[kRS];
  // The operand's coefficients of a box's 32 channels, by box parity (the builders').
  __shared__ alignas(16) float norm_coefficients[2][kNormOperand ? 3 * kWgmmaConvBK : 4];
  const StageRing<kPS, false> planes{plane_full, plane_empty};
  const StageRing<kBS, false> b_ring{b_full, b_empty};
  const StageRing<kRS, false> runs{run_full, run_empty};
  const OutTileHandoff<Tile::kParts, 1> out_handoff{&out_bar[0], &out_bar[1]};
  const uint32_t smem_base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_base - smem_u32(smem_raw));
  // Plane boxes, then B tiles, then the staged output, then the operand's staged runs.
  const uint32_t b_base = smem_base + kPS * Tile::kPlaneBytes;
  uint8_t* const out_boxes = smem + kPS * Tile::kPlaneBytes + kBS * Tile::kBBytes;
  const uint32_t run_base =
      smem_base + kPS * Tile::kPlaneBytes + kBS * Tile::kBBytes + Tile::kOutBytes;

  const int tid = threadIdx.x;
  const int n_tiles = static_cast<int>((p.C_out + kBN - 1) / kBN);
  const int64_t groups = pp.row_tiles * n_tiles;
  const int c_chunks = static_cast<int>(p.c_chunks);
  const int kD = static_cast<int>(p.kD), kH = static_cast<int>(p.kH), kW = static_cast<int>(p.kW);

  if (tid == 0) {
    // Thread 0 issues every copy (its arrival expecting their bytes is the "full" barriers'
    // only one); the 256 consumer threads free the slots. The operand's boxes are published by
    // the 96 threads that build them, its runs freed by them.
    if constexpr (kNormOperand) {
      planes.init(/*extra_full_arrivals=*/0, /*producer_threads=*/kTransformThreads);
      runs.init(/*extra_full_arrivals=*/1, /*producer_threads=*/0,
                /*consumer_arrivals=*/kTransformThreads);
    } else {
      planes.init(/*extra_full_arrivals=*/1, /*producer_threads=*/0);
    }
    b_ring.init(/*extra_full_arrivals=*/1, /*producer_threads=*/0);
    out_handoff.init();
  }
  __syncthreads();

  if (tid < 128) {
    // ---- Producer: thread 0 copies, per tile, each (chunk, D tap)'s plane box (or its rows'
    // runs of the operand's tensors) and each K block's B tile; warps 1-3 build the operand's
    // boxes, or only give their registers back.
    cutlass::arch::warpgroup_reg_dealloc<Tile::kProducerRegisters>();
    const int32_t pad_d = static_cast<int32_t>(p.padding[0]);
    const int32_t pad_h = static_cast<int32_t>(p.padding[1]);
    const int32_t pad_w = static_cast<int32_t>(p.padding[2]);
    const int32_t dil_d = static_cast<int32_t>(p.dilation[0]);
    const int32_t D = static_cast<int32_t>(p.D), H = static_cast<int32_t>(p.H);
    const int32_t W = static_cast<int32_t>(p.W);
    if constexpr (kNormOperand) {
      if (tid >= 32) {
        // Box builders: item i of a row (i < box_w * 8) is channels 4q .. 4q + 3 (q = i /
        // box_w) at the run's position w = i % box_w; thread k takes items k, k + 96, k + 192
        // (box_w <= 36: 288 items at most), the same for every row.
        const int k = tid - 32;
        const int items = pp.box_w * 8;
        int item_q[3], item_w[3];
#pragma unroll
        for (int j = 0; j < 3; ++j) {
          const int i = k + j * kTransformThreads;
          item_q[j] = i < items ? i / pp.box_w : -1;
          item_w[j] = i < items ? i % pp.box_w : 0;
        }
        const int C = static_cast<int>(p.C_in);
        // Builder 0 (thread 32) copies the runs, kRS rows ahead of the rows built: the rows of
        // (tile, chunk, D tap, box row) in the builders' order, along a cursor of its own; a
        // run's slot is refilled once every builder has released it. (Thread 0 issuing them
        // between its B tiles held them back behind the consumers' progress.)
        struct RunCursor {
          int64_t group;
          int c, t, row;
          int32_t n, z0, y0, x0;  // the tile's sample, first D, H and W positions it reads
        };
        RunCursor next{blockIdx.x, 0, 0, 0, 0, 0, 0, 0};
        const auto locate = [&](RunCursor& r) {
          const PlaneTileOrigin o(pp, r.group, n_tiles, Tile::kRowsH);
          r.n = o.n, r.z0 = o.z - pad_d, r.y0 = o.h0 - pad_h, r.x0 = o.w0 - pad_w;
        };
        if (k == 0 && next.group < groups) {
          locate(next);
        }
        int issued = 0;
        const auto issue_run = [&]() {
          if (next.group >= groups) {
            return;
          }
          runs.producer_acquire(issued);
          const uint32_t full = smem_u32(&run_full[issued % kRS]);
          mbarrier_arrive_expect_bytes(full, Tile::kRowStageBytes);
          const int32_t z = next.z0 + next.t * dil_d;
          const int32_t start =
              norm_grad_run_start((z * H + next.y0 + next.row) * W + next.x0).aligned;
          const uint32_t dst = run_base + (issued % kRS) * Tile::kRowStageBytes;
          tiled_copy_to_shared_3d(dst, &g_map, start, next.c * kWgmmaConvBK, next.n, full);
          tiled_copy_to_shared_3d(dst + Tile::kRunBytes, &conv_map, start, next.c * kWgmmaConvBK,
                                  next.n, full);
          ++issued;
          if (++next.row == pp.box_h) {
            next.row = 0;
            if (++next.t == kD) {
              next.t = 0;
              if (++next.c == c_chunks) {
                next.c = 0;
                next.group += gridDim.x;
                if (next.group < groups) {
                  locate(next);
                }
              }
            }
          }
        };
        if (k == 0) {
          asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&g_map))
                       : "memory");
          asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&conv_map))
                       : "memory");
          for (int i = 0; i < kRS; ++i) {
            issue_run();
          }
        }
        int pb = 0, rb = 0;
        for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
          const PlaneTileOrigin at(pp, group, n_tiles, Tile::kRowsH);
          for (int c = 0; c < c_chunks; ++c) {
            for (int t = 0; t < kD; ++t, ++pb) {
              // The box's coefficients into buffer pb % 2 (last read in box pb - 2, which every
              // builder finished before box pb - 1's barrier), then the builders' barrier.
              float* const coefficients = norm_coefficients[pb % 2];
              coefficients[k] =
                  c * kWgmmaConvBK + k / 3 < C
                      ? p.x_from_norm
                            .coefficients[3 * (static_cast<int64_t>(at.n) * C + c * kWgmmaConvBK) +
                                          k]
                      : 0.f;
              named_barrier_sync(kBuilderBarrier, kTransformThreads);
              planes.producer_acquire(pb);
              uint8_t* const plane = smem + (pb % kPS) * Tile::kPlaneBytes;
              const int32_t z = at.z - pad_d + t * dil_d;
              for (int row = 0; row < pp.box_h; ++row, ++rb) {
                runs.consumer_wait(rb);
                const float* const g_run = reinterpret_cast<const float*>(
                    smem + (run_base - smem_base) + (rb % kRS) * Tile::kRowStageBytes);
                const float* const x_run = g_run + kWgmmaConvBK * kNormGradRunPositions;
                const int32_t y = at.h0 - pad_h + row;
                const bool row_inside = z >= 0 && z < D && y >= 0 && y < H;
                // (the copy thread's start: norm_grad_run_start)
                const int shift = norm_grad_run_start((z * H + y) * W + at.w0 - pad_w).shift;
#pragma unroll
                for (int j = 0; j < 3; ++j) {
                  const int q = item_q[j], w = item_w[j];
                  if (q >= 0) {
                    const int32_t x = at.w0 - pad_w + w;
                    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
                    if (row_inside && x >= 0 && x < W && c * kWgmmaConvBK + 4 * q < C) {
                      v = norm_grad_quad(g_run, x_run, 4 * q, w + shift, coefficients + 12 * q,
                                         /*round=*/!Tile::kSplit);
                    }
                    const int line = row * pp.box_w + w;
                    *reinterpret_cast<float4*>(plane + line * 128 + ((q ^ (line & 7)) << 4)) = v;
                  }
                }
                runs.consumer_release(rb);
                if (k == 0) {
                  issue_run();  // (row rb + kRS, into row rb's slot once all have released it)
                }
              }
              mbarrier_arrive(smem_u32(&plane_full[pb % kPS]));  // (release: the lines above)
            }
          }
        }
        return;
      }
    }
    if (tid != 0) {
      return;
    }
    if constexpr (!kNormOperand) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&x_map))
                   : "memory");
    }
    constexpr int kBTileFloats = Tile::kBParts * kBN * kWgmmaConvBK;
    const uint32_t box_bytes = static_cast<uint32_t>(pp.box_w * pp.box_h * 128);
    const int64_t w_tile_step = static_cast<int64_t>(n_tiles) * kBTileFloats;  // per K block
    int kb = 0, pb = 0;
    for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
      const PlaneTileOrigin at(pp, group, n_tiles, Tile::kRowsH);
      const float* const w_tiles = p.w_tiles + static_cast<int64_t>(at.n0 / kBN) * kBTileFloats;
      for (int c = 0; c < c_chunks; ++c) {
        for (int t = 0; t < kD; ++t, ++pb) {
          if constexpr (!kNormOperand) {
            const int32_t z = at.z - pad_d + t * dil_d;
            planes.producer_acquire(pb);
            const uint32_t full = smem_u32(&plane_full[pb % kPS]);
            mbarrier_arrive_expect_bytes(full, box_bytes);
            tiled_copy_to_shared_5d(smem_base + (pb % kPS) * Tile::kPlaneBytes, &x_map,
                                    c * kWgmmaConvBK, at.w0 - pad_w, at.h0 - pad_h, z, at.n, full);
          }
          for (int rs = 0; rs < kH * kW; ++rs, ++kb) {
            // The K block's B tile (split_tf32_weights_kernel: tap-major, then the chunk).
            const int64_t block = static_cast<int64_t>(t * kH * kW + rs) * c_chunks + c;
            b_ring.producer_acquire(kb);
            const uint32_t b_full_bar = smem_u32(&b_full[kb % kBS]);
            mbarrier_arrive_expect_bytes(b_full_bar, kBTileFloats * 4);
            bulk_copy_to_shared(b_base + (kb % kBS) * Tile::kBBytes, w_tiles + block * w_tile_step,
                                kBTileFloats * 4, b_full_bar);
          }
        }
      }
    }
    return;
  }

  if (tid >= kWgmmaConvThreads) {
    // ---- Epilogue warpgroup: per staged m64 block (two output rows), thread 0 stores its two
    // boxes by the tensor map (rows past Ho skipped; columns past Wo and channels past C_out
    // clipped by the copy engine), waits for the copies to have read them, and the warpgroup
    // frees the buffer.
    cutlass::arch::warpgroup_reg_dealloc<Tile::kEpilogueRegisters>();
    const int etid = tid - kWgmmaConvThreads;
    int u = 0;
    for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
      const PlaneTileOrigin at(pp, group, n_tiles, Tile::kRowsH);
      for (int part = 0; part < Tile::kParts; ++part, ++u) {
        out_handoff.epilogue_wait_full(u);
        if (etid == 0) {
          fence_proxy_async_shared();  // the consumers' stores (generic proxy) first
          for (int b = 0; b < 2; ++b) {
            const int h = at.h0 + 2 * part + b;
            if (h < p.Ho) {
              tiled_store_from_shared_5d(&y_map, smem_u32(out_boxes + b * kBN * 128), at.w0, h,
                                         at.z, at.n0, at.n);
            }
          }
          bulk_stores_commit_and_wait_read();
        }
        named_barrier_sync(2, 128);
        out_handoff.epilogue_arrive_free(u);
      }
    }
    return;
  }

  // ---- Consumers.
  cutlass::arch::warpgroup_reg_alloc<Tile::kConsumerRegisters>();
  const int warp = (tid >> 5) - 4, lane = tid & 31;
  const int wg = warp >> 2;  // consumer warpgroup: 0 or 1
  const int g = lane >> 2, t = lane & 3;
  // Block i of this warpgroup is tile rows (2 i + wg) * 64 ..; this thread's fragment row g of
  // it is output row `row / 32` of the tile, column `row % 32`: box line row/32 * box_w + row%32
  // at tap (0, 0) of the plane.
  int line0[kMBlocks];
#pragma unroll
  for (int i = 0; i < kMBlocks; ++i) {
    const int row = (2 * i + wg) * 64 + (warp & 3) * 16 + g;
    line0[i] = (row >> 5) * pp.box_w + (row & 31);
  }
  const int tap_h_lines = static_cast<int>(p.dilation[1]) * pp.box_w;
  const int tap_w_lines = static_cast<int>(p.dilation[2]);

  int kb = 0, pb = 0, u = 0, free_waits = 0;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x, ++u) {
    const int n0 = static_cast<int>(group % n_tiles) * kBN;
    float acc[kMBlocks * kAcc];
#pragma unroll
    for (int i = 0; i < kMBlocks * kAcc; ++i) {
      acc[i] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < kMBlocks * kAcc; ++i) {
      cute::warpgroup_fence_operand(acc[i]);
    }
    // K blocks: per (chunk, D tap) plane box, its kH x kW taps in order. (Variants measured at
    // the headline's input gradient on an H200, 2026-11-28, plain TF32 / split: these nested
    // loops 0.924 / 2.040 ms; one flat loop with divisions by the sizes per block 1.205 /
    // 2.766; a block's products kept in flight while the next block's fragments load (two
    // fragment sets; the im2col kernel's plain TF32 consumers do that) 1.054 with the divisions,
    // 0.953 without them.)
    for (int c = 0; c < c_chunks; ++c) {
      for (int tt = 0; tt < kD; ++tt, ++pb) {
        planes.consumer_wait(pb);
        const uint8_t* const plane = smem + (pb % kPS) * Tile::kPlaneBytes;
        for (int r = 0; r < kH; ++r) {
          for (int s = 0; s < kW; ++s, ++kb) {
            b_ring.consumer_wait(kb);
            const uint32_t b_tile = b_base + (kb % kBS) * Tile::kBBytes;
            const uint64_t desc_hi = k_major_sw128_desc(b_tile);
            const int tap_lines = r * tap_h_lines + s * tap_w_lines;
            // Rows g and g + 8 (8 lines further, the same swizzle phase) of each m64 block,
            // channels 8t .. 8t + 3 and 8t + 4 .. 8t + 7 (16-byte chunks 2t and 2t + 1).
            float4 q[kMBlocks][2][2];
#pragma unroll
            for (int i = 0; i < kMBlocks; ++i) {
              const int line = line0[i] + tap_lines;
              const uint8_t* const base = plane + line * 128;
#pragma unroll
              for (int half = 0; half < 2; ++half) {
#pragma unroll
                for (int ch = 0; ch < 2; ++ch) {
                  q[i][half][ch] = *reinterpret_cast<const float4*>(
                      base + half * 8 * 128 + (((2 * t + ch) ^ (line & 7)) << 4));
                }
              }
            }
            if constexpr (Tile::kSplit) {
              float partial[kAcc];
              split_block_products<kBN>(partial, q[0], desc_hi,
                                        k_major_sw128_desc(b_tile + kBN * 128));  // low parts
              cute::warpgroup_commit_batch();
              cute::warpgroup_wait<0>();
              add_block_sum(acc, partial);
            } else {
              // Plain TF32: into the accumulators; the two consumer warpgroups keep the tensor
              // cores busy while one loads its next fragments.
              cute::warpgroup_arrive();
#pragma unroll
              for (int i = 0; i < kMBlocks; ++i) {
#pragma unroll
                for (int kk = 0; kk < kWgmmaConvBK / 8; ++kk) {
                  float v[4];
                  fragment_of_step(q[i], kk, v);
                  const uint32_t a[4] = {__float_as_uint(v[0]), __float_as_uint(v[1]),
                                         __float_as_uint(v[2]), __float_as_uint(v[3])};
                  wgmma_rs<kBN>(acc + i * kAcc, a, desc_hi + static_cast<uint64_t>(kk * 2),
                                cute::SM90::GMMA::ScaleOut::One, std::make_index_sequence<kAcc>{});
                }
              }
              cute::warpgroup_commit_batch();
              cute::warpgroup_wait<0>();
            }
            b_ring.consumer_release(kb);
          }
        }
        planes.consumer_release(pb);  // (its lines were loaded into registers above)
      }
    }
#pragma unroll
    for (int i = 0; i < kMBlocks * kAcc; ++i) {
      cute::warpgroup_fence_operand(acc[i]);
    }

    // Epilogue: y = acc + bias, staged transposed per m64 block for the epilogue warpgroup,
    // once it is done with the block before.
    add_bias<kBN, kMBlocks>(acc, p.bias, n0, p.C_out, t);
#pragma unroll
    for (int i = 0; i < kMBlocks; ++i) {
      out_handoff.consumer_wait_free(u * Tile::kParts + 2 * i + wg, wg, free_waits);
      stage_block_transposed<kBN>(out_boxes, acc + i * kAcc, (warp & 3) * 16 + g, t);
      out_handoff.consumer_arrive_full(wg);
    }
  }
#else
  __trap();  // built without sm_90a code: the host never launches it (wgmma_conv_available)
#endif
}

// Host side (wgmma_plane_conv3d_cuda.cu). Whether the plane kernel takes the convolution `p`
// (wgmma_conv_params' for it) with split (tf32_products false) or plain TF32 products: stride 1,
// y NCDHW without moments over all rows, the plane box within the tile's room (k <= 3 at
// dilation 1, or an equivalent reach), C_in and Wo multiples of 4 and x, y 16-byte aligned (the
// tensor maps), the shared memory and the driver's tiled maps on the current device (the caller
// runs it only where the wgmma kernels run: wgmma_conv_available). With p.x_from_norm: its
// tensors 16-byte aligned, D * H * W a multiple of 4 and at most 2^30, runs of 32 + (kW - 1) *
// dilation_w <= 36 positions.
bool wgmma_plane_conv3d_supported(const WgmmaConvParams& p, bool tf32_products);
// Runs it on weights already split as 64-channel B tiles in the permuted K order (p.b_bn 64,
// p.b_k_permuted; b_parts 2 for split, 1 for plain TF32 products).
cudaError_t wgmma_plane_conv3d_launch(const WgmmaConvParams& p, bool tf32_products,
                                      cudaStream_t stream);

}  // namespace gpu
}  // namespace fused_ops
