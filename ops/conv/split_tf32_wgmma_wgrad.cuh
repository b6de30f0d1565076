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
// block (a wait and a block sum per tap before: 1.174 -> 1.079 ms at the headline in the training
// step's profile, H100, 2026-11-27, benchmarks/h100-2026-11-27-saved-copy).
//
// Tiling: a block owns one (t, r) pair of taps and all kW <= 3 taps along W (they read the
// same dy rows, shifted), 128 output channels (two consumer warpgroups of m64) by 64 input
// channels, and a slice of the K blocks (split-K: the grid is about one wave). Each writes
// its partial sums; wgmma_wgrad_reduce_kernel adds the slices in slice order (deterministic).
// Per K block a producer warpgroup copies the dy rows the taps reach (32 + (kW - 1) * dw rows
// of 128 channels, cp.async, zero-filled outside dy; rows padded to 136 floats, so a warp's
// fragment loads hit 32 banks) and loads the x tile (64 channels x 32 positions) into
// registers a block ahead, splits it and stores the two tiles 128-byte swizzled (wgmma's B,
// through descriptors); it publishes each stage through the forward's StageRing.
#pragma once

#include "conv/split_tf32_wgmma_conv3d.cuh"

namespace fused_ops {
namespace gpu {

struct WgmmaWgradParams {
  int N, D, H, W, C_in, C_out, kD, kH, kW, Do, Ho, Wo;
  int padding[3], dilation[3];
  int w_chunks;          // ceil(W / 32): K blocks per row of x
  int blocks;            // N * D * H * w_chunks
  int blocks_per_split;  // K blocks per block of the grid
  int splits;
  const float* x;   // (N, C_in, D, H, W)
  const float* dy;  // (N, Do, Ho, Wo, C_out)
  float* partial;   // [splits][kD * kH * kW][C_out][C_in]
  float* dw;        // (C_out, kD, kH, kW, C_in)
};

constexpr int kWgradBM = 128;         // output channels per block (two m64 warpgroups)
constexpr int kWgradBN = 64;          // input channels per block
constexpr int kWgradBK = 32;          // positions per K block
constexpr int kWgradMaxKW = 3;        // taps along W per block
constexpr int kWgradMaxRows = 36;     // dy rows per K block: 32 + (kW - 1) * dilation_w at most
constexpr int kWgradRowFloats = 136;  // a dy row in shared memory: 128 channels + 8

template <int Stages, bool Split>
struct WgmmaWgradTile {
  static constexpr int kStages = Stages;
  static constexpr bool kSplit = Split;
  // The dy rows, rounded up to the 1024-byte swizzle atom the x tiles after them need.
  static constexpr int kABytes = (kWgradMaxRows * kWgradRowFloats * 4 + 1023) / 1024 * 1024;
  static constexpr int kBBytes = kWgradBN * 128;
  static constexpr int kStageBytes = kABytes + 2 * kBBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;
  // Split: a consumer loads and splits the next tap's fragments while the tap's products run
  // (H200, headline: 2.00 -> 1.87-1.88 ms; 2026-11-26, check.txt). (Plain TF32 loads every
  // tap's fragments before the block's products.)
  static constexpr bool kPrefetchTap = Split;
  // The producer holds a K block's x values (16) ahead; the consumers kW x 32 sums, and split, a
  // tap's block sums (32) and one or two taps' fragments (32 each); plain, the kW taps'
  // fragments (16 each).
  static constexpr int kProducerRegisters = Split ? 72 : 88;
  static constexpr int kConsumerRegisters = Split ? 216 : 200;
};

// kSplit: split TF32 (three products, float32-grade); else plain TF32 (one product of the
// operands rounded to TF32, for PyTorch's allow_tf32 mode: as accurate as cuDNN's TF32 kernels).
template <int kStages, bool kSplit>
__global__ void __launch_bounds__(kWgmmaConvThreads, 1)
    split_tf32_wgmma_wgrad_kernel(const WgmmaWgradParams p) {
#ifdef FUSED_OPS_WGMMA_ENABLED
  using namespace wgmma_conv_detail;
  using Tile = WgmmaWgradTile<kStages, kSplit>;
  constexpr int kAcc = kWgradBN / 2;  // accumulator floats per thread per m64 x n64 tile

  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full_bar[kStages], empty_bar[kStages];
  const StageRing<kStages> ring{full_bar, empty_bar};
  const uint32_t smem_base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_base - smem_u32(smem_raw));

