// One-pass CUDA kernels of conv3d_group_norm_mean: out[n] = mean of
// group_norm(conv3d(x) + conv_bias)[n], without ever writing the convolution's output.
//
// Everything out[n] needs from the convolution is, per (n, c), the mean of its output and,
// per (n, g), the group's second moment; both come from per-(n, c) moments (count, mean, M2)
// combined with Chan et al.'s formula (group_norm_math.h). The conv bias shifts a channel's
// mean and leaves its M2 alone, so it is folded in at the end.
//
// 1. A moments kernel: a persistent grid of 256-thread blocks walks the work items (tiles) in
//    a fixed assignment; a tile is (sample n, conv group g, chunk of `cb` output channels, box
//    of TD x TH x TW output positions) (conv_kernels.h: OnePassPlan). Per tile, the block
//      * loads the box's input footprint (C_in/groups x FD x FH x FW, zero outside the input:
//        the padding) into shared memory, rows along W so that warps read coalesced (float32:
//        by asynchronous copies, every load of a warp in flight at once; the tensor-core
//        kernel on wgmma, where x's rows and the boxes' first columns are 16-byte aligned, by
//        one tiled copy of the tensor memory accelerator per tile, issued by one thread and
//        completing on an mbarrier, with no block barrier per tile: OnePassPlan::tma_footprint);
//      * computes the convolution of the box in registers, an implicit GEMM of the box's
//        positions (M) by the chunk's channels (N) over the K = C_in/groups * kD * kH * kW
//        taps, each operand element read from the footprint at its tap's precomputed offset:
//          - float32 (tensor_cores): split TF32 ("3xTF32": each operand is a high TF32 part
//            plus a TF32 remainder, and a * b = a_hi b_hi + a_hi b_lo + a_lo b_hi, the
//            dropped a_lo b_lo being ~2^-22 of it), float32 accumulation: float32-grade
//            products at tensor-core speed. Each warp owns 3 m16 tiles (48 positions; 4 with
//            mma.sync) and all cb channels; 384 positions a tile (512 with mma.sync). The
//            products: on Hopper (the file's sm_90a image) one wgmma.m64nCBk8 per
//            warpgroup, m16 row and term, the weights in shared memory as its B tiles, the
//            next k step's values loading while a step's last two terms run (where kW = 3 along
//            a unit-stride W, in windows: a thread's 6 positions consecutive along W and its
//            taps in triples along kW, 8 values loaded per triple instead of 18); elsewhere
//            mma.sync m16n8k8 per warp, n8 tile and term, the weights already in fragment
//            order (one 16-byte load per n8 tile and k step).
//            The next tile's footprint loads into a second buffer meanwhile (whole input rows
//            through a table of the rows' offsets, set up once), laid out with padded
//            pitches against bank conflicts (conv::footprint_pitches);
//          - other dtypes (direct kernel): each thread owns 8 positions and half of the cb
//            channels, and per tap loads its 8 inputs and the channels' weights (16-byte
//            broadcasts) for an outer product of multiply-adds in the accumulation type
//            (float; double for double): 1024 positions a tile;
//      * reduces, per channel, the box's valid positions to (mean, M2 about that mean), with
//        no E[y^2] - mean^2 cancellation:
//          - direct kernel: in double, the sums first (within the thread, warp butterflies,
//            then the warps in order), then the squared deviations from the tile mean;
//          - tensor-core kernel: two passes within each warp in float (its sum, then its
//            squared deviations from a shift near its mean), then one warp of each warpgroup
//            combines its 4 warps' moments in float about one of their shifts;
//      * writes, per channel, the direct kernel's (mean, M2) pair to the tile's workspace slot,
//        the tensor-core kernel's (sum of deviations, shift, squared deviations, count) to the
//        slot of the tile's warpgroup.
//    The chunk's weights stay in shared memory from one tile to the next of the same chunk.
// 2. The training forward with the tensor-core kernel (exact_channel_means), or wherever the
//    caller keeps x's sums (input_sums, float32): x's sums per tap (exact_sums_kernel, below),
//    from which the finalize takes the channel means exactly, in double, for the backward; those
//    sums, and x's total per (sample, input channel), go to input_sums for the backward's
//    centring of x.
// 3. onepass_finalize_kernel: one block per sample combines, per channel (a warp for 4 of the
//    tensor-core kernel's channels at once, 8 lanes for one of the direct kernel's, whose tiles'
//    counts come from the box geometry), its moments in a fixed order, in double: the tensor-core
//    kernel's in one pass of sums about a reference near the data, the direct kernel's in two
//    (the mean from the count-weighted sum, then M2 about it); the mean is the exact one from x's
//    sums where there are any. It adds the conv bias to the mean, combines each GroupNorm group's
//    channels, and writes mean, rstd, the channel means and out[n].
//
// Every sum has a fixed order that depends on the shape only: results are deterministic.
#include "common/cuda/async_proxy.cuh"
#include "common/cuda/cuda_kernel.cuh"
#include "common/cuda/device_info.cuh"
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "common/cuda/tensor_map_copies.cuh"
#include "conv/conv_input_box.cuh"
#include "conv/conv_kernels.h"
#include "norm/group_norm_math.h"

#include <algorithm>
#include <cstdint>

