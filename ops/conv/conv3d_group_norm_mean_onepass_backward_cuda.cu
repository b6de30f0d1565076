// One-pass CUDA backward of conv3d_group_norm_mean: every gradient from the forward's
// statistics, the convolution's output recomputed where it is needed and never stored.
//
// The gradient of out[n] with respect to the convolution's output y (bias included) is affine
// in y per (n, c) (GroupNorm's backward, group_norm_math.h, with the gradient reaching each
// normalised element the constant g[n] / (C * S), S = Do * Ho * Wo):
//   dy[n, c, s] = c2[n, g] * y[n, c, s] + (rstd[n, g] * w[c] * g[n] / (C * S) + c3[n, g])
//              = alpha[n, c] * (y[n, c, s] - m[n, c]) + gamma[n, c],
// with alpha = c2, gamma = c2 * m + rstd * w * g[n] / (C * S) + c3 and m[n, c] the channel
// mean. The kernels evaluate it centred, as alpha * (y0 - m0) + gamma with y0 the convolution
// without its bias and m0 = m - bias, so that a large common offset of y does not cancel.
// Summed over s, the centred term vanishes: dconv_bias[c] = sum_n S * gamma[n, c]; the
// GroupNorm affine gradients need the statistics only:
//   dgn_bias[c] = sum_n g[n] / C,  dgn_weight[c] = sum_n g[n] / C * (m - mean[n, g]) * rstd.
//
// 1. backward_coefficients_kernel: (alpha, m0, gamma) per (n, c), in the accumulation type;
//    x's means from the forward's sums where the lag and Gram kernels want them; and, in blocks
//    of their own, the bias and GroupNorm affine gradients (a warp per channel: the statistics
//    and gamma, recomputed in double, are all they need).
// 2. onepass_backward_kernel: a persistent grid of 256-thread blocks walks the tiles (sample n,
//    conv group g, box of BD x BH x BW input positions; conv_kernels.h: OnePassBackwardPlan)
//    in a fixed assignment. Per tile, the block
//      * lists the region of output positions whose gradient reaches the box (per dim, the s
//        with s * stride - padding + k * dilation inside the box for some tap k), each with its
//        offset in the region's input footprint, and those the box owns (their first tap inside
//        the input lies in the box: every output with a tap inside the input has exactly one
//        owner; one without contributes nothing);
//      * loads the footprint into shared memory (zero outside the input; float32 by
//        asynchronous copies);
//      * for each chunk of 8 output channels: recomputes the convolution over the region (each
//        thread 4 positions x 8 channels, an outer product per tap in the accumulation type:
//        the direct forward kernel's arithmetic; dy is centred on the forward's channel means:
//        the direct kernel's, or exact where the tensor-core kernel ran, exact_channel_means)
//        and stores dy
//        there; adds the box's input gradient
//          dx[ci, p] += sum over taps k with p = s * stride - padding + k * dilation, and the
//                       8 channels c, of w[c, ci, k] * dy[c, s]
//        (a thread per input position); and the weight gradient of the owned outputs
//          dw[c, k] += sum over owned s of dy[c, s] * x[ci, s * stride - padding + k * dilation]
//        (8 lanes per 3 taps, 2 in double, each every 8th owned output, then butterflies),
//        added, in a fixed order, into the block's own slice of double partials;
//      * writes the box's input gradient (each input element belongs to one box).
// 3. weight_grad_kernel: dweight = the blocks' partials summed in block order.
// At stride 1 (within their families, BackwardRoutes) neither gradient needs the recomputation:
// the input gradient comes from the lag tables (conv3d_group_norm_mean_lag_input_grad.cuh) and
// the weight gradient from the per-sample Gram sums of the centred input
// (conv3d_group_norm_mean_gram_weight_grad.cuh); the tile kernel then runs only for what they
// do not take (at the headline: not at all). With FUSED_OPS_CONCURRENT_GRADS=1 the two run at
// once: the Gram kernels on a side stream (common/cuda/side_stream.cuh) forked after the
// coefficients and joined before the launcher returns, their workspaces apart and each chunked
// for its concurrent budget (conv_kernels.h), so that each chain fills the other's launch gaps
// and last waves. Off by default: at the headline on an H100 it first raised the throughput of
// training steps by 1-2% (back to back and in CUDA graphs) but made single steps bimodal (p90
// +13-22%; benchmarks/h100-2026-11-27-concurrent-grads/notes.txt), and since the Gram launches
// are sized to whole rounds (fewer than its smaller budgets allow) it is slower in every
// measure: fwd+bwd 0.97 vs 0.95 ms, CUDA graph replay 0.94 vs 0.92
// (benchmarks/h100-2026-11-27-gram-rounds/notes.txt).
//
// No atomics: every sum has a fixed order (given the shape and the device's SM count), so
// results are deterministic. Work per tile: the region's recomputation plus two products of the
// forward's size per box position; the region exceeds the box by the kernel's halo, so the
// plan prefers large boxes (headline: 24 x 4 x 8 inputs, 22 x 6 x 10 outputs).
#include "common/cuda/cuda_kernel.cuh"
#include "common/cuda/device_info.cuh"
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "common/cuda/side_stream.cuh"
#include "conv/conv3d_group_norm_mean_gram_weight_grad.cuh"
#include "conv/conv3d_group_norm_mean_lag_input_grad.cuh"
#include "conv/conv_input_box.cuh"
#include "conv/conv_kernels.h"
#include "norm/group_norm_math.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <type_traits>