  const int tid = threadIdx.x;
  const int split = blockIdx.x % p.splits;
  const int pair = blockIdx.x / p.splits;  // (t, r): the taps along D and H
  const int td = pair / p.kH, th = pair % p.kH;
  const int k0 = blockIdx.y * kWgradBM;
  const int c0 = blockIdx.z * kWgradBN;
  const int b_begin = split * p.blocks_per_split;
  const int k_blocks = max(0, min(p.blocks, b_begin + p.blocks_per_split) - b_begin);

  if (tid == 0) {
    ring.init();
  }
  __syncthreads();

  if (tid < 128) {
    // ---- Producer. dy: 16-byte chunk (tid % 32) of rows tid / 32 + 4 j; x: chunk (tid % 8)
    // (4 positions) of channel rows tid / 8 + 16 j.
    cutlass::arch::warpgroup_reg_dealloc<Tile::kProducerRegisters>();
    const int dy_chunk = tid & 31, dy_row0 = tid >> 5;
    const int x_chunk = tid & 7, x_row0 = tid >> 3;
    const int rows = kWgradBK + (p.kW - 1) * p.dilation[2];
    const bool dy_chunk_valid = k0 + 4 * dy_chunk < p.C_out;
    // The K block's row of x: (n, z, y) and the chunk of W, stepped along.
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
    const auto advance = [&](int& n_, int& z_, int& y_, int& wc_) {
      if (++wc_ == p.w_chunks) {
        wc_ = 0;
        if (++y_ == p.H) {
          y_ = 0;
          if (++z_ == p.D) {
            z_ = 0;
            ++n_;
          }
        }
      }
    };
    // x values of a K block: 4 chunks of 4 positions (zero outside x or past C_in).
    const auto load_x = [&](int n_, int z_, int y_, int wc_, float4(&v)[4]) {
      const int q = wc_ * kWgradBK + 4 * x_chunk;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = c0 + x_row0 + 16 * j;
        v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q < p.W && c < p.C_in) {
          v[j] = __ldg(reinterpret_cast<const float4*>(
              p.x + (((n_ * p.C_in + c) * p.D + z_) * p.H + y_) * p.W + q));
        }
      }
    };
    float4 next[4];
    if (k_blocks > 0) {
      load_x(n, z, y, wc, next);
    }
    for (int kb = 0; kb < k_blocks; ++kb) {
      const int slot = kb % kStages;
      ring.producer_acquire(kb);
      const uint32_t stage = smem_base + slot * Tile::kStageBytes;
      // dy rows: output positions (oz, oy, ox0 + row), ox0 the leftmost the taps reach.
      const int oz = z + p.padding[0] - td * p.dilation[0];
      const int oy = y + p.padding[1] - th * p.dilation[1];
      const int ox0 = wc * kWgradBK + p.padding[2] - (p.kW - 1) * p.dilation[2];
      const bool plane_valid = oz >= 0 && oz < p.Do && oy >= 0 && oy < p.Ho && dy_chunk_valid;
      const int dy_plane = ((n * p.Do + oz) * p.Ho + oy) * p.Wo;
#pragma unroll
      for (int j = 0; j < (kWgradMaxRows + 3) / 4; ++j) {
        const int row = dy_row0 + 4 * j;
        if (row < rows) {
          const int ox = ox0 + row;
          const bool valid = plane_valid && ox >= 0 && ox < p.Wo;
          const uint32_t offset =
              valid ? static_cast<uint32_t>((dy_plane + ox) * p.C_out + k0 + 4 * dy_chunk) : 0u;
          cp_async_16(stage + static_cast<uint32_t>(row * kWgradRowFloats * 4 + 16 * dy_chunk),
                      p.dy + offset, valid);
        }
      }
      cp_async_commit();
      // x: this block's values (loaded one block ahead), split, into the two swizzled tiles.
      const float4 current[4] = {next[0], next[1], next[2], next[3]};
      if (kb + 1 < k_blocks) {
        int n1 = n, z1 = z, y1 = y, wc1 = wc;
        advance(n1, z1, y1, wc1);
        load_x(n1, z1, y1, wc1, next);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int row = x_row0 + 16 * j;
        const float in[4] = {current[j].x, current[j].y, current[j].z, current[j].w};
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          split_tf32_rounded(in[e], hi[e], lo[e]);
        }
        const uint32_t at = static_cast<uint32_t>(row * 128 + ((x_chunk ^ (row & 7)) << 4));
        uint8_t* const b_tiles = smem + slot * Tile::kStageBytes + Tile::kABytes;
        *reinterpret_cast<uint4*>(b_tiles + at) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        if (kSplit) {
          *reinterpret_cast<uint4*>(b_tiles + Tile::kBBytes + at) =
              make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
      }
      // Block kb - kLag: its dy rows have landed (this thread's), its x tiles were stored
      // before (the ring's proxy fence orders them before the tensor cores' reads).
      ring.producer_publish(kb);
      advance(n, z, y, wc);
    }
    ring.producer_finish(k_blocks);
    return;
  }

  // ---- Consumers: warpgroup wg has output channels k0 + wg * 64 + [0, 64).
  cutlass::arch::warpgroup_reg_alloc<Tile::kConsumerRegisters>();
  const int warp = (tid >> 5) - 4, lane = tid & 31;
  const int wg = warp >> 2;
  const int g = lane >> 2, t = lane & 3;
  const int frag_row0 = wg * 64 + (warp & 3) * 16 + g;  // A rows: output channels
  float acc[kWgradMaxKW][kAcc], partial[kAcc];