namespace fused_ops {
namespace gpu {
namespace {

// The direct kernel's threads: 2 channel groups (warps 0-3 and 4-7) of 128 position threads;
// a thread computes 8 positions x cb / 2 channels (an outer product per tap: 8 + cb / 2
// shared loads for 4 * cb multiply-adds, which keeps the FMA units, not the loads, the bound).
constexpr int kChannelGroups = 2;
constexpr int kPositionThreads = kThreads / kChannelGroups;
constexpr int kPositionsPerThread = 8;
static_assert(kPositionThreads * kPositionsPerThread == conv::kOnePassDirectCapacity,
              "the plan's capacity is the direct kernel's position slots");
// The tensor-core kernel's warps: 4 m16 tiles each with mma.sync products, 3 with wgmma ones
// (conv3d_group_norm_mean_onepass_plan.cpp says why).
constexpr int kMmaTilesPerWarp = 4;
constexpr int kWgmmaTilesPerWarp = 3;
static_assert(kWarpsPerBlock * kMmaTilesPerWarp * 16 == conv::kOnePassTensorCoreCapacity,
              "the plan's capacity is the tensor-core kernel's position slots");
static_assert(kWarpsPerBlock * kWgmmaTilesPerWarp * 16 == conv::kOnePassWgmmaCapacity,
              "the plan's capacity is the tensor-core kernel's position slots");
// The tensor-core kernel's groups of warps that combine their moments (a warpgroup each).
constexpr int kWarpsPerGroup = 4;
static_assert(kWarpsPerBlock == kWarpsPerGroup * conv::kOnePassTensorCoreWarpGroups,
              "the plan's workspace holds each of the tensor-core kernel's groups' moments");

struct KernelArgs {
  conv::Conv3dGroupNormMeanParams p;
  conv::OnePassPlan plan;
  // The direct kernel: [tiles][cb], (mean, M2) of the tile's valid positions per channel.
  double2* partials;
  // The tensor-core kernel: [tiles][warp groups][cb], (sum of deviations, shift, sum of squared
  // deviations, count) of each group of warps' valid positions per channel
  // (group_channel_moments), combined by the finalize. (The same workspace.)
  float4* group_partials;
  bool full_rows;  // the footprints are whole input rows (conv_input_box.cuh)
  // [N * C_in][taps + 1]: x's sums (exact_sums_kernel), from which the finalize takes the
  // channels' exact means (conv bias excluded) instead of the tiles' (null: the tiles').
  const double* exact_sums;
  // The tensor-core kernel on wgmma copies each footprint with x_map (plan.tma_footprint, x
  // 16-byte aligned: make_footprint_map); else (false) by asynchronous copies.
  bool tma_footprint = false;
  CUtensorMap x_map{};
};

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// A tile's coordinates, and how much of its box lies inside the output. (32-bit arithmetic:
// the plan keeps tiles, boxes and sizes below 2^31, and 64-bit divisions cost ~70
// instructions each.)
struct Tile {
  int64_t n, g;
  int64_t chunk;      // g * chunks + channel chunk (which weights the block needs)
  int64_t c0;         // first output channel of the chunk
  int64_t c_end;      // end of the conv group's channels
  int od0, oh0, ow0;  // the box's first output position
  int nd, nh, nw;     // its extent inside the output
};

// A tile index as digits, least significant first: the box's (w, h, d) indices, the sample,
// the channel chunk within the conv group, the conv group (tile = box + boxes * (n + N *
// (g * chunks + chunk)), box = w + boxes_w * (h + boxes_h * d)).
struct TileDigits {
  static constexpr int kDigits = 6;
  unsigned d[kDigits];
};

// The radix of digit i < kDigits - 1 (from the kernel's parameters: no registers).
__device__ __forceinline__ unsigned tile_radix(int i, const conv::OnePassPlan& plan,
                                               const conv::Conv3dShape& s) {
  switch (i) {
    case 0:
      return static_cast<unsigned>(plan.boxes_w);
    case 1:
      return static_cast<unsigned>(plan.boxes_h);
    case 2:
      return static_cast<unsigned>(plan.boxes_d);
    case 3:
      return static_cast<unsigned>(s.N);
    default:
      return static_cast<unsigned>(plan.chunks);
  }
}

__device__ __forceinline__ TileDigits tile_digits(int64_t tile, const conv::OnePassPlan& plan,
                                                  const conv::Conv3dShape& s) {
  TileDigits t;
  unsigned rest = static_cast<unsigned>(tile);
#pragma unroll
  for (int i = 0; i + 1 < TileDigits::kDigits; ++i) {
    const unsigned radix = tile_radix(i, plan, s);
    t.d[i] = rest % radix;
    rest /= radix;
  }
  t.d[TileDigits::kDigits - 1] = rest;
  return t;
}

// t becomes the digits of tile + the tile `step` stands for (each digit below its radix: one
// carry per digit at most), without divisions: a block's walk over tile, tile + gridDim.x, ...
__device__ __forceinline__ void advance_tile(TileDigits& t, const TileDigits& step,
                                             const conv::OnePassPlan& plan,
                                             const conv::Conv3dShape& s) {
  unsigned carry = 0;
#pragma unroll
  for (int i = 0; i + 1 < TileDigits::kDigits; ++i) {
    const unsigned radix = tile_radix(i, plan, s);
    t.d[i] += step.d[i] + carry;
    carry = t.d[i] >= radix ? 1u : 0u;
    t.d[i] -= carry ? radix : 0u;
  }
  t.d[TileDigits::kDigits - 1] += step.d[TileDigits::kDigits - 1] + carry;
}

__device__ __forceinline__ Tile tile_of(const TileDigits& digits, const conv::OnePassPlan& plan,
                                        const conv::Conv3dShape& s, int cb) {
  const int TD = static_cast<int>(plan.TD), TH = static_cast<int>(plan.TH),
            TW = static_cast<int>(plan.TW);
  Tile t;
  t.n = digits.d[3];
  t.g = digits.d[5];
  t.chunk = t.g * plan.chunks + digits.d[4];
  t.c0 = t.g * plan.c_out_g + static_cast<int64_t>(digits.d[4]) * cb;
  t.c_end = (t.g + 1) * plan.c_out_g;
  t.ow0 = static_cast<int>(digits.d[0]) * TW;
  t.oh0 = static_cast<int>(digits.d[1]) * TH;
  t.od0 = static_cast<int>(digits.d[2]) * TD;
  t.nd = min(TD, static_cast<int>(s.Do) - t.od0);
  t.nh = min(TH, static_cast<int>(s.Ho) - t.oh0);
  t.nw = min(TW, static_cast<int>(s.Wo) - t.ow0);
  return t;
}

__device__ __forceinline__ Tile tile_at(int64_t tile, const conv::OnePassPlan& plan,
                                        const conv::Conv3dShape& s, int cb) {
  return tile_of(tile_digits(tile, plan, s), plan, s, cb);
}

// The number of output positions of box `box` inside the output (32-bit, as in tile_at).
__device__ __forceinline__ int box_count(const conv::OnePassPlan& plan, const conv::Conv3dShape& s,
                                         int64_t box) {
  const unsigned b = static_cast<unsigned>(box);
  const unsigned boxes_w = static_cast<unsigned>(plan.boxes_w);
  const unsigned boxes_h = static_cast<unsigned>(plan.boxes_h);
  const int TD = static_cast<int>(plan.TD), TH = static_cast<int>(plan.TH),
            TW = static_cast<int>(plan.TW);
  const int bw = static_cast<int>(b % boxes_w);
  const int bh = static_cast<int>((b / boxes_w) % boxes_h);
  const int bd = static_cast<int>(b / (boxes_w * boxes_h));
  return min(TD, static_cast<int>(s.Do) - bd * TD) * min(TH, static_cast<int>(s.Ho) - bh * TH) *
         min(TW, static_cast<int>(s.Wo) - bw * TW);
}

// Offset of tap k in the footprint, relative to a position's first tap.
// The tensor-core kernel's padded taps (K <= k < k_pad, whose weights are zero) read the
// first tap again: an input of that position's own window, so their product is 0 where the
// input is finite, and non-finite only where that position's output is already.
__device__ __forceinline__ int tap_offset(int k, const conv::OnePassPlan& plan,
                                          const conv::Conv3dShape& s) {
  return k >= plan.K
             ? 0
             : tap_offset_in_layout(k, s, plan.row_pitch, plan.plane_pitch, plan.channel_pitch);
}

// A box position's offset in the footprint, and its (td, th, tw) packed in 10-bit fields
// (box sides are at most 1024); a slot past the box gets offset 0 and a coordinate that no
// tile's extent admits. The same for every tile: computed once per thread.
struct BoxPosition {
  int offset;
  unsigned packed;
};

__device__ __forceinline__ BoxPosition box_position(int pos, const conv::OnePassPlan& plan,
                                                    const conv::Conv3dShape& s) {
  const int TH = static_cast<int>(plan.TH), TW = static_cast<int>(plan.TW);
  if (pos >= plan.TD * TH * TW) {
    return BoxPosition{0, 0xffffffffu};
  }
  const int td = pos / (TH * TW);
  const int th = (pos / TW) % TH;
  const int tw = pos % TW;
  const int offset = static_cast<int>(td * s.stride[0] * plan.plane_pitch +
                                      th * s.stride[1] * plan.row_pitch + tw * s.stride[2]);
  return BoxPosition{offset, (static_cast<unsigned>(td) << 20) | (static_cast<unsigned>(th) << 10) |
                                 static_cast<unsigned>(tw)};
}

// Whether a box position is an output position of tile t.
__device__ __forceinline__ bool inside(unsigned packed, const Tile& t) {
  return static_cast<int>(packed >> 20) < t.nd &&
         static_cast<int>((packed >> 10) & 0x3ffu) < t.nh &&
         static_cast<int>(packed & 0x3ffu) < t.nw;
}

// The tile's input footprint: the box of input channels (those of the tile's conv group)
// and positions its outputs read.
__device__ __forceinline__ InputBox footprint_of(const Tile& t, const conv::OnePassPlan& plan,
                                                 const conv::Conv3dShape& s) {
  return InputBox{static_cast<int>(plan.c_in_g),
                  t.od0 * static_cast<int>(s.stride[0]) - static_cast<int>(s.padding[0]),
                  t.oh0 * static_cast<int>(s.stride[1]) - static_cast<int>(s.padding[1]),
                  t.ow0 * static_cast<int>(s.stride[2]) - static_cast<int>(s.padding[2]),
                  static_cast<int>(plan.FD),
                  static_cast<int>(plan.FH),
                  static_cast<int>(plan.FW),
                  static_cast<int>(plan.row_pitch),
                  static_cast<int>(plan.plane_pitch),
                  static_cast<int>(plan.channel_pitch)};
}

// The first input channel of tile t's sample and conv group.
template <typename T>
__device__ __forceinline__ const T* group_input(const void* x, const Tile& t,
                                                const conv::OnePassPlan& plan,
                                                const conv::Conv3dShape& s) {
  return static_cast<const T*>(x) + (t.n * s.C_in + t.g * plan.c_in_g) * s.D * s.H * s.W;
}

// Ends one of the two epilogue passes (sums, then squared deviations from the tile means),
// once each warp has written its channel sums to `scratch` ([warp][cb], zero where a warp
// holds no such channel): combines them in warp order into `totals`, and after the first
// pass the tile means. Every thread must call it.
__device__ __forceinline__ void finish_pass(int pass, const double* scratch, double* totals,
                                            double* tile_mean, int cb, double count) {
  __syncthreads();
  if (threadIdx.x < cb) {
    double t = 0.0;
    for (int w = 0; w < kWarpsPerBlock; ++w) {
      t += scratch[w * cb + threadIdx.x];
    }
    totals[threadIdx.x] = t;
    if (pass == 0) {
      tile_mean[threadIdx.x] = t / count;
    }
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------
// The direct kernel (every dtype).

template <typename T, int CB>
__global__ void __launch_bounds__(kThreads, 2) onepass_direct_kernel(const KernelArgs a) {
  using acc_t = typename ScalarOps<T>::acc_t;
  constexpr int CT = CB / kChannelGroups;  // channels per thread
  static_assert(CT % 4 == 0, "weights are read 4 channels at a time");
  const conv::Conv3dShape& s = a.p.conv;
  const conv::OnePassPlan& plan = a.plan;
  extern __shared__ __align__(16) unsigned char smem[];
  acc_t* w_s = reinterpret_cast<acc_t*>(smem);                              // [K][CB]
  int* koff_s = reinterpret_cast<int*>(smem + plan.koff_offset);            // [K]
  acc_t* x_s = reinterpret_cast<acc_t*>(smem + plan.footprint_offset);      // footprint
  double* scratch = reinterpret_cast<double*>(smem + plan.scratch_offset);  // [warps][CB]
  double* totals = scratch + kWarpsPerBlock * CB;                           // [CB]
  double* tile_mean = totals + CB;                                          // [CB]

  const int K = static_cast<int>(plan.K);
  for (int k = threadIdx.x; k < K; k += kThreads) {
    koff_s[k] = tap_offset(k, plan, s);
  }
  const T* weight = static_cast<const T*>(a.p.weight);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int channel_group = threadIdx.x / kPositionThreads;  // (warp-uniform)
  BoxPosition position[kPositionsPerThread];
#pragma unroll
  for (int j = 0; j < kPositionsPerThread; ++j) {
    position[j] = box_position(threadIdx.x % kPositionThreads + j * kPositionThreads, plan, s);
  }
  int64_t loaded_chunk = -1;  // whose weights w_s holds

  for (int64_t tile = blockIdx.x; tile < plan.tiles; tile += gridDim.x) {
    const Tile t = tile_at(tile, plan, s, CB);
    __syncthreads();  // the previous tile is done with shared memory
    if (t.chunk != loaded_chunk) {
      for (int i = threadIdx.x; i < K * CB; i += kThreads) {
        const int64_t c = t.c0 + i % CB;
        w_s[i] = c < t.c_end ? ScalarOps<T>::to_acc(weight[c * K + i / CB]) : acc_t(0);
      }
      loaded_chunk = t.chunk;
    }
    load_footprint(group_input<T>(a.p.x, t, plan, s), x_s, s, footprint_of(t, plan, s),
                   a.full_rows);
    cp_async_wait_all();
    __syncthreads();

    unsigned valid = 0;  // bit j: position j is an output
#pragma unroll
    for (int j = 0; j < kPositionsPerThread; ++j) {
      valid |= inside(position[j].packed, t) ? 1u << j : 0u;
    }
    acc_t acc[kPositionsPerThread][CT];
#pragma unroll
    for (int j = 0; j < kPositionsPerThread; ++j) {
#pragma unroll
      for (int c = 0; c < CT; ++c) {
        acc[j][c] = acc_t(0);
      }
    }
    const acc_t* w_group = w_s + channel_group * CT;
#pragma unroll 1
    for (int k = 0; k < K; ++k) {
      const int off = koff_s[k];
      acc_t xv[kPositionsPerThread];
#pragma unroll
      for (int j = 0; j < kPositionsPerThread; ++j) {
        xv[j] = x_s[position[j].offset + off];
      }
#pragma unroll
      for (int c = 0; c < CT; c += 4) {
        acc_t w[4];
        if constexpr (sizeof(acc_t) == 4) {
          const float4 q = *reinterpret_cast<const float4*>(w_group + k * CB + c);
          w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
        } else {
          const double2 q0 = *reinterpret_cast<const double2*>(w_group + k * CB + c);
          const double2 q1 = *reinterpret_cast<const double2*>(w_group + k * CB + c + 2);
          w[0] = q0.x, w[1] = q0.y, w[2] = q1.x, w[3] = q1.y;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int j = 0; j < kPositionsPerThread; ++j) {
            acc[j][c + i] = fma(xv[j], w[i], acc[j][c + i]);
          }
        }
      }
    }

    // Per-channel moments of the box's valid positions: sums, then squared deviations. A
    // warp holds channel_group's CT channels; the other group's scratch entries are zero.
    const double count = static_cast<double>(t.nd) * t.nh * t.nw;
    for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
      for (int c = 0; c < CT; ++c) {
        const acc_t mean =
            pass == 0 ? acc_t(0) : static_cast<acc_t>(tile_mean[channel_group * CT + c]);
        acc_t v = 0;  // this thread's few values, in the accumulation type, then double
#pragma unroll
        for (int j = 0; j < kPositionsPerThread; ++j) {
          const acc_t d = acc[j][c] - mean;
          v += (valid >> j) & 1u ? (pass == 0 ? acc[j][c] : d * d) : acc_t(0);
        }
        const double total = warp_allreduce_sum(static_cast<double>(v));
        if (lane == 0) {
          scratch[warp * CB + channel_group * CT + c] = total;
          scratch[warp * CB + (1 - channel_group) * CT + c] = 0.0;
        }
      }
      finish_pass(pass, scratch, totals, tile_mean, CB, count);
    }
    if (threadIdx.x < CB) {
      a.partials[tile * CB + threadIdx.x] =
          make_double2(tile_mean[threadIdx.x], totals[threadIdx.x]);
    }
  }
}

// ---------------------------------------------------------------------------------------
// The tensor-core kernel (float32).

// x = high + low with high = x rounded to TF32 (to nearest) and low = x - high (exact in
// float). The tensor cores read low's top 11 significand bits and the product drops
// low_a * low_b: both errors are ~2^-22 of the product and, because rounding to nearest
// leaves low of either sign, they average out. (Truncating high instead, one op cheaper,
// leaves low with x's sign: every product then comes out ~5e-7 too small in magnitude, a
// bias that the GroupNorm statistics, sums of ~10^6 products, do not average away.)
// On sm_90 the rounding is one instruction (cvt.rn, ties to even; measured at the Conv3d
// headline on an H100, 2026-11-26: forward kernel 283 -> 276 us); before, two integer ops:
// add half of the dropped 13 mantissa bits' range, then clear them (ties away from zero;
// cvt.rna emulates the same in more). Overflow past the largest float rounds to infinity
// either way; a NaN stays NaN (with the integer ops, except for payloads whose 11 mantissa
// bits above the dropped ones are all set: the carry reaches the exponent; PyTorch's
// canonical NaN is not one).
__device__ __forceinline__ void split_tf32(float x, uint32_t& high, uint32_t& low) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(high) : "f"(x));
#else
  high = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
#endif
  low = __float_as_uint(x - __uint_as_float(high));
}

// d += a * b, one m16n8k8 TF32 tensor-core product (a: 16x8 row-major fragment, b: 8x8
// column-major fragment, d: 16x8 float32).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the host plans the tensor-core kernel on compute capability 8.0+ only
#endif
}

// ---- Hopper's warpgroup products (wgmma; the file's sm_90a image only).
//
// The same split-TF32 products, issued by each warpgroup (4 warps) as one wgmma.m64nCBk8 per
// m16 row of its warps' tiles and product term, instead of NT mma.sync m16n8k8 per warp: a
// third of the tensor instructions, at 1.5x mma.sync's TF32 rate (1024 vs ~680 multiply-adds
// per cycle and SM; Nsight Compute measured the full rate while the pipe is busy, n = 24
// included). A (the footprint's
// values, split) comes from registers, in mma.sync's A fragment layout (warp w of the
// warpgroup gives rows 16 w .. 16 w + 15 of the m64 tile: here its m16 tile mt's rows), and
// the accumulators come back in mma.sync's D layout per n8 tile, so the rows a thread holds
// and the epilogue are those of the mma.sync kernel. The tensor cores accumulate a tile's
// whole reduction (3 * k_pad / 8 instructions per output: 33 at the Conv3d headline, 48 at
// most). Their float32 accumulation drifts toward zero by about half an ulp per instruction
// (split_tf32_wgmma_conv3d.cuh, whose 648 per output needed per-block sums); over 33 it did
// not show: the headline output's error against float64 was 7.056e-6 on wgmma, 7.057e-6 on
// mma.sync (H100, 2026-11-26), and the tests hold both to the same tolerances (K = 128
// included). Measured: 216 -> 189 us at the Conv3d headline. B (the chunk's weights, split) is read
// by the tensor cores from shared memory: per part (high, low) and 32-tap block, cb rows of
// 32 taps (K-major), 128-byte rows swizzled in 1024-byte atoms (SWIZZLE_128B: 16-byte chunk
// j of row n at chunk j ^ (n % 8)), each block 1024-byte aligned.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FUSED_OPS_ONEPASS_WGMMA 1