namespace fused_ops {
namespace gpu {
namespace {

constexpr int kChannels = static_cast<int>(conv::kOnePassBackwardChannels);  // per chunk
static_assert(kChannels == 8, "the kernel moves a position's channels as 8 values");
constexpr int kRecomputeSlots = 4;  // region positions per thread in a full pass
constexpr int kBoxSlots = static_cast<int>(conv::kOnePassBackwardBoxCapacity) / kThreads;
// Input-gradient channels a thread sums at once: 3, the headline's C_in / groups (4 would
// waste a quarter of its products there).
constexpr int kInputChannelsPerStep = 3;
static_assert(kBoxSlots * kThreads == conv::kOnePassBackwardBoxCapacity,
              "the plan's box capacity is the input-gradient phase's slots");
// The weight-gradient product: lanes that split one set of taps' owned positions (their sums
// then meet in butterflies), and the taps of a set (x 8 channels of accumulators: fewer in
// double, which would spill).
constexpr int kWeightGradLanes = 8;
template <typename acc_t>
constexpr int kWeightGradTaps = sizeof(acc_t) == 8 ? 2 : 3;
// Most bytes of weight-gradient partials (the grid shrinks to stay below).
constexpr size_t kMaxPartialBytes = size_t{64} << 20;
// Shared memory a block may take so that two fit on a Hopper or Ampere SM (the plan takes more,
// with one block per SM, only where nothing smaller fits).
constexpr size_t kTwoBlockSharedMemory = 112 * 1024;

struct BackwardArgs {
  conv::Conv3dGroupNormMeanBackwardParams p;
  conv::OnePassBackwardPlan plan;
  void* coefficients;   // [N][C_out][3] of acc_t: alpha, m0, gamma
  double* dw_partials;  // [gridDim.x][C_out][K]
  // [N][C_in] of acc_t: x's means, which the coefficients kernel writes from p.input_sums where
  // the lag or Gram kernels centre x (else null: launch_input_channel_means sums x).
  void* mu;
};

// One tile's geometry along one dim: the box's input positions [p0, p0 + n) and the region's
// output positions [s0, s0 + r).
struct Span {
  int p0, n;
  int s0, r;
};

__device__ __forceinline__ Span span_of(int box_index, int64_t B, int64_t in_size, int64_t k,
                                        int64_t stride, int64_t padding, int64_t dilation,
                                        int64_t out_size) {
  Span sp;
  sp.p0 = box_index * static_cast<int>(B);
  sp.n = min(static_cast<int>(B), static_cast<int>(in_size) - sp.p0);
  const int st = static_cast<int>(stride);
  // The first output whose last tap reaches p0, the last whose first tap reaches p0 + n - 1.
  const int lo = sp.p0 + static_cast<int>(padding) - static_cast<int>((k - 1) * dilation);
  const int s_lo = lo <= 0 ? 0 : (lo + st - 1) / st;
  const int s_hi =
      min(static_cast<int>(out_size) - 1, (sp.p0 + sp.n - 1 + static_cast<int>(padding)) / st);
  sp.s0 = s_lo;
  sp.r = max(0, s_hi - s_lo + 1);
  return sp;
}

// An input position of a tile's box: its index q in the box and its coordinates.
struct BoxSlot {
  bool valid;
  int q;
  int pd, ph, pw;
};

// Whether the box of `sp` owns output s along this dim: s's first tap inside the input is in
// the box.
__device__ __forceinline__ bool owns(const Span& sp, int s, int64_t k, int64_t stride,
                                     int64_t padding, int64_t dilation) {
  const int first = s * static_cast<int>(stride) - static_cast<int>(padding);
  const int dil = static_cast<int>(dilation);
  const int skipped = first < 0 ? (-first + dil - 1) / dil : 0;  // taps in the padding
  if (skipped >= k) {
    return false;
  }
  const int p = first + skipped * dil;
  return p >= sp.p0 && p < sp.p0 + sp.n;
}

// The outputs of the region the box owns along one dim, in order, into `list` (region
// indices); returns their count. (Not always a contiguous run: with dilation and padding, the
// first tap inside the input of an output whose first taps fall in the padding cycles through
// [0, dilation) as s grows.)
__device__ inline int list_owned(const Span& sp, int64_t k, int64_t stride, int64_t padding,
                                 int64_t dilation, int* list) {
  int count = 0;
  for (int r = 0; r < sp.r; ++r) {
    if (owns(sp, sp.s0 + r, k, stride, padding, dilation)) {
      list[count++] = r;
    }
  }
  return count;
}

// The region output (index relative to the region) along one dim that input p reads through
// tap kk, or -1. kUnitStride: the stride is 1 (no division).
template <bool kUnitStride>
__device__ __forceinline__ int region_index(int p, int kk, const Span& sp, int64_t stride,
                                            int64_t padding, int64_t dilation) {
  const int num = p + static_cast<int>(padding) - kk * static_cast<int>(dilation);
  int rel;
  if constexpr (kUnitStride) {
    rel = num - sp.s0;
  } else {
    const int st = static_cast<int>(stride);
    if (num < 0 || num % st != 0) {
      return -1;
    }
    rel = num / st - sp.s0;
  }
  return rel >= 0 && rel < sp.r ? rel : -1;
}

__device__ __forceinline__ void load8(const float* p, float (&v)[kChannels]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ void load8(const double* p, double (&v)[kChannels]) {
#pragma unroll
  for (int i = 0; i < kChannels / 2; ++i) {
    const double2 a = reinterpret_cast<const double2*>(p)[i];
    v[2 * i] = a.x;
    v[2 * i + 1] = a.y;
  }
}

__device__ __forceinline__ void load4(const float* p, float* v) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
__device__ __forceinline__ void load4(const double* p, double* v) {
  const double2 a = reinterpret_cast<const double2*>(p)[0];
  const double2 b = reinterpret_cast<const double2*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}
__device__ __forceinline__ void store4(float* p, const float* v) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(double* p, const double* v) {
  reinterpret_cast<double2*>(p)[0] = make_double2(v[0], v[1]);
  reinterpret_cast<double2*>(p)[1] = make_double2(v[2], v[3]);
}

// dy_s holds a region position's 8 channels as two halves of 4, swapped in every other group
// of 4 positions: a warp loading one half for 32 consecutive positions then spreads over all
// 32 banks (4 wavefronts for float, the least 512 bytes take) instead of 8.
__device__ __forceinline__ int dy_half(int r, int half) {
  return r * kChannels + 4 * (half ^ ((r >> 2) & 1));
}
template <typename acc_t>
__device__ __forceinline__ void load_dy(const acc_t* dy_s, int r, acc_t (&v)[kChannels]) {
  load4(dy_s + dy_half(r, 0), v);
  load4(dy_s + dy_half(r, 1), v + 4);
}
template <typename acc_t>
__device__ __forceinline__ void store_dy(acc_t* dy_s, int r, const acc_t (&v)[kChannels]) {
  store4(dy_s + dy_half(r, 0), v);
  store4(dy_s + dy_half(r, 1), v + 4);
}

// ---------------------------------------------------------------------------------------
// 1. Coefficients: one thread per (n, c); x's means from the forward's sums, one thread per
// (n, input channel); and, in blocks of their own after those, the parameters' gradients, a
// warp per channel (their own kernel, after every other, was 0.004 ms a step at the Conv3d
// headline, H100, 2026-11-27, and a launch).

struct ChannelCoefficients {
  double alpha, m0, gamma;
};

// (alpha, m0, gamma) of (n, c), in double.
template <typename T>
__device__ ChannelCoefficients channel_coefficients(const BackwardArgs& a, int64_t n, int64_t c) {
  using stat_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  const int64_t C = s.C_out;
  const int64_t G = a.p.num_groups, Cg = C / G, g = c / Cg;
  const auto* mean = static_cast<const stat_t*>(a.p.mean);
  const auto* rstd = static_cast<const stat_t*>(a.p.rstd);
  const auto* channel_mean = static_cast<const stat_t*>(a.p.channel_mean);
  const T* gn_weight = static_cast<const T*>(a.p.gn_weight);
  const T* conv_bias = static_cast<const T*>(a.p.conv_bias);
  const double S = static_cast<double>(s.Do * s.Ho * s.Wo);
  const double dy = ScalarOps<T>::to_double(static_cast<const T*>(a.p.grad_output)[n]) /
                    (static_cast<double>(C) * S);
  double ds_w = 0.0, db_w = 0.0;
  for (int64_t cc = g * Cg; cc < (g + 1) * Cg; ++cc) {
    const double w = gn_weight != nullptr ? ScalarOps<T>::to_double(gn_weight[cc]) : 1.0;
    ds_w += w * dy * S * static_cast<double>(channel_mean[n * C + cc]);
    db_w += w * dy * S;
  }
  const double mu = static_cast<double>(mean[n * G + g]);
  const double rs = static_cast<double>(rstd[n * G + g]);
  const norm::BackwardCoefficients coef =
      norm::backward_coefficients(ds_w, db_w, mu, rs, static_cast<double>(Cg) * S);
  const double w = gn_weight != nullptr ? ScalarOps<T>::to_double(gn_weight[c]) : 1.0;
  const double m = static_cast<double>(channel_mean[n * C + c]);
  const double bias = conv_bias != nullptr ? ScalarOps<T>::to_double(conv_bias[c]) : 0.0;
  return {coef.c2, m - bias, coef.c2 * m + rs * w * dy + coef.c3};
}

// Channel c's bias and GroupNorm affine gradients (a warp: lanes take samples n = lane,
// lane + 32, ... in order, then a butterfly).
template <typename T>
__device__ void channel_param_grads(const BackwardArgs& a, int64_t c) {
  using stat_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  const int64_t C = s.C_out;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t G = a.p.num_groups, g = c / (C / G);
  const auto* mean = static_cast<const stat_t*>(a.p.mean);
  const auto* rstd = static_cast<const stat_t*>(a.p.rstd);
  const auto* channel_mean = static_cast<const stat_t*>(a.p.channel_mean);
  const double S = static_cast<double>(s.Do * s.Ho * s.Wo);
  double d_gn_bias = 0.0, d_gn_weight = 0.0, d_conv_bias = 0.0;
  for (int64_t n = lane; n < s.N; n += kWarpSize) {
    const double go =
        ScalarOps<T>::to_double(static_cast<const T*>(a.p.grad_output)[n]) / static_cast<double>(C);
    d_gn_bias += go;
    d_gn_weight +=
        go * (static_cast<double>(channel_mean[n * C + c]) - static_cast<double>(mean[n * G + g])) *
        static_cast<double>(rstd[n * G + g]);
    if (a.p.dconv_bias != nullptr) {
      d_conv_bias += S * channel_coefficients<T>(a, n, c).gamma;
    }
  }
  d_gn_bias = warp_allreduce_sum(d_gn_bias);
  d_gn_weight = warp_allreduce_sum(d_gn_weight);
  d_conv_bias = warp_allreduce_sum(d_conv_bias);
  if (lane != 0) {
    return;
  }
  if (a.p.dgn_bias != nullptr) {
    static_cast<T*>(a.p.dgn_bias)[c] = ScalarOps<T>::from_double(d_gn_bias);
  }
  if (a.p.dgn_weight != nullptr) {
    static_cast<T*>(a.p.dgn_weight)[c] = ScalarOps<T>::from_double(d_gn_weight);
  }
  if (a.p.dconv_bias != nullptr) {
    static_cast<T*>(a.p.dconv_bias)[c] = ScalarOps<T>::from_double(d_conv_bias);
  }
}

// Blocks [0, coefficient_blocks): the coefficients (and mu); the rest: the parameters'
// gradients, kWarpsPerBlock channels a block.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_coefficients_kernel(const BackwardArgs a, int coefficient_blocks) {
  using acc_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  if (static_cast<int>(blockIdx.x) >= coefficient_blocks) {
    const int64_t c = (static_cast<int64_t>(blockIdx.x) - coefficient_blocks) * kWarpsPerBlock +
                      threadIdx.x / kWarpSize;
    if (c < s.C_out) {  // (whole warps)
      channel_param_grads<T>(a, c);
    }
    return;
  }
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (a.mu != nullptr && i < s.N * s.C_in) {  // (each row of the sums ends with x's total)
    const int64_t row = conv::input_sums_row(s);
    static_cast<acc_t*>(a.mu)[i] = static_cast<acc_t>(a.p.input_sums[i * row + row - 1] /
                                                      static_cast<double>(s.D * s.H * s.W));
  }
  if (i >= s.N * s.C_out) {
    return;
  }
  const ChannelCoefficients coef = channel_coefficients<T>(a, i / s.C_out, i % s.C_out);
  acc_t* out = static_cast<acc_t*>(a.coefficients) + 3 * i;
  out[0] = static_cast<acc_t>(coef.alpha);
  out[1] = static_cast<acc_t>(coef.m0);
  out[2] = static_cast<acc_t>(coef.gamma);
}

// ---------------------------------------------------------------------------------------
// 2. The tiles.

template <typename T, bool kUnitStride>
__global__ void __launch_bounds__(kThreads, 2) onepass_backward_kernel(const BackwardArgs a) {
  using acc_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  const conv::OnePassBackwardPlan& plan = a.plan;
  extern __shared__ __align__(16) unsigned char smem[];
  acc_t* w_s = reinterpret_cast<acc_t*>(smem);                           // [K][8]
  int* koff_s = reinterpret_cast<int*>(smem + plan.koff_offset);         // [K]
  int* region_s = reinterpret_cast<int*>(smem + plan.region_offset);     // [region]
  int* owned_list_s = reinterpret_cast<int*>(smem + plan.owned_offset);  // [<= region]
  // The owned outputs per dim: their counts along d, h, w, then their region indices along d
  // [RD], h [RH], w [RW].
  int* owned_dims_s = reinterpret_cast<int*>(smem + plan.owned_dims_offset);
  int* owned_d_s = owned_dims_s + 3;
  int* owned_h_s = owned_d_s + plan.RD;
  int* owned_w_s = owned_h_s + plan.RH;
  acc_t* x_s = reinterpret_cast<acc_t*>(smem + plan.footprint_offset);  // footprint
  acc_t* dy_s = reinterpret_cast<acc_t*>(smem + plan.dy_offset);        // [region][8]
  acc_t* dx_s = reinterpret_cast<acc_t*>(smem + plan.dx_offset);        // [c_in_g][box]
  acc_t* coef_s = reinterpret_cast<acc_t*>(smem + plan.coef_offset);    // [3][8]

  const int K = static_cast<int>(plan.K);
  const int c_in_g = static_cast<int>(plan.c_in_g);
  const int c_out_g = static_cast<int>(plan.c_out_g);
  const int kD = static_cast<int>(s.kD), kH = static_cast<int>(s.kH), kW = static_cast<int>(s.kW);
  const int taps = kD * kH * kW;
  const int64_t C_out = s.C_out;
  const T* weight = static_cast<const T*>(a.p.weight);
  const acc_t* coefficients = static_cast<const acc_t*>(a.coefficients);
  T* dx = static_cast<T*>(a.p.dx);
  const bool want_dw = a.p.dweight != nullptr;
  double* dw_block = want_dw ? a.dw_partials + blockIdx.x * C_out * K : nullptr;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;

  for (int k = threadIdx.x; k < K; k += kThreads) {
    koff_s[k] = tap_offset_in_box(k, s, plan.FD, plan.FH, plan.FW);
  }
  if (want_dw) {
    for (int64_t i = threadIdx.x; i < C_out * K; i += kThreads) {
      dw_block[i] = 0.0;
    }
  }

  for (int64_t tile = blockIdx.x; tile < plan.tiles; tile += gridDim.x) {
    const unsigned boxes = static_cast<unsigned>(plan.boxes);
    const unsigned box = static_cast<unsigned>(tile) % boxes;
    const unsigned rest = static_cast<unsigned>(tile) / boxes;
    const int64_t n = rest % static_cast<unsigned>(s.N);
    const int64_t g = rest / static_cast<unsigned>(s.N);
    const unsigned bw = static_cast<unsigned>(plan.boxes_w),
                   bh = static_cast<unsigned>(plan.boxes_h);
    const Span sd = span_of(static_cast<int>(box / (bw * bh)), plan.BD, s.D, s.kD, s.stride[0],
                            s.padding[0], s.dilation[0], s.Do);
    const Span sh = span_of(static_cast<int>((box / bw) % bh), plan.BH, s.H, s.kH, s.stride[1],
                            s.padding[1], s.dilation[1], s.Ho);
    const Span sw = span_of(static_cast<int>(box % bw), plan.BW, s.W, s.kW, s.stride[2],
                            s.padding[2], s.dilation[2], s.Wo);
    const int nreg = sd.r * sh.r * sw.r;
    const int nbox = sd.n * sh.n * sw.n;
    __syncthreads();  // the previous tile is done with shared memory

    for (int r = threadIdx.x; r < nreg; r += kThreads) {
      const int rd = r / (sh.r * sw.r), rh = (r / sw.r) % sh.r, rw = r % sw.r;
      region_s[r] = static_cast<int>((rd * s.stride[0] * plan.FH + rh * s.stride[1]) * plan.FW +
                                     rw * s.stride[2]);
    }
    if (threadIdx.x == 0) {
      owned_dims_s[0] = list_owned(sd, s.kD, s.stride[0], s.padding[0], s.dilation[0], owned_d_s);
    } else if (threadIdx.x == kWarpSize) {
      owned_dims_s[1] = list_owned(sh, s.kH, s.stride[1], s.padding[1], s.dilation[1], owned_h_s);
    } else if (threadIdx.x == 2 * kWarpSize) {
      owned_dims_s[2] = list_owned(sw, s.kW, s.stride[2], s.padding[2], s.dilation[2], owned_w_s);
    }
    const T* sample = static_cast<const T*>(a.p.x) + (n * s.C_in + g * c_in_g) * s.D * s.H * s.W;
    const InputBox footprint{c_in_g,
                             sd.s0 * static_cast<int>(s.stride[0]) - static_cast<int>(s.padding[0]),
                             sh.s0 * static_cast<int>(s.stride[1]) - static_cast<int>(s.padding[1]),
                             sw.s0 * static_cast<int>(s.stride[2]) - static_cast<int>(s.padding[2]),
                             static_cast<int>(plan.FD),
                             static_cast<int>(plan.FH),
                             static_cast<int>(plan.FW)};
    // (float32: in flight while the chunk's weights load; waited for before its barrier.)
    load_footprint(sample, x_s, s, footprint, /*full_rows=*/false);
    // This thread's input positions of the box, for the input-gradient phase.
    BoxSlot box_slot[kBoxSlots];
#pragma unroll
    for (int j = 0; j < kBoxSlots; ++j) {
      const int q = threadIdx.x + j * kThreads;
      box_slot[j] = BoxSlot{q < nbox, q, sd.p0 + q / (sh.n * sw.n), sh.p0 + (q / sw.n) % sh.n,
                            sw.p0 + q % sw.n};
    }
    if (dx != nullptr) {
      for (int i = threadIdx.x; i < c_in_g * nbox; i += kThreads) {
        dx_s[i] = acc_t(0);
      }
    }

    for (int chunk = 0; chunk < plan.chunks; ++chunk) {
      const int c_first = chunk * kChannels;
      const int nc = min(kChannels, c_out_g - c_first);
      const int64_t c0 = g * c_out_g + c_first;
      if (chunk > 0) {
        __syncthreads();  // the previous chunk is done with w_s, dy_s, coef_s
      }
      for (int i = threadIdx.x; i < K * kChannels; i += kThreads) {
        const int k = i / kChannels, c = i % kChannels;
        w_s[i] = c < nc ? ScalarOps<T>::to_acc(weight[(c0 + c) * K + k]) : acc_t(0);
      }
      if (threadIdx.x < 3 * kChannels) {
        const int c = threadIdx.x % kChannels, j = threadIdx.x / kChannels;
        // A missing channel gets alpha = gamma = 0: dy = 0.
        coef_s[j * kChannels + c] = c < nc ? coefficients[3 * (n * C_out + c0 + c) + j] : acc_t(0);
      }
      cp_async_wait_all();  // this thread's footprint copies (float32)
      __syncthreads();
      const int owned = owned_dims_s[0] * owned_dims_s[1] * owned_dims_s[2];
      if (chunk == 0 && want_dw) {
        // The owned outputs' region indices, in order (published by the barrier after the
        // recomputation, read by the weight-gradient product of every chunk; without the
        // input gradient the recomputation reads them too: one barrier more).
        const int nh = owned_dims_s[1], nw = owned_dims_s[2];
        for (int u = threadIdx.x; u < owned; u += kThreads) {
          const int ud = u / (nh * nw), uh = (u / nw) % nh, uw = u % nw;
          owned_list_s[u] = (owned_d_s[ud] * sh.r + owned_h_s[uh]) * sw.r + owned_w_s[uw];
        }
        if (dx == nullptr) {
          __syncthreads();
        }
      }

      // dy over the region, or, without the input gradient, over the owned outputs only (all
      // the weight gradient reads: the region's halo is the input gradient's).
      const int recomputed = dx != nullptr ? nreg : owned;
      const auto recomputed_at = [&](int i) { return dx != nullptr ? i : owned_list_s[i]; };
      acc_t alpha[kChannels], m0[kChannels], gamma[kChannels];
      load8(coef_s, alpha);
      load8(coef_s + kChannels, m0);
      load8(coef_s + 2 * kChannels, gamma);
      // A pass computes `slots` positions per thread (a multiple of the block's threads):
      // 4 while more than 3 blocks' worth remain, then the fewest that cover the rest, so
      // that at most one block's worth of slots (of the last pass) computes nothing.
      const auto recompute_pass = [&](auto slots_tag, int base) {
        constexpr int kSlots = decltype(slots_tag)::value;
        int offset[kSlots];
#pragma unroll
        for (int j = 0; j < kSlots; ++j) {
          const int i = base + threadIdx.x + j * kThreads;
          offset[j] = i < recomputed ? region_s[recomputed_at(i)] : 0;
        }
        acc_t acc[kSlots][kChannels];
#pragma unroll
        for (int j = 0; j < kSlots; ++j) {
#pragma unroll
          for (int c = 0; c < kChannels; ++c) {
            acc[j][c] = acc_t(0);
          }
        }
#pragma unroll 2
        for (int k = 0; k < K; ++k) {
          const int koff = koff_s[k];
          acc_t w[kChannels];
          load8(w_s + k * kChannels, w);
#pragma unroll
          for (int j = 0; j < kSlots; ++j) {
            const acc_t xv = x_s[offset[j] + koff];
#pragma unroll
            for (int c = 0; c < kChannels; ++c) {
              acc[j][c] += xv * w[c];
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kSlots; ++j) {
          const int i = base + threadIdx.x + j * kThreads;
          if (i < recomputed) {
            acc_t dy[kChannels];
#pragma unroll
            for (int c = 0; c < kChannels; ++c) {
              dy[c] = alpha[c] * (acc[j][c] - m0[c]) + gamma[c];
            }
            store_dy(dy_s, recomputed_at(i), dy);
          }
        }
      };
      for (int base = 0; base < recomputed;) {
        const int remaining = recomputed - base;
        if (remaining > 3 * kThreads) {
          recompute_pass(std::integral_constant<int, kRecomputeSlots>{}, base);
          base += kRecomputeSlots * kThreads;
        } else if (remaining > 2 * kThreads) {
          recompute_pass(std::integral_constant<int, 3>{}, base);
          base += 3 * kThreads;
        } else if (remaining > kThreads) {
          recompute_pass(std::integral_constant<int, 2>{}, base);
          base += 2 * kThreads;
        } else {
          recompute_pass(std::integral_constant<int, 1>{}, base);
          base += kThreads;
        }
      }
      __syncthreads();

      // The box's input gradient: a thread per input position (up to kBoxSlots of them),
      // its channels kInputChannelsPerStep at a time in registers; taps outermost, so that
      // each tap's weights (the same for the whole warp: broadcast loads) serve every
      // position of the thread. Each (position, channel) of dx_s belongs to one thread.
      if (dx != nullptr) {
        for (int ci0 = 0; ci0 < c_in_g; ci0 += kInputChannelsPerStep) {
          acc_t sum[kBoxSlots][kInputChannelsPerStep];
#pragma unroll
          for (int j = 0; j < kBoxSlots; ++j) {
#pragma unroll
            for (int i = 0; i < kInputChannelsPerStep; ++i) {
              sum[j][i] = acc_t(0);
            }
          }
          // (Each slot's region index along d, then d and h, is formed once per tap of that
          // dim: -1 where the tap reaches no region output.)
          for (int kd = 0; kd < kD; ++kd) {
            int rd[kBoxSlots];
#pragma unroll
            for (int j = 0; j < kBoxSlots; ++j) {
              rd[j] = box_slot[j].valid
                          ? region_index<kUnitStride>(box_slot[j].pd, kd, sd, s.stride[0],
                                                      s.padding[0], s.dilation[0])
                          : -1;
            }
            for (int kh = 0; kh < kH; ++kh) {
              int rdh[kBoxSlots];
#pragma unroll
              for (int j = 0; j < kBoxSlots; ++j) {
                const int rh = region_index<kUnitStride>(box_slot[j].ph, kh, sh, s.stride[1],
                                                         s.padding[1], s.dilation[1]);
                rdh[j] = rd[j] >= 0 && rh >= 0 ? (rd[j] * sh.r + rh) * sw.r : -1;
              }
              for (int kw = 0; kw < kW; ++kw) {
                const acc_t* w_tap = w_s + (ci0 * taps + (kd * kH + kh) * kW + kw) * kChannels;
                acc_t w[kInputChannelsPerStep][kChannels];
#pragma unroll
                for (int i = 0; i < kInputChannelsPerStep; ++i) {
                  if (ci0 + i < c_in_g) {
                    load8(w_tap + i * taps * kChannels, w[i]);
                  } else {
#pragma unroll
                    for (int c = 0; c < kChannels; ++c) {
                      w[i][c] = acc_t(0);
                    }
                  }
                }
#pragma unroll
                for (int j = 0; j < kBoxSlots; ++j) {
                  const int rw = region_index<kUnitStride>(box_slot[j].pw, kw, sw, s.stride[2],
                                                           s.padding[2], s.dilation[2]);
                  if (rdh[j] < 0 || rw < 0) {
                    continue;
                  }
                  acc_t dyv[kChannels];
                  load_dy(dy_s, rdh[j] + rw, dyv);
#pragma unroll
                  for (int i = 0; i < kInputChannelsPerStep; ++i) {
#pragma unroll
                    for (int c = 0; c < kChannels; ++c) {
                      sum[j][i] += w[i][c] * dyv[c];
                    }
                  }
                }
              }
            }
          }
#pragma unroll
          for (int j = 0; j < kBoxSlots; ++j) {
            if (box_slot[j].valid) {
#pragma unroll
              for (int i = 0; i < kInputChannelsPerStep; ++i) {
                if (ci0 + i < c_in_g) {
                  dx_s[(ci0 + i) * nbox + box_slot[j].q] += sum[j][i];
                }
              }
            }
          }
        }
      }

      // The weight gradient of the outputs the box owns (owned_list_s): a set of
      // kWeightGradLanes lanes per kWeightGradTaps consecutive taps, each lane every 8th owned
      // position (consecutive lanes, consecutive positions: their loads spread over the
      // banks) with the taps x 8 channels in registers; the lanes' sums then meet in
      // butterflies, in double, and lane 0 of the set adds them into the block's partials
      // (which no other thread of the block touches meanwhile).
      if (want_dw) {
        constexpr int kSetsPerWarp = kWarpSize / kWeightGradLanes;
        const int tap_sets = (K + kWeightGradTaps<acc_t> - 1) / kWeightGradTaps<acc_t>;
        const int sub = lane % kWeightGradLanes;
        for (int set0 = warp * kSetsPerWarp; set0 < tap_sets;
             set0 += kWarpsPerBlock * kSetsPerWarp) {
          // (The loop and the butterflies run in whole warps; sets past the last compute 0.)
          const int k0 = (set0 + lane / kWeightGradLanes) * kWeightGradTaps<acc_t>;
          int koff[kWeightGradTaps<acc_t>];
#pragma unroll
          for (int j = 0; j < kWeightGradTaps<acc_t>; ++j) {
            koff[j] = k0 + j < K ? koff_s[k0 + j] : 0;
          }
          acc_t acc[kWeightGradTaps<acc_t>][kChannels];
#pragma unroll
          for (int j = 0; j < kWeightGradTaps<acc_t>; ++j) {
#pragma unroll
            for (int c = 0; c < kChannels; ++c) {
              acc[j][c] = acc_t(0);
            }
          }
          for (int u = sub; u < owned; u += kWeightGradLanes) {
            const int r = owned_list_s[u];
            const int offset = region_s[r];
            acc_t dyv[kChannels];
            load_dy(dy_s, r, dyv);
#pragma unroll
            for (int j = 0; j < kWeightGradTaps<acc_t>; ++j) {
              const acc_t xv = x_s[offset + koff[j]];
#pragma unroll
              for (int c = 0; c < kChannels; ++c) {
                acc[j][c] += dyv[c] * xv;
              }
            }
          }
#pragma unroll
          for (int j = 0; j < kWeightGradTaps<acc_t>; ++j) {
#pragma unroll
            for (int c = 0; c < kChannels; ++c) {
              double total = static_cast<double>(acc[j][c]);
#pragma unroll
              for (int offset = 1; offset < kWeightGradLanes; offset <<= 1) {
                total += __shfl_xor_sync(0xffffffffu, total, offset);
              }
              if (sub == 0 && k0 + j < K && c < nc) {
                dw_block[(c0 + c) * K + k0 + j] += total;
              }
            }
          }
        }
      }
    }

    if (dx != nullptr) {
      __syncthreads();  // dx_s complete
      T* dx_group = dx + (n * s.C_in + g * c_in_g) * s.D * s.H * s.W;
      for (int i = threadIdx.x; i < c_in_g * nbox; i += kThreads) {
        const int ci = i / nbox, q = i % nbox;
        const int pd = sd.p0 + q / (sh.n * sw.n);
        const int ph = sh.p0 + (q / sw.n) % sh.n;
        const int pw = sw.p0 + q % sw.n;
        dx_group[((static_cast<int64_t>(ci) * s.D + pd) * s.H + ph) * s.W + pw] =
            ScalarOps<T>::from_acc(dx_s[i]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// 3. dweight: the blocks' partials in block order. 4. The per-channel parameter gradients.

template <typename T>
__global__ void __launch_bounds__(kThreads) weight_grad_kernel(const BackwardArgs a, int blocks) {
  const int64_t size = a.p.conv.C_out * a.plan.K;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= size) {
    return;
  }
  double total = 0.0;
  for (int b = 0; b < blocks; ++b) {
    total += a.dw_partials[b * size + i];
  }
  static_cast<T*>(a.p.dweight)[i] = ScalarOps<T>::from_double(total);
}

// ---------------------------------------------------------------------------------------
// Host side.

// Two blocks per SM where the problem fits them, else one.
conv::OnePassBackwardPlan plan_for(const conv::Conv3dGroupNormMeanBackwardParams& p) {
  const DeviceInfo info = current_device_info();
  conv::OnePassBackwardPlan plan = conv::plan_conv3d_group_norm_mean_onepass_backward(
      p.conv, p.dtype, std::min(info.shared_memory, kTwoBlockSharedMemory));
  if (!plan.supported && info.shared_memory > kTwoBlockSharedMemory) {
    plan = conv::plan_conv3d_group_norm_mean_onepass_backward(p.conv, p.dtype, info.shared_memory);
  }
  return plan;
}

// The tile kernel for p's strides, ready for plan's shared memory (null if that fails).
template <typename T>
auto tile_kernel(const conv::Conv3dGroupNormMeanBackwardParams& p,
                 const conv::OnePassBackwardPlan& plan) -> void (*)(BackwardArgs) {
  const bool unit_stride = p.conv.stride[0] == 1 && p.conv.stride[1] == 1 && p.conv.stride[2] == 1;
  void (*kernel)(BackwardArgs) =
      unit_stride ? onepass_backward_kernel<T, true> : onepass_backward_kernel<T, false>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(plan.smem_bytes)) != cudaSuccess) {
    return nullptr;
  }
  return kernel;
}

// The persistent grid: the blocks that fit on the device at once (the occupancy calculator's
// count; fewer where the weight gradient's partials would exceed kMaxPartialBytes), at most
// one per tile. The same for workspace_bytes and launch.
template <typename T>
int grid_for(const conv::Conv3dGroupNormMeanBackwardParams& p,
             const conv::OnePassBackwardPlan& plan) {
  int per_sm = 0;
  const auto kernel = tile_kernel<T>(p, plan);
  if (kernel == nullptr || cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                               &per_sm, kernel, kThreads, plan.smem_bytes) != cudaSuccess) {
    per_sm = 1;
  }
  const int64_t sms = std::max(current_device_info().multiprocessors, 1);
  int64_t grid = std::min<int64_t>(plan.tiles, sms * std::max(per_sm, 1));
  const size_t partial_bytes = static_cast<size_t>(p.conv.C_out * plan.K) * sizeof(double);
  grid = std::min<int64_t>(grid, std::max<int64_t>(1, kMaxPartialBytes / partial_bytes));
  return static_cast<int>(std::max<int64_t>(grid, 1));
}

// Which kernels compute which gradients of p: the lag input gradient and the Gram weight
// gradient where their families allow (stride 1; FUSED_OPS_CONV3D_LAG_INPUT_GRAD=0 and
// FUSED_OPS_CONV3D_GRAM_WEIGHT_GRAD=0 turn them off, read per call), the recomputing tile kernel
// the rest. Where both run and FUSED_OPS_CONCURRENT_GRADS=1 (read per call), they run at once
// (concurrent), each planned within its concurrent budget (conv_kernels.h): their workspaces are
// then apart. The same for workspace_bytes and launch.
template <typename T>
struct BackwardRoutes {
  conv::LagInputGradPlan lag;
  conv::GramWeightGradPlan gram;
  conv::Conv3dGroupNormMeanBackwardParams tile;  // p without what lag and gram compute
  bool concurrent = false;  // the Gram kernels on a side stream beside the lag kernels

  explicit BackwardRoutes(const conv::Conv3dGroupNormMeanBackwardParams& p) : tile(p) {
    // (Whether a family supports p does not depend on its budget, only its chunks do.)
    const bool try_concurrent = env_switch_on("FUSED_OPS_CONCURRENT_GRADS");
    plan(p, try_concurrent);
    concurrent = try_concurrent && lag.supported && gram.supported;
    if (try_concurrent && !concurrent) {
      plan(p, false);  // one of them, or neither: the whole budget
    }
    if (lag.supported) {
      tile.dx = nullptr;
    }
    if (gram.supported) {
      tile.dweight = nullptr;
    }
  }
  void plan(const conv::Conv3dGroupNormMeanBackwardParams& p, bool concurrent_budgets) {
    if constexpr (!std::is_same_v<T, double>) {
      gram = gram_weight_grad_plan(
          p, concurrent_budgets ? conv::kGramConcurrentPartialBytes : conv::kGramPartialBytes);
      gram.supported = gram.supported && gram_weight_grad_enabled();
    }
    lag = lag_input_grad_plan(
        p, /*weight_grad_elsewhere=*/gram.supported,
        concurrent_budgets ? conv::kLagConcurrentTableBytes : conv::kLagTableBytes);
    lag.supported = lag.supported && lag_input_grad_enabled();
  }
  bool tile_runs() const { return tile.dx != nullptr || tile.dweight != nullptr; }
  bool centres_x() const { return lag.supported || gram.supported; }
};

template <typename T>
struct Workspace {
  void* coefficients;
  double* dw_partials;  // the tile kernel's
  void* mu;             // x's means per (n, input channel), for the lag and Gram kernels
  void* lag;            // the lag kernels' workspace
  void* gram;           // the Gram kernels' (the same region unless they run concurrently)
  size_t bytes;
};

template <typename T>
Workspace<T> carve(const BackwardRoutes<T>& routes, const conv::OnePassBackwardPlan& plan, int grid,
                   void* base) {
  using acc_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dGroupNormMeanBackwardParams& p = routes.tile;
  WorkspaceCarver carver(base);
  Workspace<T> ws{};
  ws.coefficients = carver.take<acc_t>(3 * p.conv.N * p.conv.C_out);
  ws.dw_partials = p.dweight != nullptr
                       ? carver.take<double>(static_cast<int64_t>(grid) * p.conv.C_out * plan.K)
                       : nullptr;
  ws.mu = routes.centres_x() ? carver.take<acc_t>(p.conv.N * p.conv.C_in) : nullptr;
  // The lag and Gram kernels' regions: apart where they run at once, else one region (the
  // larger of the two; neither reads the other's).
  const size_t lag_bytes = lag_input_grad_workspace_bytes<T>(p, routes.lag);
  size_t gram_bytes = 0;
  if constexpr (!std::is_same_v<T, double>) {
    gram_bytes = gram_weight_grad_workspace_bytes<T>(p, routes.gram);
  }
  if (routes.concurrent) {
    ws.lag = carver.take<char>(static_cast<int64_t>(lag_bytes));
    ws.gram = carver.take<char>(static_cast<int64_t>(gram_bytes));
  } else {
    ws.lag = ws.gram = carver.take<char>(static_cast<int64_t>(std::max(lag_bytes, gram_bytes)));
  }
  ws.bytes = carver.bytes();
  return ws;
}

template <typename T>
struct OnePassBackwardFamily {
  static size_t workspace_bytes(const conv::Conv3dGroupNormMeanBackwardParams& p) {
    const conv::OnePassBackwardPlan plan = plan_for(p);
    return carve<T>(BackwardRoutes<T>(p), plan, grid_for<T>(p, plan), nullptr).bytes;
  }

  static cudaError_t launch(const conv::Conv3dGroupNormMeanBackwardParams& p, void* workspace,
                            cudaStream_t stream) {
    const conv::OnePassBackwardPlan plan = plan_for(p);
    if (!plan.supported) {
      return cudaErrorInvalidValue;
    }
    const int grid = grid_for<T>(p, plan);
    const BackwardRoutes<T> routes(p);
    const Workspace<T> ws = carve<T>(routes, plan, grid, workspace);
    const bool mu_from_sums = routes.centres_x() && p.input_sums != nullptr;
    const BackwardArgs args{routes.tile, plan, ws.coefficients, ws.dw_partials,
                            mu_from_sums ? ws.mu : nullptr};
    const int64_t coefficient_blocks = ceil_div(
        std::max(p.conv.N * p.conv.C_out, mu_from_sums ? p.conv.N * p.conv.C_in : 0), kThreads);
    const bool param_grads =
        p.dconv_bias != nullptr || p.dgn_weight != nullptr || p.dgn_bias != nullptr;
    const int64_t blocks =
        coefficient_blocks + (param_grads ? blocks_for_warp_items(p.conv.C_out) : 0);
    if (!grid_fits(blocks)) {
      return cudaErrorInvalidConfiguration;
    }
    backward_coefficients_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        args, static_cast<int>(coefficient_blocks));
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
    if (routes.tile_runs()) {
      const auto kernel = tile_kernel<T>(p, plan);
      if (kernel == nullptr) {
        return cudaErrorInvalidValue;
      }
      kernel<<<static_cast<unsigned>(grid), kThreads, plan.smem_bytes, stream>>>(args);
      FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
    }
    if (routes.centres_x() && !mu_from_sums) {
      FUSED_OPS_RETURN_IF_CUDA_ERROR(launch_input_channel_means<T>(p, ws.mu, stream));
    }
    // The Gram kernels on the side stream (SideStream: forked after the coefficients, joined
    // before return; the lock keeps other threads' sections off it meanwhile), the lag kernels
    // on the caller's. Without a side stream, one after the other on the caller's.
    SideStream* side = routes.concurrent ? SideStream::current() : nullptr;
    std::unique_lock<std::mutex> side_lock;
    cudaError_t status = cudaSuccess;
    if (side != nullptr) {
      side_lock = std::unique_lock<std::mutex>(side->mutex());
      status = side->fork(stream);
    }
    const cudaStream_t gram_stream = side != nullptr ? side->stream() : stream;
    if constexpr (!std::is_same_v<T, double>) {
      if (status == cudaSuccess && routes.gram.supported) {
        status = gram_weight_grad_launch<T>(p, routes.gram, ws.coefficients, ws.mu, ws.gram,
                                            gram_stream);
      }
    }
    if (status == cudaSuccess && routes.lag.supported) {
      status = lag_input_grad_launch<T>(p, routes.lag, ws.coefficients, ws.mu, ws.lag, stream);
    }
    if (side != nullptr) {  // joined whatever happened: a capture must not end forked
      const cudaError_t joined = side->join(stream);
      status = status != cudaSuccess ? status : joined;
    }
    FUSED_OPS_RETURN_IF_CUDA_ERROR(status);
    if (routes.tile.dweight != nullptr) {
      const int64_t size = p.conv.C_out * plan.K;
      weight_grad_kernel<T>
          <<<static_cast<unsigned>(ceil_div(size, kThreads)), kThreads, 0, stream>>>(args, grid);
      FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
    }
    return cudaSuccess;
  }
};

bool onepass_backward_supported(const conv::Conv3dGroupNormMeanBackwardParams& p) {
  return plan_for(p).supported;
}

}  // namespace
}  // namespace gpu

namespace conv {

const OnePassBackwardCudaKernel conv3d_group_norm_mean_onepass_backward_cuda{
    gpu::onepass_backward_supported,
    gpu::make_cuda_kernel<Conv3dGroupNormMeanBackwardParams, gpu::OnePassBackwardFamily>()};

}  // namespace conv
}  // namespace fused_ops