#pragma unroll
  for (int s = 0; s < kWgradMaxKW; ++s) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      acc[s][i] = 0.f;
    }
  }
  if constexpr (!kSplit) {
    // Plain TF32 (as the forward's plain path): every tap's fragments of the K block first,
    // then all its products into acc directly (TF32's rounding of the operands, ~2^-11
    // relative, dwarfs the accumulation's bias): one wait per K block instead of one per tap,
    // and no block sums to add.
#pragma unroll
    for (int s = 0; s < kWgradMaxKW; ++s) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        cute::warpgroup_fence_operand(acc[s][i]);
      }
    }
    for (int kb = 0; kb < k_blocks; ++kb) {
      const int slot = kb % kStages;
      ring.consumer_wait(kb);
      const float* const a_tile = reinterpret_cast<const float*>(smem + slot * Tile::kStageBytes);
      const uint64_t desc =
          k_major_sw128_desc(smem_base + slot * Tile::kStageBytes + Tile::kABytes);
      uint32_t frag[kWgradMaxKW][kWgradBK / 8][4];
#pragma unroll
      for (int s = 0; s < kWgradMaxKW; ++s) {
        if (s < p.kW) {
          const float* const a = a_tile + ((p.kW - 1 - s) * p.dilation[2]) * kWgradRowFloats;
#pragma unroll
          for (int kk = 0; kk < kWgradBK / 8; ++kk) {
            const int pos = kk * 8 + t;
            const float v[4] = {a[pos * kWgradRowFloats + frag_row0],
                                a[pos * kWgradRowFloats + frag_row0 + 8],
                                a[(pos + 4) * kWgradRowFloats + frag_row0],
                                a[(pos + 4) * kWgradRowFloats + frag_row0 + 8]};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              uint32_t unused_low;  // (its instruction is dropped)
              split_tf32_rounded(v[j], frag[s][kk][j], unused_low);
            }
          }
        }
      }
      cute::warpgroup_arrive();
#pragma unroll
      for (int s = 0; s < kWgradMaxKW; ++s) {
        if (s < p.kW) {
#pragma unroll
          for (int kk = 0; kk < kWgradBK / 8; ++kk) {
            wgmma_rs<kWgradBN>(acc[s], frag[s][kk], desc + static_cast<uint64_t>(kk * 2),
                               cute::SM90::GMMA::ScaleOut::One, std::make_index_sequence<kAcc>{});
          }
        }
      }
      cute::warpgroup_commit_batch();
      cute::warpgroup_wait<0>();
      ring.consumer_release(kb);
    }
#pragma unroll
    for (int s = 0; s < kWgradMaxKW; ++s) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        cute::warpgroup_fence_operand(acc[s][i]);
      }
    }
  }
  for (int kb = 0; kSplit && kb < k_blocks; ++kb) {
    const int slot = kb % kStages;
    ring.consumer_wait(kb);
    const float* const a_tile = reinterpret_cast<const float*>(smem + slot * Tile::kStageBytes);
    const uint32_t b_hi = smem_base + slot * Tile::kStageBytes + Tile::kABytes;
    const uint64_t desc_hi = k_major_sw128_desc(b_hi);
    const uint64_t desc_lo = k_major_sw128_desc(b_hi + Tile::kBBytes);
    // The fragments of tap s (split), into buffer s % 2 (Tile::kPrefetchTap: tap s + 1's load
    // while tap s's products run).
    uint32_t frag_hi[2][kWgradBK / 8][4], frag_lo[2][kWgradBK / 8][4];
    const auto load_tap = [&](int s, int buffer) {
      // Tap s along W reads dy rows shifted by (kW - 1 - s) * dw from the leftmost.
      const float* const a = a_tile + ((p.kW - 1 - s) * p.dilation[2]) * kWgradRowFloats;
#pragma unroll
      for (int kk = 0; kk < kWgradBK / 8; ++kk) {
        // The m64 x k8 fragment: (channel g, position t), (g + 8, t), (g, t + 4), (g + 8, t + 4).
        const int pos = kk * 8 + t;
        const float v[4] = {a[pos * kWgradRowFloats + frag_row0],
                            a[pos * kWgradRowFloats + frag_row0 + 8],
                            a[(pos + 4) * kWgradRowFloats + frag_row0],
                            a[(pos + 4) * kWgradRowFloats + frag_row0 + 8]};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          split_tf32_rounded(v[j], frag_hi[buffer][kk][j], frag_lo[buffer][kk][j]);
        }
      }
    };
    load_tap(0, 0);