// The matrix descriptor of a K-major, 128-byte-swizzled B tile at shared address `tile`
// (1024-byte aligned): start address and the 8-row groups' stride (1024 bytes) in 16-byte
// units, the leading offset unused by swizzled layouts (1), layout type 1 (SWIZZLE_128B).
__device__ __forceinline__ uint64_t k_major_swizzled_descriptor(uint32_t tile) {
  return static_cast<uint64_t>((tile >> 4) & 0x3fffu) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most `kPending` of the warpgroup's committed groups of products are running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of the accumulators across the asynchronous
// products (they are written until wgmma_wait<0> returns).
template <int NT>
__device__ __forceinline__ void fence_accumulators(float (&d)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      asm volatile("" : "+f"(d[nt][e])::"memory");
    }
  }
}

// d (m64 x 8 NT, the thread's NT x 4 values) += a (m64 x k8, the thread's 4) * the k8 x 8 NT
// tile that `b` describes.
__device__ __forceinline__ void wgmma_tf32(float (&d)[1][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "%8, accumulate, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
__device__ __forceinline__ void wgmma_tf32(float (&d)[2][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7}, "
      "{%8, %9, %10, %11}, %12, accumulate, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
__device__ __forceinline__ void wgmma_tf32(float (&d)[3][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n24k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11}, {%12, %13, %14, %15}, %16, accumulate, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// A warp's moments of each channel the thread holds (channels nt * 8 + 2 * quad + e of its
// rows (group, group + 8) of each m16 tile, acc[mt][nt][2 * h + e]) over the warp's valid rows
// (`valid` bit 2 * mt + h; `count` of them in the warp), in two passes: a shift near the
// channel's values, then (sum of (y - shift), shift, sum of (y - shift)^2, count), the same in
// every lane holding the channel. The shift: the valid rows' mean (their sum over the thread's
// rows, then over the 8 lanes), or, where every row is valid (kAllValid, no masks), the mean
// of one lane's 2 * MT rows (one shuffle instead of three butterfly levels; the finalize takes
// M2 about the channel's mean in double from any shift). (The deviations' sum, not sum -
// count * shift: the float sum's rounding is relative to |mean|, and the latter would carry it
// into M2, ~1e-5 of it where |mean| = 1000 std.) (The shift as row 0's value alone, no sum:
// ptxas then serialized the products for want of registers, C7511: 173.5 -> 206-212 us at the
// Conv3d headline, H200, 2026-11-29.)
template <int MT, int NT, bool kAllValid>
__device__ __forceinline__ void warp_channel_moments(const float (&acc)[MT][NT][4], unsigned valid,
                                                     int count, float4 (&moments)[NT][2]) {
  const float inv_count = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  const auto row_valid = [&](int mt, int h) {
    return kAllValid || ((valid >> (2 * mt + h)) & 1u) != 0u;
  };
  const auto sum_over_rows = [](float v) {  // the 8 lanes of the thread's quad value
    for (int offset = 4; offset < kWarpSize; offset <<= 1) {
      v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
  };
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float sum = 0.0f;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          sum += row_valid(mt, h) ? acc[mt][nt][2 * h + e] : 0.0f;
        }
      }
      // (All valid: the mean of lane quad's 2 * MT rows, those of group 0.)
      const float shift =
          kAllValid ? __shfl_sync(0xffffffffu, sum * (0.5f / MT), static_cast<int>(threadIdx.x) & 3)
                    : sum_over_rows(sum) * inv_count;
      float deviations = 0.0f, squares = 0.0f;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float d = row_valid(mt, h) ? acc[mt][nt][2 * h + e] - shift : 0.0f;
          deviations += d;
          squares = fmaf(d, d, squares);
        }
      }
      moments[nt][e] = make_float4(sum_over_rows(deviations), shift, sum_over_rows(squares),
                                   static_cast<float>(count));
    }
  }
}

// A group of warps' moments of channel c from its warps' (`warps`: the group's first warp's
// [kWarpsPerGroup][cb] of (deviations, shift, squares, count), warp_channel_moments), in the same
// form, about the shift of its first warp with valid rows: per warp, d = its shift - that shift,
//   sum over the warp's y of (y - shift) = deviations + count * d
//   sum over the warp's y of (y - shift)^2 = squares + d * (2 * deviations + count * d),
// in float, in warp order. The squares' terms are the warps' own squared deviations about
// shifts near them, so their roundings are relative to M2, not to the mean (no cancellation),
// and there is no division: the finalize takes the mean and M2 in double. (Before, one warp
// combined a tile's 8 warps in double, with a division, after a block barrier: the kernel's
// "Pipeline" says what leaving that out gained.)
__device__ __forceinline__ float4 group_channel_moments(const float4* warps, int c, int cb) {
  float shift = 0.0f;
#pragma unroll
  for (int w = kWarpsPerGroup - 1; w >= 0; --w) {
    const float4 m = warps[w * cb + c];
    shift = m.w > 0.0f ? m.y : shift;
  }
  float deviations = 0.0f, squares = 0.0f, count = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarpsPerGroup; ++w) {
    const float4 m = warps[w * cb + c];
    if (m.w > 0.0f) {
      const float d = m.y - shift;
      deviations += fmaf(m.w, d, m.x);
      squares += m.z + d * fmaf(m.w, d, 2.0f * m.x);
      count += m.w;
    }
  }
  return make_float4(deviations, shift, squares, count);
}

// The sum of v over the warp (every lane gets it).
__device__ __forceinline__ int warp_sum(int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_add_sync(0xffffffffu, v);
#else
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
#endif
}

// Fragment layouts of mma.m16n8k8 (PTX ISA), lane = 4 * group + quad:
//   A (16 x 8): a0 (row group, col quad), a1 (group + 8, quad), a2 (group, quad + 4),
//               a3 (group + 8, quad + 4);
//   B (8 x 8):  b0 (k quad, n group), b1 (k quad + 4, n group);
//   D (16 x 8): d0 (row group, col 2 quad), d1 (group, 2 quad + 1), d2 (group + 8, 2 quad),
//               d3 (group + 8, 2 quad + 1).
// Rows are box positions, A's columns and B's rows taps, B's and D's columns channels.
// kWgmma: the products on wgmma (above; sm_90a images only, else the kernel traps: the host
// launches it only where the device runs such an image), else on mma.sync. kWindows (wgmma
// only, where the plan has them: OnePassPlan::windows): a thread's rows are 6 consecutive
// positions along W and its taps come in triples along kW, each triple's values loaded once as
// a window of 8 (see "Windows" below).
template <int NT, bool kWgmma, bool kWindows>
__global__ void __launch_bounds__(kThreads, 2)
    onepass_tensor_core_kernel(const __grid_constant__ KernelArgs a) {
  static_assert(!kWindows || (kWgmma && kWgmmaTilesPerWarp == 3),
                "windows: wgmma products, a thread's 2 x 3 rows one window's positions");
#if !defined(FUSED_OPS_ONEPASS_WGMMA)
  if constexpr (kWgmma) {
    asm volatile("trap;\n");  // (not __trap(): the code after it would warn as unreachable)
  }
#endif
  constexpr int CB = 8 * NT;
  constexpr int MT = kWgmma ? kWgmmaTilesPerWarp : kMmaTilesPerWarp;
  const conv::Conv3dShape& s = a.p.conv;
  const conv::OnePassPlan& plan = a.plan;
  extern __shared__ __align__(16) unsigned char smem[];
  // The split weights. mma.sync: [k_pad / 8][NT][32 lanes] of (b0 high, b1 high, b0 low,
  // b1 low) as TF32 bits. wgmma: from the first 1024-byte boundary, the high parts' and then
  // the low parts' B tiles, [ceil(k_pad / 32)][CB rows][128 bytes] each (see above;
  // conv::onepass_tensor_core_weight_bytes).
  uint4* b_s = reinterpret_cast<uint4*>(smem);
  const uint32_t b_tiles = (static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + 1023u) & ~1023u;
  const uint32_t b_part_bytes = static_cast<uint32_t>((plan.k_pad + 31) / 32) * CB * 128u;
  int* koff_s = reinterpret_cast<int*>(smem + plan.koff_offset);  // [k_pad]
  // Two footprint buffers, and two of the warps' moments ([2][warps][CB]): see "Pipeline".
  // (The tensor-map copies' buffers from the first 128-byte boundary on.)
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t footprints =
      plan.tma_footprint
          ? ((smem_base + static_cast<uint32_t>(plan.footprint_offset) + 127u) & ~127u) - smem_base
          : static_cast<uint32_t>(plan.footprint_offset);
  const auto footprint_buffer = [&](int buffer) {
    return reinterpret_cast<float*>(smem + footprints + buffer * plan.footprint_bytes);
  };
  float4* warp_moments = reinterpret_cast<float4*>(smem + plan.scratch_offset);

  const int K = static_cast<int>(plan.K);
  const int k_steps = static_cast<int>(plan.k_pad / 8);
  // In bytes: a fragment element's address is then its row's address plus its tap's offset,
  // one add (element offsets took an add and a multiply-add per element).
  if constexpr (kWindows) {
    // [window_triples][4 quads]: where quad's triple j (kernel row 4 j + quad, kw = 0) lies from
    // a position's first tap (0 for the padding rows past window_rows, whose weights are 0).
    for (int i = threadIdx.x; i < 4 * plan.window_triples; i += kThreads) {
      koff_s[i] =
          i < plan.window_rows ? tap_offset(3 * i, plan, s) * static_cast<int>(sizeof(float)) : 0;
    }
  } else {
    for (int k = threadIdx.x; k < plan.k_pad; k += kThreads) {
      koff_s[k] = tap_offset(k, plan, s) * static_cast<int>(sizeof(float));
    }
  }
  const float* weight = static_cast<const float*>(a.p.weight);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int group = lane >> 2;
  const int quad = lane & 3;
  // This thread's A rows: (group, group + 8) of each of the warp's m16 tiles, and where their
  // first taps lie in a footprint (in bytes).
  BoxPosition row[MT][2];
  int row_first_tap[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // (Windows: the thread's 6 positions in a row along W, o = mt + 3 h.)
      row[mt][h] = box_position(
          kWindows ? 6 * (warp * 8 + group) + mt + 3 * h : (warp * MT + mt) * 16 + group + 8 * h,
          plan, s);
      row_first_tap[mt][h] = row[mt][h].offset * static_cast<int>(sizeof(float));
    }
  }
  unsigned rows_in_box = 0;  // bit 2 * mt + h: the row is a position of the box
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows_in_box |= row[mt][h].packed != 0xffffffffu ? 1u << (2 * mt + h) : 0u;
    }
  }
  // This thread's taps of each k step: koff_quad[8 * ks] and koff_quad[8 * ks + 4].
  const int* const koff_quad = koff_s + quad;
  // This thread's A values of m16 tile mt for the k step whose taps lie off0 and off1 bytes
  // from a row's first tap in footprint x_tile (rows group and group + 8, fragment layout
  // above), and the same split: the fragment of the wgmma and the mma.sync products.
  const auto fragment_values = [&](const unsigned char* x_tile, int mt, int off0, int off1,
                                   float (&values)[4]) {
    const unsigned char* const row0 = x_tile + row_first_tap[mt][0];
    const unsigned char* const row8 = x_tile + row_first_tap[mt][1];
    values[0] = *reinterpret_cast<const float*>(row0 + off0);
    values[1] = *reinterpret_cast<const float*>(row8 + off0);
    values[2] = *reinterpret_cast<const float*>(row0 + off1);
    values[3] = *reinterpret_cast<const float*>(row8 + off1);
  };
  const auto split_fragment = [](const float (&values)[4], uint32_t (&high)[4],
                                 uint32_t (&low)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      split_tf32(values[e], high[e], low[e]);
    }
  };
  // The chunk's weights, split, in the products' layout.
  const auto load_weights = [&](const Tile& t) {
    if constexpr (kWgmma) {
      const int part_words = static_cast<int>(b_part_bytes / 4);
      for (int i = threadIdx.x; i < part_words; i += kThreads) {
        const int k_in_block = i % 32;
        const int n = (i / 32) % CB;
        const int k = (i / (32 * CB)) * 32 + k_in_block;
        const int64_t c = t.c0 + n;
        const int tap = kWindows ? conv::onepass_window_tap(k, plan) : (k < K ? k : -1);
        uint32_t high, low;
        split_tf32(c < t.c_end && tap >= 0 ? weight[c * K + tap] : 0.0f, high, low);
        const uint32_t at = b_tiles + static_cast<uint32_t>(i / 32) * 128u +
                            ((((k_in_block >> 2) ^ (n & 7)) << 4) | ((k_in_block & 3) << 2));
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(at), "r"(high) : "memory");
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(at + b_part_bytes), "r"(low) : "memory");
      }
      // The tensor cores read them through the async proxy (after the caller's barrier).