#pragma unroll
    for (int s = 0; s < kWgradMaxKW; ++s) {
      if (s < p.kW) {
        const int buffer = s % 2;
        cute::warpgroup_arrive();
#pragma unroll
        for (int kk = 0; kk < kWgradBK / 8; ++kk) {
          const uint64_t k_step = static_cast<uint64_t>(kk * 2);
          const auto first =
              kk == 0 ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One;
          if (kSplit) {
            wgmma_rs<kWgradBN>(partial, frag_lo[buffer][kk], desc_hi + k_step, first,
                               std::make_index_sequence<kAcc>{});
            wgmma_rs<kWgradBN>(partial, frag_hi[buffer][kk], desc_lo + k_step,
                               cute::SM90::GMMA::ScaleOut::One, std::make_index_sequence<kAcc>{});
            wgmma_rs<kWgradBN>(partial, frag_hi[buffer][kk], desc_hi + k_step,
                               cute::SM90::GMMA::ScaleOut::One, std::make_index_sequence<kAcc>{});
          } else {
            wgmma_rs<kWgradBN>(partial, frag_hi[buffer][kk], desc_hi + k_step, first,
                               std::make_index_sequence<kAcc>{});
          }
        }
        cute::warpgroup_commit_batch();
        const bool next_tap = s + 1 < kWgradMaxKW && s + 1 < p.kW;
        if (Tile::kPrefetchTap && next_tap) {
          load_tap(s + 1, (s + 1) % 2);
        }
        cute::warpgroup_wait<0>();
        add_block_sum(acc[s], partial);
        if (!Tile::kPrefetchTap && next_tap) {
          load_tap(s + 1, (s + 1) % 2);
        }
      }
    }
    ring.consumer_release(kb);
  }

  // Epilogue: this slice's sums, [tap][k][c]. Accumulator i: channel row g + 8 * ((i / 2) % 2),
  // column 8 * (i / 4) + 2 * t + i % 2.
  const int taps = p.kD * p.kH * p.kW;
#pragma unroll
  for (int s = 0; s < kWgradMaxKW; ++s) {
    if (s < p.kW) {
      const int tap = (td * p.kH + th) * p.kW + s;
      float* const out = p.partial + (static_cast<int64_t>(split) * taps + tap) * p.C_out * p.C_in;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int k = k0 + frag_row0 + 8 * half;
        if (k < p.C_out) {
#pragma unroll
          for (int j = 0; j < kWgradBN / 8; ++j) {
            const int c = c0 + 8 * j + 2 * t;
            if (c < p.C_in) {  // C_in is a multiple of 4: both columns or neither
              *reinterpret_cast<float2*>(out + static_cast<int64_t>(k) * p.C_in + c) =
                  make_float2(acc[s][4 * j + 2 * half], acc[s][4 * j + 2 * half + 1]);
            }
          }
        }
      }
    }
  }
#else
  __trap();  // built without sm_90a code: the host never launches it (wgmma_conv_available)
#endif
}

// dw[k][tap][c] = the slices' partial sums in slice order.
__global__ void wgmma_wgrad_reduce_kernel(const WgmmaWgradParams p);

// Host side (split_tf32_wgmma_conv3d_cuda.cu). Whether the kernel takes this shape on the
// current device (stride 1, kW <= 3 with 32 + (kW - 1) * dilation_w <= 36, W a multiple of 4,
// the split-TF32 family's channel and size limits, and wgmma_conv_available()); its workspace
// (the slices' partial sums); the launch (the kernel, then the reduction).
// `split`: the split-TF32 kernel, else the plain TF32 one.
bool wgmma_wgrad_supported(const conv::Conv3dShape& s);
size_t wgmma_wgrad_workspace_bytes(const conv::Conv3dShape& s);
cudaError_t wgmma_wgrad_launch(const conv::Conv3dShape& s, const float* x_ncdhw,
                               const float* dy_ndhwc, float* dw, void* workspace, bool split,
                               cudaStream_t stream);

}  // namespace gpu
}  // namespace fused_ops