#if defined(FUSED_OPS_ONEPASS_WGMMA)
      fence_proxy_async_shared();
#endif
    } else {
      for (int i = threadIdx.x; i < k_steps * NT * kWarpSize; i += kThreads) {
        const int l = i % kWarpSize;
        const int nt = (i / kWarpSize) % NT;
        const int ks = i / (kWarpSize * NT);
        const int64_t c = t.c0 + nt * 8 + (l >> 2);
        const int k0 = ks * 8 + (l & 3);
        const int k1 = k0 + 4;
        const float w0 = c < t.c_end && k0 < K ? weight[c * K + k0] : 0.0f;
        const float w1 = c < t.c_end && k1 < K ? weight[c * K + k1] : 0.0f;
        uint4 f;
        split_tf32(w0, f.x, f.z);
        split_tf32(w1, f.y, f.w);
        b_s[i] = f;
      }
    }
  };
  // Whole input rows through the row table where the plan has one and the copies are
  // asynchronous (conv_input_box.cuh).
  int4* const row_table = a.full_rows && !a.tma_footprint && plan.row_table_offset != 0
                              ? reinterpret_cast<int4*>(smem + plan.row_table_offset)
                              : nullptr;
  if (row_table != nullptr) {
    fill_full_row_table(row_table, s, footprint_of(tile_at(0, plan, s, CB), plan, s));
  }
  const FullRowCopies row_copies(s);
#if defined(FUSED_OPS_ONEPASS_WGMMA)
  // The footprints' mbarriers (one per buffer, after the tile stride's digits; tensor-map
  // copies only).
  const uint32_t footprint_bars =
      smem_base + static_cast<uint32_t>(plan.scratch_offset +
                                        conv::kOnePassTensorCoreScratchBytesPerChannel * CB + 32);
  const uint32_t footprint_box_bytes =
      static_cast<uint32_t>(plan.footprint * static_cast<int64_t>(sizeof(float)));
  // The tensor-map copy of tile t's footprint into `buffer`, by one thread, completing on the
  // buffer's mbarrier. (After every warp's last reads of the buffer, which the caller has
  // acquired: ordered before the copy engine's writes.)
  const auto copy_footprint = [&](const Tile& t, int buffer) {
    fence_proxy_async_shared();
    const uint32_t bar = footprint_bars + 8u * static_cast<uint32_t>(buffer);
    mbarrier_arrive_expect_bytes(bar, footprint_box_bytes);
    const InputBox box = footprint_of(t, plan, s);
    tiled_copy_to_shared_5d(
        smem_base + footprints + static_cast<uint32_t>(buffer * plan.footprint_bytes), &a.x_map,
        box.iw0, box.ih0, box.id0, static_cast<int32_t>(t.g * plan.c_in_g),
        static_cast<int32_t>(t.n), bar);
  };
#endif
  const auto load_tile_footprint = [&](const Tile& t, int buffer) {
#if defined(FUSED_OPS_ONEPASS_WGMMA)
    if (a.tma_footprint) {
      if (threadIdx.x == 0) {
        copy_footprint(t, buffer);
      }
      return;
    }
#endif
    const float* const sample = group_input<float>(a.p.x, t, plan, s);
    if (row_table != nullptr) {
      row_copies.load(sample, footprint_buffer(buffer), s, footprint_of(t, plan, s), row_table);
    } else {
      load_footprint(sample, footprint_buffer(buffer), s, footprint_of(t, plan, s), a.full_rows);
    }
  };

  // Pipeline: the footprint of a block's next tile loads into the other buffer while the block
  // computes this one. Asynchronous copies: each tile's start issues the next one's, and one
  // barrier per tile publishes it and ends the reads of this tile's buffer (so that the next
  // copies may overwrite it). (Each footprint loaded after a barrier at its tile's start
  // instead: 263 vs 255 us at the Conv3d headline, H100, 2026-11-26.) Tensor-map copies: no
  // barrier per tile; a tile waits for its copy on its buffer's mbarrier, and the warp that
  // ends the last reads of a buffer (counted in footprint_reads) issues the copy of the tile
  // two rounds on into it, so the two warpgroups run up to a tile apart instead of meeting
  // every tile. Each group of 4 warps (a warpgroup, which its products keep in step anyway)
  // meets at its own barrier to combine its moments in float (group_partials), which the
  // finalize combines. (Before, a barrier per tile, after which one warp combined the 8
  // warps' moments in double: kernel 168.9 -> 165.0 us, forward 0.1793 -> 0.1771 ms a call at
  // the Conv3d headline, H200, 2026-11-29, benchmarks/h200-2026-11-29-tile-barrier.) The
  // weights stay from one tile to the next of the same chunk.
  int64_t loaded_chunk = -1;  // whose weights b_s holds
  // gridDim.x as digits, in shared memory (block-uniform; registers are the limit here), after
  // the warps' moments (kOnePassTensorCoreScratchBytes).
  TileDigits* const stride = reinterpret_cast<TileDigits*>(
      smem + plan.scratch_offset + conv::kOnePassTensorCoreScratchBytesPerChannel * CB);
  static_assert(
      sizeof(TileDigits) <= 32 && 32 + 2 * 8 + 2 * 4 <= conv::kOnePassTensorCoreScratchBytes,
      "the plan's bytes: the stride's digits, the footprints' two mbarriers, the counts");
#if defined(FUSED_OPS_ONEPASS_WGMMA)
  // Per footprint buffer, the warps' ends of reading it so far (tensor-map copies; after the
  // mbarriers).
  const uint32_t footprint_reads =
      smem_base + static_cast<uint32_t>(plan.scratch_offset +
                                        conv::kOnePassTensorCoreScratchBytesPerChannel * CB + 48);
#endif
  if (threadIdx.x == 0) {
    *stride = tile_digits(gridDim.x, plan, s);
  }
  TileDigits digits = tile_digits(blockIdx.x, plan, s);  // this round's tile
#if defined(FUSED_OPS_ONEPASS_WGMMA)
  if (a.tma_footprint && threadIdx.x == 0) {
    mbarrier_init(footprint_bars, 1);
    mbarrier_init(footprint_bars + 8u, 1);
    fence_mbarrier_init();
    asm volatile("st.shared.v2.u32 [%0], {%1, %1};\n" ::"r"(footprint_reads), "r"(0u) : "memory");
  }
#endif
  __syncthreads();  // koff_s, the row table, the stride, the mbarriers and the read counts
  if (blockIdx.x < plan.tiles) {
    load_tile_footprint(tile_of(digits, plan, s, CB), 0);
  }
#if defined(FUSED_OPS_ONEPASS_WGMMA)
  // (Tensor-map copies: the second round's too, into the other buffer.)
  if (a.tma_footprint && threadIdx.x == 0 && blockIdx.x + gridDim.x < plan.tiles) {
    TileDigits second = digits;
    advance_tile(second, *stride, plan, s);
    copy_footprint(tile_of(second, plan, s, CB), 1);
  }
#endif
  cp_async_wait_all();
  __syncthreads();
  int buffer = 0;
  int round = 0;  // the block's tiles so far
  for (int64_t tile = blockIdx.x; tile < plan.tiles; tile += gridDim.x, buffer ^= 1, ++round) {
    const Tile t = tile_of(digits, plan, s, CB);
    if (t.chunk != loaded_chunk) {
      // (Asynchronous copies: every warp passed the barrier that ended the previous tile, and b_s
      // is free. Tensor-map copies: the warps run up to a tile apart, so they meet here first.)
      if (a.tma_footprint) {
        __syncthreads();
      }
      load_weights(t);
      loaded_chunk = t.chunk;
      __syncthreads();
    }
    // (Only the digits stay live across the products: the next tile's coordinates are
    // recomputed from them, for its footprint now and for its products next round.)
    advance_tile(digits, *stride, plan, s);
    if (!a.tma_footprint && tile + gridDim.x < plan.tiles) {
      load_tile_footprint(tile_of(digits, plan, s, CB), buffer ^ 1);
    }
#if defined(FUSED_OPS_ONEPASS_WGMMA)
    if (a.tma_footprint) {  // this tile's footprint (the buffer's (round / 2)-th copy)
      mbarrier_wait(footprint_bars + 8u * static_cast<uint32_t>(buffer),
                    static_cast<uint32_t>(round >> 1) & 1u);
    }
#endif

    // Bit 2 * mt + h: row h of tile mt is an output position (those in the box, where the
    // box lies inside the output, as most do).
    unsigned valid = rows_in_box;
    if (t.nd != plan.TD || t.nh != plan.TH || t.nw != plan.TW) {
      valid = 0;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          valid |= inside(row[mt][h].packed, t) ? 1u << (2 * mt + h) : 0u;
        }
      }
    }
    // (Zeroed, not overwritten by the first products with wgmma's scale-d 0: with the
    // accumulators undefined before them, ptxas spilled 204 bytes instead of 36, H200 build of
    // 2026-11-28, as a peeled first step did on 2026-11-26.)
    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[mt][nt][e] = 0.0f;
        }
      }
    }
    const unsigned char* const x_tile =
        reinterpret_cast<const unsigned char*>(footprint_buffer(buffer));
    if constexpr (kWgmma) {
#if defined(FUSED_OPS_ONEPASS_WGMMA)
      // One k step at a time: this thread's A values of each m16 tile, split; then the
      // warpgroup's 3 * MT products (the small terms first), committed as three groups, one
      // per term. Once the first group (the low parts' products) is done, its registers take
      // the next step's values, which load while the other two terms run; then the products
      // are waited for. Unrolled by 2: the loop's and the addresses' arithmetic, ~25 of 103
      // instructions a step, down to ~16 of 94. (At the Conv3d headline, H200, 2026-11-29: 170.2
      // us with 3 m16 tiles a warp, 173.1 with 4; with each step's values loaded after all
      // its products were done, 174.1 and 175.0. Two halves of the tiles, one's products in flight
      // while the other's values load: 192-200 us instead of 189 on 2026-11-26, more spills.
      // Two k steps in flight, each in its own registers, wgmma.wait_group 1: ptxas
      // serializes the products for want of registers, C7512, at cb = 16 and 24.)
      // B of k step ks: 32-tap block ks / 4, 32 bytes (2 descriptor units) a step within it.
      uint64_t b_high = k_major_swizzled_descriptor(b_tiles);
      const uint64_t b_low_minus_high = b_part_bytes >> 4;
      // Issues k step ks's products, from A split into a_high and a_low, in three commit groups.
      const auto issue_products = [&](const uint32_t (&a_high)[MT][4],
                                      const uint32_t (&a_low)[MT][4], int ks) {
        const uint64_t b_low = b_high + b_low_minus_high;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          fence_accumulators(acc[mt]);
        }
        wgmma_fence();
        // (Term by term over the tiles: consecutive products into different accumulators.)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          wgmma_tf32(acc[mt], a_low[mt], b_high);
        }
        wgmma_commit();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          wgmma_tf32(acc[mt], a_high[mt], b_low);
        }
        wgmma_commit();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          wgmma_tf32(acc[mt], a_high[mt], b_high);
        }
        wgmma_commit();
        // (The next step's B, while the products run: the next 32 bytes of the block's rows,
        // or the next block, CB * 128 bytes after this one's start.)
        b_high += (ks & 3) == 3 ? static_cast<uint64_t>(CB * 8 - 6) : uint64_t{2};
      };
      const auto wait_products = [&] {
        wgmma_wait<0>();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          fence_accumulators(acc[mt]);
        }
      };
      if constexpr (kWindows) {
        // Windows. Thread (group, quad) of warp w holds positions P + o, o = mt + 3 h (its
        // rows group + 8 h of m16 tile mt), P = 6 (8 w + group), in a row along W; its slots
        // of the K steps go through the taps of its kernel rows 4 j + quad in triples, kw = 0,
        // 1, 2 (conv::onepass_window_tap). Position o's tap kw of triple j is then window
        // element o + kw of the 8 values from P's tap (j, kw = 0): 8 loads (4 of 8 bytes: P's
        // offsets and the pitches are even) per triple where the values took 18. Three k steps
        // take a pair of triples, j in w0 (column quad) and j + 1 in w1 (column quad + 4), one
        // kw a step; during the third step's products the next pair's windows load. A step's
        // 12 values are then 12 different window elements, split straight into the products'
        // registers: no value is copied from one fragment's registers to another's. (With the
        // triple's slots in order instead, (j, 0), (j, 1) | (j, 2), (j + 1, 0) | (j + 1, 1),
        // (j + 1, 2), and o = 2 mt + h, a step's fragments shared values and ptxas copied them,
        // and the high parts too for their second product: 50 moves in the k loop's 182
        // instructions per 3 steps, 25 of 144 now, and no spills where there were 36 bytes;
        // ptxas of 2026-11-29.) An odd last triple takes 2 steps from w0.
        // (What slows the products is the loaded registers more than the banks: in a
        // microbenchmark of the step, 12 loads a step at one address for the whole warp added
        // 82% of the cycles that 12 at 32 distinct addresses added, and 6 at distinct
        // addresses 56%: benchmarks/h200-2026-11-29-k-step-parts.)
        const int* const triples = koff_s + quad;  // triples[4 j]: (j, 0)'s offset from P's
        const int last_triple = static_cast<int>(plan.window_triples) - 1;
        // Triple j's offset (past the last triple's, the last's again: no branch).
        const auto triple_offset = [&](int j) { return triples[4 * min(j, last_triple)]; };
        const unsigned char* const window_row = x_tile + row_first_tap[0][0];
        const auto load_window = [&](float (&w)[8], int offset) {
          const unsigned char* const at = window_row + offset;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 v = *reinterpret_cast<const float2*>(at + 8 * i);
            w[2 * i] = v.x;
            w[2 * i + 1] = v.y;
          }
        };
        // A step's A values: column quad from window wq at kw = kq, column quad + 4 from
        // window wq4 at kw = kq4, split.
        const auto split_windows = [&](const float (&wq)[8], int kq, const float (&wq4)[8], int kq4,
                                       uint32_t (&a_high)[MT][4], uint32_t (&a_low)[MT][4]) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            split_tf32(wq[mt + kq], a_high[mt][0], a_low[mt][0]);
            split_tf32(wq[mt + 3 + kq], a_high[mt][1], a_low[mt][1]);
            split_tf32(wq4[mt + kq4], a_high[mt][2], a_low[mt][2]);
            split_tf32(wq4[mt + 3 + kq4], a_high[mt][3], a_low[mt][3]);
          }
        };
        // (Each window's offset read before its step's first wait, as the values' offsets
        // below. Read after it, the window's address waited on it: short-scoreboard stalls on
        // the adds, ~7% of the kernel's samples; the time moved within the calls' spread,
        // 156.1 -> 154.7-155.9 us at the headline, H200, 2026-11-29.)
        float w0[8], w1[8];
        load_window(w0, triple_offset(0));
        load_window(w1, triple_offset(1));
        int ks = 0;
        const int pair_steps = 3 * (static_cast<int>(plan.window_triples) / 2);
#pragma unroll 1
        for (int j = 0; ks < pair_steps; j += 2) {
          uint32_t a_high[MT][4], a_low[MT][4];
          split_windows(w0, 0, w1, 0, a_high, a_low);  // step A
          issue_products(a_high, a_low, ks);
          wait_products();
          split_windows(w0, 1, w1, 1, a_high, a_low);  // step B
          issue_products(a_high, a_low, ks + 1);
          const int offset0 = triple_offset(j + 2), offset1 = triple_offset(j + 3);
          wait_products();
          split_windows(w0, 2, w1, 2, a_high, a_low);  // step C
          issue_products(a_high, a_low, ks + 2);
          wgmma_wait<2>();
          load_window(w0, offset0);
          load_window(w1, offset1);
          wait_products();
          ks += 3;
        }
        if (ks < k_steps) {  // the odd last triple, in w0
          uint32_t a_high[MT][4], a_low[MT][4];
          split_windows(w0, 0, w0, 1, a_high, a_low);
          issue_products(a_high, a_low, ks);
          wait_products();
          // (The padding column: tap 2 again, an input of the position's own window.)
          split_windows(w0, 2, w0, 2, a_high, a_low);
          issue_products(a_high, a_low, ks + 1);
          wait_products();
        }
      } else {
        float values[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          fragment_values(x_tile, mt, koff_quad[0], koff_quad[4], values[mt]);
        }
#pragma unroll 2
        for (int ks = 0; ks < k_steps; ++ks) {
          uint32_t a_high[MT][4], a_low[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            split_fragment(values[mt], a_high[mt], a_low[mt]);
          }
          issue_products(a_high, a_low, ks);
          // The next step's tap offsets before the wait; the last step loads its own values
          // again (no branch in the unrolled loop).
          const int* const next_offsets = koff_quad + 8 * (ks + 1 < k_steps ? ks + 1 : ks);
          const int next_off0 = next_offsets[0];
          const int next_off1 = next_offsets[4];
          wgmma_wait<2>();
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            fragment_values(x_tile, mt, next_off0, next_off1, values[mt]);
          }
          wait_products();
        }
      }
#endif
    } else {
#pragma unroll 1
      for (int ks = 0; ks < k_steps; ++ks) {
        const int off0 = koff_quad[ks * 8];
        const int off1 = koff_quad[ks * 8 + 4];
        uint4 b[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          b[nt] = b_s[(ks * NT + nt) * kWarpSize + lane];
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          float values[4];
          uint32_t a_high[4], a_low[4];
          fragment_values(x_tile, mt, off0, off1, values);
          split_fragment(values, a_high, a_low);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            // The small terms first.
            mma_tf32(acc[mt][nt], a_low, b[nt].x, b[nt].y);
            mma_tf32(acc[mt][nt], a_high, b[nt].z, b[nt].w);
            mma_tf32(acc[mt][nt], a_high, b[nt].x, b[nt].y);
          }
        }
      }
    }

#if defined(FUSED_OPS_ONEPASS_WGMMA)
    if (a.tma_footprint) {
      // This warp's reads of the footprint are done (its last values are in the products it
      // waited for). The last of the block's warps to get here issues the copy of the tile
      // two rounds on into this buffer: the count's acquire-release orders every warp's reads
      // before it. (The counts only grow: a buffer's next round is copied only after all of
      // this round's reads, so its counts never mix with this round's.)
      __syncwarp();
      if (lane == 0) {
        const uint32_t reads = footprint_reads + 4u * static_cast<uint32_t>(buffer);
        uint32_t before;
        asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;\n"
                     : "=r"(before)
                     : "r"(reads)
                     : "memory");
        if (before % kWarpsPerBlock == kWarpsPerBlock - 1 && tile + 2 * gridDim.x < plan.tiles) {
          TileDigits after_next = digits;  // (digits: the next round's tile)
          advance_tile(after_next, *stride, plan, s);
          copy_footprint(tile_of(after_next, plan, s, CB), buffer);
        }
      }
    }
#endif
    // Per-channel moments of the box's valid positions within each warp (no block barrier):
    // its deviations and squared deviations from a shift near its mean, in float (the
    // thread's 2 * MT rows, then butterflies over the 8 lanes holding a channel: lane bits 2-4);
    // then one warp of each group of 4 combines the group's (group_channel_moments, after the
    // group's barrier), a different one each tile. This thread holds channels
    // nt * 8 + 2 * quad + e of rows (group, group + 8) of each tile.
    // (Block-wide passes in double before, 4 barriers a tile: 142M -> 115M warp instructions
    // with the byte addresses above, 298-311 -> 288 us at the Conv3d headline, H100,
    // 2026-11-26.) A warp whose 16 * MT rows are all output positions skips the masks, and its
    // shift is one lane's mean (warp_channel_moments).
    const int warp_count = warp_sum(quad == 0 ? __popc(valid) : 0);
    float4 moments[NT][2];  // (deviations, shift, squares, count): warp_channel_moments
    if (warp_count == MT * 16) {
      warp_channel_moments<MT, NT, true>(acc, valid, warp_count, moments);
    } else {
      warp_channel_moments<MT, NT, false>(acc, valid, warp_count, moments);
    }
    float4* const tile_moments = warp_moments + buffer * kWarpsPerBlock * CB;
    if (group == 0) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          tile_moments[warp * CB + nt * 8 + 2 * quad + e] = moments[nt][e];
        }
      }
    }
    // (This buffer of moments was last read by the group's combine of the tile two rounds back,
    // whose warp reached the group's previous barrier after it.)
    const int warp_group = warp / kWarpsPerGroup;
    named_barrier_sync(1 + warp_group, kWarpsPerGroup * kWarpSize);
    if (warp % kWarpsPerGroup == (round & (kWarpsPerGroup - 1)) && lane < CB) {
      a.group_partials[(tile * conv::kOnePassTensorCoreWarpGroups + warp_group) * CB + lane] =
          group_channel_moments(tile_moments + warp_group * kWarpsPerGroup * CB, lane, CB);
    }
    if (!a.tma_footprint) {
      cp_async_wait_all();  // this thread's copies of the next footprint
      __syncthreads();
    }
  }
  // The finalize kernel, launched as this one's programmatic dependent, may start once a thread
  // of every block got here: each block's first warp done with its tiles (the warps run up to
  // a tile apart; the finalize waits for the whole kernel anyway). (At the kernel's start
  // instead, ptxas of 2026-11-29 spilled 32 bytes where it spills none, and the dependent's
  // blocks could not start before these end anyway, for want of registers.)
  allow_dependent_grid();
}

// ---------------------------------------------------------------------------------------
// Exact channel means (the training forward with the tensor-core kernel). The mean of channel
// c's convolution output (bias excluded) is linear in x:
//   m0[n, c] = 1/S * sum over b, taps k of w[c, b, k] * X[n, b, k],
//   X[n, b, k] = sum over outputs s of x[n, b, s * stride - padding + k * dilation]
// (0 outside the input), and X is separable: per dim, the input positions tap k reaches. In
// double, in a fixed order: exact_sums_kernel reads x once (a block per (n, b) and chunk of D)
// and sums it per tap and in all (x's total per (n, b), for input_sums), then the finalize's
// products with the weights (a warp per channel of its sample). The backward's
// dy = alpha * (y0 - m0) + gamma sums over every output position, so a channel mean of other
// rounding than y0's leaves an error that grows with S (the tensor-core moments' mean gave the
// weight gradient 2.6x eager's error); these do not.

// The input positions tap k reads along a dim (one per output): first, first + stride, ...
// up to last (none where first > last).
struct TapPositions {
  int64_t first, last, stride;
};
__device__ __forceinline__ TapPositions tap_positions(int64_t k, int64_t in, int64_t out,
                                                      int64_t stride, int64_t padding,
                                                      int64_t dilation) {
  int64_t first = k * dilation - padding;  // output 0's
  const int64_t last = min64(in - 1, (out - 1) * stride + first);
  if (first < 0) {  // the first output whose input lies inside
    first += (-first + stride - 1) / stride * stride;
  }
  return {first, last, stride};
}

// A dim's input positions of a tap in 32 bits (the plan keeps sizes below 2^31): first, first +
// stride, ... up to last (none where first > last).
struct Span {
  int first, last, stride;
};
__device__ __forceinline__ Span span_of(TapPositions t) {
  return {static_cast<int>(t.first), static_cast<int>(t.last), static_cast<int>(t.stride)};
}
__device__ __forceinline__ bool span_contains(Span t, int i) {
  return i >= t.first && i <= t.last && (t.stride == 1 || (i - t.first) % t.stride == 0);
}
// Bits [lo, hi) (0 <= lo, hi <= 32: the shifts in 64 bits).
__device__ __forceinline__ unsigned run_mask(int lo, int hi) {
  return static_cast<unsigned>(((uint64_t{1} << hi) - 1u) & ~((uint64_t{1} << lo) - 1u));
}
// Of `count` (<= 32) positions from i0, those in t: bit u for i0 + u.
__device__ __forceinline__ unsigned span_mask(Span t, int i0, int count) {
  const int first = t.first - i0, last = t.last - i0;
  if (t.stride == 1) {
    return run_mask(min(max(first, 0), count), min(max(last + 1, 0), count));
  }
  unsigned mask = 0u;
  for (int u = max(first, 0); u <= min(last, count - 1); ++u) {
    mask |= (u - first) % t.stride == 0 ? 1u << u : 0u;
  }
  return mask;
}

// exact_sums_kernel's shape: warps per block, rows a lane loads at once (its loads in flight),
// and taps per dim (D and H) a pass keeps sums for.
constexpr int kSumWarps = kWarpsPerBlock;
constexpr int kSumRows = 16;
constexpr int kSumGroup = 3;
constexpr int kSumPairs = kSumGroup * kSumGroup;

// Whether each H tap's rows of a full batch of kSumRows are none or one run [lo, hi) that starts
// within the first kSumEdge rows and ends within the last kSumEdge (the usual stride-1 taps of a
// batch inside the input): exact_sums_kernel then takes each tap's sum as the difference of two
// values of the rows' running sum, where it otherwise adds every row into every tap's sum it
// belongs to (a select and an add per row and tap: the kernel's instructions, 0.019 ms at the
// Conv3d headline, H100, 2026-11-27).
constexpr int kSumEdge = 3;
__device__ __forceinline__ bool edge_runs(const unsigned (&masks)[kSumGroup]) {
  bool runs = true;
#pragma unroll
  for (int j = 0; j < kSumGroup; ++j) {
    const int lo = max(__ffs(static_cast<int>(masks[j])) - 1, 0);  // (0 for no rows)
    const int hi = kWarpSize - __clz(static_cast<int>(masks[j]));
    runs = runs && (masks[j] == 0u ||
                    (masks[j] == run_mask(lo, hi) && lo <= kSumEdge && hi >= kSumRows - kSumEdge));
  }
  return runs;
}

// out[(nb * d_chunks + chunk) * (taps + 1) + k]: block (nb = n * C_in + b, chunk)'s sums over
// its planes [D * chunk / d_chunks, D * (chunk + 1) / d_chunks) of x[n, b]: X's for tap k <
// taps, x's own at k = taps. A lane per input column (32 columns a pass), each warp every
// kSumWarps-th unit of a plane's kSumRows rows: the unit's values (their loads in flight
// together) in double into its sums of the rows of each H tap and of all rows, those into the
// warp's sums per (D tap, H tap) pair where the plane is in the D tap, and of all; at the pass's
// end the warps' sums per lane (in warp order), then per W tap the lanes' (in column order),
// added into the block's sums in shared memory, pass after pass. A pass keeps kSumGroup x
// kSumGroup (D, H) tap pairs: one pass over x for kernels up to 3 x 3 along D and H with rows
// up to 32, more passes for more taps or longer rows. (The first version, a lane per row
// summing its W taps, then the sums along H and D from those rows in global memory: 0.046 ms at
// the Conv3d headline, H100, 2026-11-27.)
__global__ void __launch_bounds__(kThreads, 3)
    exact_sums_kernel(const KernelArgs a, int d_chunks, double* out) {
  const conv::Conv3dShape& s = a.p.conv;
  __shared__ double warp_sums[kSumWarps][kSumPairs + 1][kWarpSize];  // (+ 1: all of x)
  __shared__ double lane_sums[kSumPairs + 1][kWarpSize];
  __shared__ Span pass_spans[2][kSumGroup];  // the pass's D taps, then its H taps
  extern __shared__ double block_sums[];     // [taps + 1]
  const int kD = static_cast<int>(s.kD), kH = static_cast<int>(s.kH), kW = static_cast<int>(s.kW);
  const int H = static_cast<int>(s.H), W = static_cast<int>(s.W), taps = kD * kH * kW;
  const int nb = static_cast<int>(blockIdx.x) / d_chunks;
  const int chunk = static_cast<int>(blockIdx.x) % d_chunks;
  const int d_begin = static_cast<int>(s.D * chunk / d_chunks);
  const int d_end = static_cast<int>(s.D * (chunk + 1) / d_chunks);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  for (int k = static_cast<int>(threadIdx.x); k <= taps; k += kThreads) {
    block_sums[k] = 0.0;
  }
  const int batches = (H + kSumRows - 1) / kSumRows;
  const int units = (d_end - d_begin) * batches;
  const float* x = static_cast<const float*>(a.p.x) + static_cast<int64_t>(nb) * s.D * H * W;
  for (int w0 = 0; w0 < W; w0 += kWarpSize) {
    const int w = w0 + lane, columns = min(kWarpSize, W - w0);
    for (int td0 = 0; td0 < kD; td0 += kSumGroup) {
      for (int th0 = 0; th0 < kH; th0 += kSumGroup) {
        if (threadIdx.x < kSumGroup) {  // (taps past the kernel's: empty spans)
          const int t = td0 + static_cast<int>(threadIdx.x);
          pass_spans[0][threadIdx.x] =
              t < kD
                  ? span_of(tap_positions(t, s.D, s.Do, s.stride[0], s.padding[0], s.dilation[0]))
                  : Span{1, 0, 1};
        } else if (threadIdx.x < 2 * kSumGroup) {
          const int t = th0 + static_cast<int>(threadIdx.x) - kSumGroup;
          pass_spans[1][threadIdx.x - kSumGroup] =
              t < kH
                  ? span_of(tap_positions(t, s.H, s.Ho, s.stride[1], s.padding[1], s.dilation[1]))
                  : Span{1, 0, 1};
        }
        __syncthreads();
        double sums[kSumGroup][kSumGroup] = {};
        double all = 0.0;
        for (int unit = warp; unit < units; unit += kSumWarps) {
          const int d = d_begin + unit / batches, h0 = unit % batches * kSumRows;
          const int count = min(kSumRows, H - h0);
          const float* row = x + (static_cast<int64_t>(d) * H + h0) * W + min(w, W - 1);
          float v[kSumRows];
#pragma unroll
          for (int u = 0; u < kSumRows; ++u) {
            v[u] = u < count && w < W ? __ldg(row + u * W) : 0.0f;
          }
          unsigned masks[kSumGroup];
#pragma unroll
          for (int j = 0; j < kSumGroup; ++j) {
            masks[j] = span_mask(pass_spans[1][j], h0, count);
          }
          double rows[kSumGroup] = {}, all_rows = 0.0;  // in row order
          if (count == kSumRows && edge_runs(masks)) {
            // The running sum after the first 1, 2, 3 rows and after the first 13, 14, 15 (and
            // all 16): each tap's sum is the difference of two of them.
            static_assert(kSumEdge == 3 && kSumRows == 16, "the running sums kept below");
            double after[2 * kSumEdge];
#pragma unroll
            for (int u = 0; u < kSumRows; ++u) {
              all_rows += static_cast<double>(v[u]);
              if (u < kSumEdge) {
                after[u] = all_rows;
              } else if (u >= kSumRows - kSumEdge - 1 && u < kSumRows - 1) {
                after[u - (kSumRows - 2 * kSumEdge - 1)] = all_rows;
              }
            }
#pragma unroll
            for (int j = 0; j < kSumGroup; ++j) {
              const int lo = __ffs(static_cast<int>(masks[j])) - 1;  // the run [lo, hi)
              const int hi = kWarpSize - __clz(static_cast<int>(masks[j]));
              const double first = lo == 0   ? 0.0
                                   : lo == 1 ? after[0]
                                   : lo == 2 ? after[1]
                                             : after[2];
              const double last = hi == 16   ? all_rows
                                  : hi == 15 ? after[5]
                                  : hi == 14 ? after[4]
                                             : after[3];
              rows[j] = masks[j] != 0u ? last - first : 0.0;
            }
          } else {
#pragma unroll
            for (int u = 0; u < kSumRows; ++u) {
              const double value = static_cast<double>(v[u]);  // (converted once for every tap)
              all_rows += value;
#pragma unroll
              for (int j = 0; j < kSumGroup; ++j) {
                rows[j] += (masks[j] >> u) & 1u ? value : 0.0;
              }
            }
          }
          all += all_rows;
#pragma unroll
          for (int i = 0; i < kSumGroup; ++i) {
            const bool in_tap = span_contains(pass_spans[0][i], d);
#pragma unroll
            for (int j = 0; j < kSumGroup; ++j) {
              sums[i][j] += in_tap ? rows[j] : 0.0;
            }
          }
        }
#pragma unroll
        for (int i = 0; i < kSumGroup; ++i) {
#pragma unroll
          for (int j = 0; j < kSumGroup; ++j) {
            warp_sums[warp][i * kSumGroup + j][lane] = sums[i][j];
          }
        }
        warp_sums[warp][kSumPairs][lane] = all;
        __syncthreads();
        for (int e = static_cast<int>(threadIdx.x); e < (kSumPairs + 1) * kWarpSize;
             e += kThreads) {
          double total = 0.0;
          for (int v = 0; v < kSumWarps; ++v) {
            total += warp_sums[v][e / kWarpSize][e % kWarpSize];
          }
          lane_sums[e / kWarpSize][e % kWarpSize] = total;
        }
        __syncthreads();
        // Per (pair, W tap) its columns' sums in column order; x's total once per column chunk
        // (the first pass's: every pass sums all of x).
        const bool totals = td0 == 0 && th0 == 0;
        for (int e = static_cast<int>(threadIdx.x); e < kSumPairs * kW + (totals ? 1 : 0);
             e += kThreads) {
          const int pair = e < kSumPairs * kW ? e / kW : kSumPairs;
          const int td = td0 + pair / kSumGroup, th = th0 + pair % kSumGroup, tw = e % kW;
          if (pair < kSumPairs && (td >= kD || th >= kH)) {
            continue;
          }
          const unsigned mask = pair < kSumPairs
                                    ? span_mask(span_of(tap_positions(tw, s.W, s.Wo, s.stride[2],
                                                                      s.padding[2], s.dilation[2])),
                                                w0, columns)
                                    : run_mask(0, columns);
          double total = 0.0;
          for (int l = 0; l < kWarpSize; ++l) {
            total += (mask >> l) & 1u ? lane_sums[pair][l] : 0.0;
          }
          block_sums[pair < kSumPairs ? (td * kH + th) * kW + tw : taps] += total;
        }
        __syncthreads();  // (the pass's shared sums free for the next)
      }
    }
  }
  double* dst = out + (static_cast<int64_t>(nb) * d_chunks + chunk) * (taps + 1);
  for (int k = static_cast<int>(threadIdx.x); k <= taps; k += kThreads) {
    dst[k] = block_sums[k];
  }
}

// sums[nb * (taps + 1) + k]: the D chunks' partial sums (exact_sums_kernel), in chunk order.
__global__ void __launch_bounds__(kThreads)
    exact_sums_chunks_kernel(const KernelArgs a, int d_chunks, const double* partials,
                             double* sums) {
  const conv::Conv3dShape& s = a.p.conv;
  const int64_t row = conv::input_sums_row(s);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < s.N * s.C_in * row) {
    const double* part = partials + i / row * d_chunks * row + i % row;
    double total = 0.0;
    for (int c = 0; c < d_chunks; ++c) {
      total += part[c * row];
    }
    sums[i] = total;
  }
}

// means[c] = m0[n, c] for every channel of sample n (the finalize's block): a warp per channel,
// its lanes over the weight's row, then a butterfly. (Its own kernel, a warp per (n, c): 0.003
// ms at the Conv3d headline, H100, 2026-11-26, and a launch.)
__device__ __forceinline__ void exact_channel_means(const KernelArgs& a, int64_t n, double* means) {
  const conv::Conv3dShape& s = a.p.conv;
  const int64_t K = a.plan.K;  // c_in_g * taps, the weight's row
  const int64_t taps = K / a.plan.c_in_g;
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t c = threadIdx.x / kWarpSize; c < s.C_out; c += kWarpsPerBlock) {
    const int64_t g = c / a.plan.c_out_g;
    const float* w = static_cast<const float*>(a.p.weight) + c * K;
    const double* X = a.exact_sums + (n * s.C_in + g * a.plan.c_in_g) * conv::input_sums_row(s);
    double sum = 0.0;
    for (int64_t j = lane; j < K; j += kWarpSize) {
      sum += static_cast<double>(__ldg(w + j)) * X[conv::input_sums_column(j, taps)];
    }
    sum = warp_allreduce_sum(sum);
    if (lane == 0) {
      means[c] = sum / static_cast<double>(s.Do * s.Ho * s.Wo);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Finalize: per sample, the tiles' moments into the statistics and out[n].

template <typename T>
__global__ void __launch_bounds__(kThreads) onepass_finalize_kernel(const KernelArgs a) {
  using stat_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  const conv::OnePassPlan& plan = a.plan;
  const int64_t cb = plan.cb;
  extern __shared__ __align__(16) unsigned char smem[];
  // (The 16-byte entries first: every one stays aligned.)
  auto* channel_moments = reinterpret_cast<norm::Moments*>(smem);                 // [C_out]
  auto* reduce = reinterpret_cast<double2*>(channel_moments + s.C_out);           // [warps]
  auto* group_stats = reinterpret_cast<double2*>(reduce + kWarpsPerBlock);        // [G]: mean, rstd
  double* exact_means = reinterpret_cast<double*>(group_stats + a.p.num_groups);  // [C_out]
  const int64_t n = blockIdx.x;
  const T* conv_bias = static_cast<const T*>(a.p.conv_bias);
  const T* gn_weight = static_cast<const T*>(a.p.gn_weight);
  const T* gn_bias = static_cast<const T*>(a.p.gn_bias);
  // Thread c's channel's GroupNorm affine, read now so that its latency passes with the
  // moments' (channels past the block's threads read theirs at the end).
  const int64_t own_channel = threadIdx.x;
  double own_weight = 1.0, own_bias = 0.0;
  if (own_channel < s.C_out) {
    own_weight = gn_weight != nullptr ? ScalarOps<T>::to_double(gn_weight[own_channel]) : 1.0;
    own_bias = gn_bias != nullptr ? ScalarOps<T>::to_double(gn_bias[own_channel]) : 0.0;
  }
  // Launched as the moments kernel's programmatic dependent (launch_kernels), the block may
  // start before that kernel ends: it reads the affine above meanwhile, then waits here for
  // the kernel before it (the moments, or x's sums) to end and its writes to show. (Launched
  // as usual, this returns at once.)
  wait_for_prerequisite_grid();
  if constexpr (std::is_same_v<T, float>) {  // (x's sums: float32 only)
    if (a.exact_sums != nullptr) {
      exact_channel_means(a, n, exact_means);
      __syncthreads();
    }
  }

  // The tensor-core kernel's moments: per channel, one pass over its tiles' groups'
  // (deviations, shift, squares, count) ("parts"), in double, about a reference r (the shift of
  // the first part that holds positions: near the data, so S2 - S1^2 / N below keeps M2's
  // digits): a part's y sum to S1 += deviations + count * d and their squares about r to
  // S2 += squares + d * (2 * deviations + count * d), d = shift - r; then mean = r + S1 / N and
  // M2 = S2 - S1^2 / N (about exact means m: S2 - 2 (m - r) S1 + N (m - r)^2). A warp takes
  // kFinalizeChannels channels at once, its lanes over the parts, every load in flight at once
  // (kFinalizeBatch a lane and channel), then butterflies. (Two passes, the mean first, a warp
  // per channel, its channels one after another, the affine read per GroupNorm group at the
  // end: 9.8-10.0 us at the Conv3d headline, H200, 2026-11-29; 4 channels at once, two passes,
  // the affine read first: 8.6 us; one pass: 7.6-7.8 us; the 4 lanes' last steps at once:
  // 6.9-7.0 us.)
  if (plan.tensor_cores) {
    constexpr int kFinalizeBatch = 4;
    constexpr int kFinalizeChannels = 4;
    const int lane = threadIdx.x % kWarpSize;
    const int c_out = static_cast<int>(s.C_out), c_out_g = static_cast<int>(plan.c_out_g);
    const int chunk_channels = static_cast<int>(cb), chunks = static_cast<int>(plan.chunks);
    // Part j of a channel: group j % groups of box j / groups, cb float4s apart.
    const int part_count = static_cast<int>(plan.boxes) * conv::kOnePassTensorCoreWarpGroups;
    for (int c0 = (threadIdx.x / kWarpSize) * kFinalizeChannels; c0 < c_out;
         c0 += kWarpsPerBlock * kFinalizeChannels) {
      const float4* parts[kFinalizeChannels];
#pragma unroll
      for (int i = 0; i < kFinalizeChannels; ++i) {
        const int c = min(c0 + i, c_out - 1);  // (past C_out: the last channel again, unused)
        const int g = c / c_out_g, chunk = (c % c_out_g) / chunk_channels;
        const int local = (c % c_out_g) % chunk_channels;
        parts[i] = a.group_partials +
                   ((static_cast<int64_t>(g) * chunks + chunk) * s.N + n) * part_count * cb + local;
      }
      // Lane i writes channel c0 + i: its conv bias, read now.
      const int own = c0 + lane;
      const double bias = lane < kFinalizeChannels && own < c_out && conv_bias != nullptr
                              ? ScalarOps<T>::to_double(conv_bias[own])
                              : 0.0;
      double count[kFinalizeChannels] = {}, s1[kFinalizeChannels] = {}, s2[kFinalizeChannels] = {};
      double reference[kFinalizeChannels] = {};
      for (int first = 0; first < part_count; first += kFinalizeBatch * kWarpSize) {
        float4 m[kFinalizeChannels][kFinalizeBatch];
#pragma unroll
        for (int b = 0; b < kFinalizeBatch; ++b) {
          const int j = first + b * kWarpSize + lane;
#pragma unroll
          for (int i = 0; i < kFinalizeChannels; ++i) {
            m[i][b] = j < part_count ? parts[i][static_cast<int64_t>(j) * cb]
                                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          }
        }
        if (first == 0) {  // the references: the first parts with positions
#pragma unroll
          for (int i = 0; i < kFinalizeChannels; ++i) {
            float r = 0.0f;
            bool found = false;
#pragma unroll
            for (int b = 0; b < kFinalizeBatch; ++b) {
              const unsigned holders = __ballot_sync(0xffffffffu, m[i][b].w > 0.0f);
              const float shift = __shfl_sync(0xffffffffu, m[i][b].y, max(__ffs(holders) - 1, 0));
              r = !found && holders != 0u ? shift : r;
              found = found || holders != 0u;
            }
            reference[i] = r;
          }
        }
#pragma unroll
        for (int i = 0; i < kFinalizeChannels; ++i) {
#pragma unroll
          for (int b = 0; b < kFinalizeBatch; ++b) {
            // (The padding entries are zeros: count 0, no term.)
            const double deviations = m[i][b].x, squares = m[i][b].z, part_n = m[i][b].w;
            const double d = part_n > 0.0 ? static_cast<double>(m[i][b].y) - reference[i] : 0.0;
            count[i] += part_n;
            s1[i] += deviations + part_n * d;
            s2[i] += squares + d * (2.0 * deviations + part_n * d);
          }
        }
      }
      // Lane i takes channel c0 + i's sums (selects: one code path for the 4 lanes).
      double own_count = 0.0, own_s1 = 0.0, own_s2 = 0.0, own_reference = 0.0;
#pragma unroll
      for (int i = 0; i < kFinalizeChannels; ++i) {
        count[i] = warp_allreduce_sum(count[i]);
        s1[i] = warp_allreduce_sum(s1[i]);
        s2[i] = warp_allreduce_sum(s2[i]);
        own_count = lane == i ? count[i] : own_count;
        own_s1 = lane == i ? s1[i] : own_s1;
        own_s2 = lane == i ? s2[i] : own_s2;
        own_reference = lane == i ? reference[i] : own_reference;
      }
      if (lane < kFinalizeChannels && own < c_out) {
        const double mean_offset = own_s1 / own_count;  // (mean - reference)
        double mean = own_reference + mean_offset;
        double m2 = own_s2 - own_s1 * mean_offset;
        if (a.exact_sums != nullptr) {
          mean = exact_means[own];
          const double e = mean - own_reference;
          m2 = own_s2 - 2.0 * e * own_s1 + own_count * e * e;
        }
        channel_moments[own] = norm::Moments{mean + bias, m2 < 0.0 ? 0.0 : m2};  // (keeps NaN)
        static_cast<stat_t*>(a.p.channel_mean)[n * s.C_out + own] =
            static_cast<stat_t>(mean + bias);
      }
    }
  }
  // The direct kernel's: per channel, 8 lanes (4 channels a warp at once), two passes over its
  // boxes' (mean, M2)
  // (lane l of the 8 takes boxes l, l + 8, ...; butterflies sum the lanes' parts): the
  // channel's mean from the count-weighted sum, then M2 about it as the boxes' M2 plus
  // count * (box mean - mean)^2. Every load of a pass is in flight at once, and no division
  // but the mean's. (One thread per channel walking its 44 boxes one dependent update after
  // another took 26 us at the Conv3d headline; a warp per channel, its 3 channels one after
  // another, 9.3 us.)
  constexpr int kChannelsPerWarp = 4;
  constexpr int kLanesPerChannel = kWarpSize / kChannelsPerWarp;
  const int lane = threadIdx.x % kWarpSize;
  const int box0 = lane % kLanesPerChannel;
  for (int64_t first = (threadIdx.x / kWarpSize) * kChannelsPerWarp;
       !plan.tensor_cores && first < s.C_out; first += kWarpsPerBlock * kChannelsPerWarp) {
    const int64_t c = first + lane / kLanesPerChannel;
    const bool active = c < s.C_out;  // (every lane takes part in the butterflies)
    const int64_t g = c / plan.c_out_g;
    const int64_t chunk = (c % plan.c_out_g) / cb;
    const int64_t local = (c % plan.c_out_g) % cb;
    const double2* const parts =
        a.partials + ((g * plan.chunks + chunk) * s.N + n) * plan.boxes * cb + local;
    double count = 0.0, sum = 0.0;
    for (int64_t box = box0; active && box < plan.boxes; box += kLanesPerChannel) {
      const double box_n = static_cast<double>(box_count(plan, s, box));
      count += box_n;
      sum += box_n * parts[box * cb].x;
    }
    sum = subwarp_allreduce_sum(sum, kLanesPerChannel);
    count = subwarp_allreduce_sum(count, kLanesPerChannel);
    // (M2 about any centre is the boxes' M2 plus count * (box mean - centre)^2: exact means
    // leave it M2 about the channel's mean.)
    const double mean = a.exact_sums != nullptr && active ? exact_means[c] : sum / count;
    double m2 = 0.0;
    for (int64_t box = box0; active && box < plan.boxes; box += kLanesPerChannel) {
      const double2 part = parts[box * cb];
      const double d = part.x - mean;
      m2 += part.y + static_cast<double>(box_count(plan, s, box)) * d * d;
    }
    m2 = subwarp_allreduce_sum(m2, kLanesPerChannel);
    if (active && box0 == 0) {
      const double bias = conv_bias != nullptr ? ScalarOps<T>::to_double(conv_bias[c]) : 0.0;
      channel_moments[c] = norm::Moments{mean + bias, m2};
      static_cast<stat_t*>(a.p.channel_mean)[n * s.C_out + c] = static_cast<stat_t>(mean + bias);
    }
  }
  __syncthreads();

  // GroupNorm's groups: equal-sized channels combined (a thread per group), then each
  // channel's term of out[n] (a thread per channel), summed over the block.
  const int64_t G = a.p.num_groups;
  const int64_t Cg = s.C_out / G;
  const double spatial = static_cast<double>(s.Do * s.Ho * s.Wo);
  for (int64_t gg = threadIdx.x; gg < G; gg += kThreads) {
    const norm::Moments m = norm::combine_equal_parts(&channel_moments[gg * Cg], Cg, spatial);
    const double rstd = norm::rstd_from_m2(m.m2, spatial * static_cast<double>(Cg), a.p.eps);
    static_cast<stat_t*>(a.p.mean)[n * G + gg] = static_cast<stat_t>(m.mean);
    static_cast<stat_t*>(a.p.rstd)[n * G + gg] = static_cast<stat_t>(rstd);
    group_stats[gg] = make_double2(m.mean, rstd);
  }
  __syncthreads();
  double total = 0.0;
  for (int64_t c = threadIdx.x; c < s.C_out; c += kThreads) {
    const double w = c == own_channel
                         ? own_weight
                         : (gn_weight != nullptr ? ScalarOps<T>::to_double(gn_weight[c]) : 1.0);
    const double b = c == own_channel
                         ? own_bias
                         : (gn_bias != nullptr ? ScalarOps<T>::to_double(gn_bias[c]) : 0.0);
    const double2 group = group_stats[c / Cg];
    total += norm::group_norm_mean_channel_term(channel_moments[c].mean - group.x, group.y, w, b);
  }
  const double2 sum = block_reduce_sum(make_double2(total, 0.0), reduce);
  if (threadIdx.x == 0) {
    static_cast<T*>(a.p.out)[n] = ScalarOps<T>::from_double(sum.x / static_cast<double>(s.C_out));
  }
}

struct ExactMeansWorkspace {
  int d_chunks;      // exact_sums_kernel's blocks per (n, b)
  double* partials;  // [N * C_in][d_chunks][taps + 1] where d_chunks > 1
  double* sums;      // p.input_sums where the caller keeps them, else the workspace's
  size_t bytes;
};

// After the moments' partials (plan.workspace_bytes). The sums' D chunks: one per (n, b) where
// N * C_in gives the device two blocks per SM, else enough for that.
ExactMeansWorkspace carve_exact_means(const conv::Conv3dGroupNormMeanParams& p,
                                      const conv::OnePassPlan& plan, void* base) {
  const conv::Conv3dShape& s = p.conv;
  WorkspaceCarver carver(base);
  carver.take<char>(static_cast<int64_t>(plan.workspace_bytes));
  ExactMeansWorkspace ws{};
  const int64_t planes = s.N * s.C_in, row = conv::input_sums_row(s);
  const int64_t sms = std::max(current_device_info().multiprocessors, 1);
  ws.d_chunks = static_cast<int>(std::clamp<int64_t>(ceil_div(2 * sms, planes), 1, s.D));
  ws.partials = ws.d_chunks > 1 ? carver.take<double>(planes * ws.d_chunks * row) : nullptr;
  ws.sums = carver.take<double>(planes * row);
  if (p.input_sums != nullptr) {
    ws.sums = p.input_sums;
  }
  ws.bytes = carver.bytes();
  return ws;
}

// Whether the forward computes exact channel means: the caller keeps x's sums, or asked for
// and the tensor-core kernel runs.
bool wants_exact_means(const conv::Conv3dGroupNormMeanParams& p, const conv::OnePassPlan& plan) {
  return p.input_sums != nullptr || (p.exact_channel_means && plan.tensor_cores);
}

cudaError_t launch_exact_sums(const KernelArgs& args, const ExactMeansWorkspace& ws,
                              cudaStream_t stream) {
  const conv::Conv3dShape& s = args.p.conv;
  const int64_t row = conv::input_sums_row(s);
  const int64_t sum_blocks = s.N * s.C_in * ws.d_chunks;
  const int64_t chunk_blocks = ceil_div(s.N * s.C_in * row, static_cast<int64_t>(kThreads));
  if (!grid_fits(sum_blocks) || !grid_fits(chunk_blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  const size_t block_sums_bytes = static_cast<size_t>(row) * sizeof(double);
  exact_sums_kernel<<<static_cast<unsigned>(sum_blocks), kThreads, block_sums_bytes, stream>>>(
      args, ws.d_chunks, ws.d_chunks > 1 ? ws.partials : ws.sums);
  FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  if (ws.d_chunks > 1) {
    exact_sums_chunks_kernel<<<static_cast<unsigned>(chunk_blocks), kThreads, 0, stream>>>(
        args, ws.d_chunks, ws.partials, ws.sums);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------
// Host side.

// This file's instance of sm90a_image_probe_kernel (Sm90aImageQuery).
struct OnePassFile {};

// Whether the tensor-core kernel runs its wgmma products on the current device: the device
// runs this file's sm_90a image, and FUSED_OPS_ONEPASS_WGMMA is not "0" (which keeps mma.sync,
// for comparisons). Read once per device (Sm90aImageQuery).
bool onepass_wgmma_available() {
  static Sm90aImageQuery query(reinterpret_cast<const void*>(sm90a_image_probe_kernel<OnePassFile>),
                               "FUSED_OPS_ONEPASS_WGMMA");
  return query();
}

conv::OnePassPlan plan_for(const conv::Conv3dGroupNormMeanParams& p) {
  const DeviceInfo device = current_device_info();
  return conv::plan_conv3d_group_norm_mean_onepass(p.conv, p.dtype, device.shared_memory,
                                                   device.tensor_cores, onepass_wgmma_available());
}

// Launches `moments` on a persistent grid (the blocks that fit on the device at once), then
// the finalize kernel.
template <typename T, typename Kernel>
cudaError_t launch_kernels(Kernel moments, const KernelArgs& args, cudaStream_t stream) {
  const size_t smem = args.plan.smem_bytes;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(
      moments, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int device = 0, sms = 0, per_sm = 0;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  FUSED_OPS_RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  FUSED_OPS_RETURN_IF_CUDA_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moments, kThreads, smem));
  const int64_t resident = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  moments<<<static_cast<unsigned>(min64(args.plan.tiles, resident)), kThreads, smem, stream>>>(
      args);
  FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  if (args.exact_sums != nullptr) {
    const ExactMeansWorkspace ws = carve_exact_means(args.p, args.plan, args.partials);
    FUSED_OPS_RETURN_IF_CUDA_ERROR(launch_exact_sums(args, ws, stream));
  }
  // The channels' moments, the block sum's scratch, the groups' statistics, the exact means.
  const size_t finalize_smem =
      static_cast<size_t>(args.p.conv.C_out) * (sizeof(norm::Moments) + sizeof(double)) +
      kWarpsPerBlock * sizeof(double2) + static_cast<size_t>(args.p.num_groups) * sizeof(double2);
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(onepass_finalize_kernel<T>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      static_cast<int>(finalize_smem)));
  if (!grid_fits(args.p.conv.N)) {
    return cudaErrorInvalidConfiguration;
  }
  // A programmatic dependent of the kernel before it: after the tensor-core kernel, its blocks
  // may start as that kernel's last ones end (allow_dependent_grid; the finalize reads the
  // affine, then waits: wait_for_prerequisite_grid); after a kernel that allows nothing (the
  // direct kernel, or x's sums in the training forward) it starts when that kernel ends, as an
  // ordinary launch. Not in stream capture (an ordinary launch there), and not with
  // FUSED_OPS_ONEPASS_DEPENDENT_FINALIZE=0 (for comparisons).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaStreamIsCapturing(stream, &capture));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(args.p.conv.N));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = finalize_smem;
  config.stream = stream;
  cudaLaunchAttribute dependent{};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  if (capture == cudaStreamCaptureStatusNone &&
      !env_switch_off("FUSED_OPS_ONEPASS_DEPENDENT_FINALIZE")) {
    config.attrs = &dependent;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, onepass_finalize_kernel<T>, args);
}

// x's tensor map for the tensor-core kernel's footprint copies (OnePassPlan::tma_footprint): 5-d
// (W, H, D, C_in, N), innermost first; boxes (row_pitch, FH, FD, c_in_g, 1), unswizzled, zeros
// outside x. False where x is not 16-byte aligned or the driver has no encoder (the kernel
// then loads the same layout by asynchronous copies).
bool make_footprint_map(const conv::Conv3dGroupNormMeanParams& p, const conv::OnePassPlan& plan,
                        CUtensorMap* map) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr || reinterpret_cast<uintptr_t>(p.x) % 16 != 0) {
    return false;
  }
  const conv::Conv3dShape& s = p.conv;
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(s.W), static_cast<cuuint64_t>(s.H),
                              static_cast<cuuint64_t>(s.D), static_cast<cuuint64_t>(s.C_in),
                              static_cast<cuuint64_t>(s.N)};
  const auto strides = dense_float_strides(dims);
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(plan.row_pitch),
                             static_cast<cuuint32_t>(plan.FH), static_cast<cuuint32_t>(plan.FD),
                             static_cast<cuuint32_t>(plan.c_in_g), 1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, const_cast<void*>(p.x), dims,
                strides.data(), box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The tensor-core kernel with NT n8 tiles, its products on wgmma or mma.sync.
template <int NT>
cudaError_t launch_tensor_core_kernel(const KernelArgs& args, bool wgmma, cudaStream_t stream) {
  // (The kernel's slots are its warps' m16 tiles: a plan made for the other products would
  // leave positions without a slot.)
  if (args.plan.capacity != conv::onepass_tensor_core_capacity(wgmma)) {
    return cudaErrorInvalidValue;
  }
  // (FUSED_OPS_ONEPASS_WINDOWS=0: the plan's windows off, for comparisons.)
  if (wgmma && args.plan.windows && !env_switch_off("FUSED_OPS_ONEPASS_WINDOWS")) {
    return launch_kernels<float>(onepass_tensor_core_kernel<NT, true, true>, args, stream);
  }
  return wgmma ? launch_kernels<float>(onepass_tensor_core_kernel<NT, true, false>, args, stream)
               : launch_kernels<float>(onepass_tensor_core_kernel<NT, false, false>, args, stream);
}

template <typename T>
struct OnePassFamily {
  static size_t workspace_bytes(const conv::Conv3dGroupNormMeanParams& p) {
    const conv::OnePassPlan plan = plan_for(p);
    return wants_exact_means(p, plan) ? carve_exact_means(p, plan, nullptr).bytes
                                      : plan.workspace_bytes;
  }
  static cudaError_t launch(const conv::Conv3dGroupNormMeanParams& p, void* workspace,
                            cudaStream_t stream) {
    const conv::OnePassPlan plan = plan_for(p);
    KernelArgs args{
        p,
        plan,
        static_cast<double2*>(workspace),
        static_cast<float4*>(workspace),
        full_input_rows(p.conv, plan.FW, plan.boxes_w, p.x),
        wants_exact_means(p, plan) ? carve_exact_means(p, plan, workspace).sums : nullptr};
    // (FUSED_OPS_ONEPASS_TMA=0: the same layout by asynchronous copies, for comparisons.)
    args.tma_footprint = plan.tma_footprint && onepass_wgmma_available() &&
                         !env_switch_off("FUSED_OPS_ONEPASS_TMA") &&
                         make_footprint_map(p, plan, &args.x_map);
    // (The exact means' kernels read float32: x's sums only for float32.)
    if (!args.plan.supported || (p.input_sums != nullptr && !std::is_same_v<T, float>)) {
      return cudaErrorInvalidValue;
    }
    if constexpr (std::is_same_v<T, float>) {
      if (args.plan.tensor_cores) {
        const bool wgmma = onepass_wgmma_available();
        switch (args.plan.cb) {
          case 8:
            return launch_tensor_core_kernel<1>(args, wgmma, stream);
          case 16:
            return launch_tensor_core_kernel<2>(args, wgmma, stream);
          case 24:
            return launch_tensor_core_kernel<3>(args, wgmma, stream);
          default:
            return cudaErrorInvalidValue;
        }
      }
    }
    switch (args.plan.cb) {
      case 8:
        return launch_kernels<T>(onepass_direct_kernel<T, 8>, args, stream);
      case 16:
        if constexpr (!std::is_same_v<T, double>) {
          return launch_kernels<T>(onepass_direct_kernel<T, 16>, args, stream);
        }
        return cudaErrorInvalidValue;
      case 24:
        if constexpr (!std::is_same_v<T, double>) {
          return launch_kernels<T>(onepass_direct_kernel<T, 24>, args, stream);
        }
        return cudaErrorInvalidValue;
      default:
        return cudaErrorInvalidValue;
    }
  }
};

bool onepass_supported(const conv::Conv3dGroupNormMeanParams& p) { return plan_for(p).supported; }

const char* onepass_products_kernel() {
  if (!current_device_info().tensor_cores) {
    return "";
  }
  return onepass_wgmma_available() ? "wgmma" : "mma_sync";
}

}  // namespace
}  // namespace gpu

namespace conv {

const OnePassCudaKernel conv3d_group_norm_mean_onepass_cuda{
    gpu::onepass_supported, gpu::make_cuda_kernel<Conv3dGroupNormMeanParams, gpu::OnePassFamily>(),
    gpu::onepass_products_kernel};

}  // namespace conv
}  // namespace fused_ops
