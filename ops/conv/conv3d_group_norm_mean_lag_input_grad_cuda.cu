// The lag input gradient of the one-pass conv3d_group_norm_mean backward (stride 1): dx from
// tables of weight products and the centred input, without the convolution's output
// (conv_kernels.h, LagInputGradPlan: the identity, the family, the table layout).
//
// 1. lag_mean_kernel (launch_input_channel_means; the backward's launcher runs it once for this
//    and the Gram weight gradient): mu[n, ci], the input's mean per (sample, channel) (a block
//    per row, in a fixed order), rounded to the accumulation type: the tables and the centred
//    footprints use that one value. (Where the forward kept x's sums, the backward's
//    coefficients kernel divides their totals instead.)
// 2. lag_constants_kernel (once, a block per (sample, conv group) item): in double, E[a, k] and
//    the constants of every pattern P of tap ranges, sum over k in V(P) of E[a, k].
//    lag_products_kernel: in double, Q = sum_c alpha[c] w[c] w[c]^T ((C_in/groups * k^3)^2
//    entries) per item of a chunk; or, with segment tables (the plan's segment_tables), once
//    per segment (a conv group's channels in one GroupNorm group, alpha constant) its
//    Q_segment = sum_c w[c] w[c]^T (the weights pass through shared memory 16 channels at a
//    time).
// 3. lag_tables_kernel: for every pattern P and lag d = (dd, dh, dw) the table
//      T[P][b][dh][dw][dd * c_in_g + a] = sum over taps k in V(P) with k + d a tap of
//                                         Q[(a, k), (b, k + d)]
//    (Q in shared memory, a thread per row and D lag): per item in the accumulation type, or once
//    per segment in double. lag_combine_kernel then makes each item's tables the sum over its
//    segments of alpha[n, segment] * T_segment, in double (linear in Q; at the headline 8
//    segments' tables instead of 128 samples').
// 4. lag_input_grad_kernel: a block per tile of 32 (W) x 8 (H) x R (D) input positions, a
//    thread per (h, w) position: D cut into columns of 12 from 0, the rest into 8, 4, 2, 1.
//    The tile's centred footprint (c_in_g x FH x FW columns of R + 4 planes, D innermost) sits
//    in shared memory; a thread keeps its column's R x c_in_g sums in registers and, per input
//    channel b and lag (dh, dw), loads the R + 4 footprint values of its column and one table
//    row (5 x c_in_g values; both by 16-byte loads), then does R x 5 x c_in_g multiply-adds
//    (headline: 12 x 5 x 3 = 180 per 4 shared and 4 global loads). The column's table is that
//    of its middle plane's tap range along D; the first and last two planes, the only ones whose
//    range can differ, take their own table's row where it does (the correction slots). The
//    tile's positions are assigned to threads grouped by their (H, W) pattern, so that a warp's
//    table rows are mostly one address (grouped_tile_position).
//    The kernel is bound by the L1's data wavefronts: a warp's 16-byte load costs 4 of them
//    whether its lanes read one address or 32, and the table rows (the same for a warp's lanes)
//    are most of them. Hence columns of 12 (a row serves 12 planes), the grouping (a warp's row
//    loads one address, where rows of the W edges' patterns made every load of a warp up to 5),
//    one own row where a corrected pair has one plane of its own (padding (k - 1) / 2), and no
//    loads of the own rows' vectors known to be zero (an unpadded D's edge pairs).
//    (Measurements: benchmarks/h100-2026-11-26-lag-columns/notes.txt.)
// No atomics: every element is written once, by one thread, its sum in a fixed order.
#include "common/cuda/device_info.cuh"
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "conv/conv3d_group_norm_mean_lag_input_grad.cuh"
#include "conv/conv_input_box.cuh"

#include <algorithm>
#include <type_traits>

namespace fused_ops {
namespace gpu {
namespace {

struct LagArgs {
  conv::Conv3dGroupNormMeanBackwardParams p;
  conv::LagInputGradPlan plan;
  const void* coefficients;  // [N][C_out][3] of acc_t: alpha, m0, gamma
  const void* mu;            // [N][C_in] of acc_t
  // With segment tables: [groups][segments_per_group][table_elems] (their Q reach the products
  // and tables kernels as arguments, as do the items' without them).
  const double* segment_tables;
  void* tables;     // [items_per_chunk][table_elems] of acc_t
  void* constants;  // [N * groups][patterns][4] of acc_t
  int64_t item0;    // the chunk's first item: n * groups + conv group
};

constexpr int kSpanMax = static_cast<int>(conv::kLagMaxSpan);
constexpr int kTileW = static_cast<int>(conv::kLagTileW);
constexpr int kTileH = static_cast<int>(conv::kLagTileH);
static_assert(kTileW * kTileH == kThreads, "a thread per (h, w) position of a tile");
static_assert(kTileW == kWarpSize && kTileH == kWarpsPerBlock, "whole rows of a tile per warp");

// ---------------------------------------------------------------------------------------
// 1. The input's channel means.

template <typename T>
__global__ void __launch_bounds__(kThreads)
    lag_mean_kernel(const T* __restrict__ x, int64_t size, void* mu) {
  using acc_t = typename ScalarOps<T>::acc_t;
  __shared__ double2 scratch[kWarpsPerBlock];
  const T* row = x + static_cast<int64_t>(blockIdx.x) * size;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < size; i += kThreads) {
    sum += ScalarOps<T>::to_double(row[i]);
  }
  const double2 total = block_reduce_sum(make_double2(sum, 0.0), scratch);
  if (threadIdx.x == 0) {
    static_cast<acc_t*>(mu)[blockIdx.x] = static_cast<acc_t>(total.x / static_cast<double>(size));
  }
}

// ---------------------------------------------------------------------------------------
// 2. Q, E and the constants.

constexpr int kProductChannels = 16;  // weights in shared memory at a time
constexpr int kProductsPerThread = 2;
constexpr int kMaxReduction = static_cast<int>(conv::kLagMaxInputChannels * conv::kLagMaxTaps *
                                               conv::kLagMaxTaps * conv::kLagMaxTaps);

// Q and E's index (a, k): a * taps + (kd * kH + kh) * kW + kw, K of them.
inline int64_t lag_reduction(const conv::Conv3dShape& s, const conv::LagInputGradPlan& plan) {
  return plan.c_in_g * s.kD * s.kH * s.kW;
}

// Blocks per source for Q's K * K entries (each thread at most kProductsPerThread).
inline int64_t product_splits(int64_t K) {
  return ceil_div(K * K, static_cast<int64_t>(kThreads) * kProductsPerThread);
}

// Segment `local` of conv group cg: its channels [begin, end) within the conv group (empty where
// the conv group meets fewer GroupNorm groups than the most).
struct Segment {
  int begin, end;
};
__device__ __forceinline__ Segment lag_segment(const LagArgs& a, int64_t cg, int local) {
  const int64_t c_out_g = a.plan.c_out_g;
  const int64_t group_channels = a.p.conv.C_out / a.p.num_groups;
  const int64_t first_channel = cg * c_out_g;
  const int64_t g = first_channel / group_channels + local;
  Segment seg;
  seg.begin = static_cast<int>(max(g * group_channels - first_channel, int64_t{0}));
  seg.end = static_cast<int>(min((g + 1) * group_channels - first_channel, c_out_g));
  return seg;
}

// A conv group's weights [c_out_g][K] for channels [c0, c0 + nc) into w_s, in double.
template <typename T>
__device__ __forceinline__ void stage_weights(const T* w, int c0, int nc, int K,
                                              double (*w_s)[kMaxReduction]) {
  block_copy(
      nc * K, [&](int i) { return ScalarOps<T>::to_double(w[c0 * K + i]); },
      [&](int i, double v) { w_s[i / K][i % K] = v; });
}

// Q of each source (blockIdx.x), to out + blockIdx.x * K * K: of the segments (their channels,
// each weighted 1) or of the chunk's items (alpha-weighted). Blocks (blockIdx.y) share a
// source's entries.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    lag_products_kernel(const LagArgs a, bool segments, double* out) {
  using acc_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  const int c_in_g = static_cast<int>(a.plan.c_in_g), c_out_g = static_cast<int>(a.plan.c_out_g);
  const int K = c_in_g * static_cast<int>(s.kD * s.kH * s.kW);
  __shared__ double w_s[kProductChannels][kMaxReduction];
  __shared__ double alpha_s[kProductChannels];

  int64_t n = 0, g = 0;
  int c_begin = 0, c_end = c_out_g;
  if (segments) {
    const int per_group = static_cast<int>(a.plan.segments_per_group);
    g = blockIdx.x / per_group;
    const Segment seg = lag_segment(a, g, static_cast<int>(blockIdx.x % per_group));
    c_begin = seg.begin, c_end = seg.end;
  } else {
    const int64_t item = a.item0 + blockIdx.x;
    n = item / s.groups, g = item % s.groups;
  }
  const T* w = static_cast<const T*>(a.p.weight) + g * c_out_g * K;
  const acc_t* coef = static_cast<const acc_t*>(a.coefficients) + (n * s.C_out + g * c_out_g) * 3;
  const int first = static_cast<int>(blockIdx.y) * kThreads * kProductsPerThread + threadIdx.x;
  double sums[kProductsPerThread];
#pragma unroll
  for (int e = 0; e < kProductsPerThread; ++e) {
    sums[e] = 0.0;
  }
  for (int c0 = c_begin; c0 < c_end; c0 += kProductChannels) {
    const int nc = min(kProductChannels, c_end - c0);
    __syncthreads();  // the previous chunk is done with w_s
    stage_weights(w, c0, nc, K, w_s);
    if (threadIdx.x < nc) {
      alpha_s[threadIdx.x] = segments ? 1.0 : static_cast<double>(coef[3 * (c0 + threadIdx.x)]);
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kProductsPerThread; ++e) {
      const int i = first + e * kThreads;
      if (i < K * K) {
        const int r = i / K, q = i % K;
        for (int c = 0; c < nc; ++c) {
          sums[e] += alpha_s[c] * w_s[c][r] * w_s[c][q];
        }
      }
    }
  }
  double* dst = out + static_cast<int64_t>(blockIdx.x) * K * K;
#pragma unroll
  for (int e = 0; e < kProductsPerThread; ++e) {
    const int i = first + e * kThreads;
    if (i < K * K) {
      dst[i] = sums[e];
    }
  }
}

// Pattern `pattern`'s tap range along each dim.
struct PatternRanges {
  int lo[3], hi[3];
};
__device__ __forceinline__ PatternRanges pattern_ranges(const conv::LagInputGradPlan& plan,
                                                        int pattern) {
  const int ph_count = static_cast<int>(plan.patterns[1]);
  const int pw_count = static_cast<int>(plan.patterns[2]);
  const int id[3] = {pattern / (ph_count * pw_count), (pattern / pw_count) % ph_count,
                     pattern % pw_count};
  PatternRanges r;
#pragma unroll
  for (int d = 0; d < 3; ++d) {
    r.lo[d] = plan.pattern_lo[d][id[d]];
    r.hi[d] = plan.pattern_hi[d][id[d]];
  }
  return r;
}

// Every item's constants [pattern][4]: sum over k in V(pattern) of E[a, k], with
//   E[a, k] = sum_c w[c, a, k] * e[c],  e[c] = gamma[c] + alpha[c] * (nu[c] - m0[c]),
//   nu[c] = sum_{b, k'} w[c, b, k'] mu[b]
// (the constant part of dy[c] once y0 = conv(x - mu) + nu), in double; a block per item.
template <typename T>
__global__ void __launch_bounds__(kThreads) lag_constants_kernel(const LagArgs a) {
  using acc_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  const conv::LagInputGradPlan& plan = a.plan;
  const int c_in_g = static_cast<int>(plan.c_in_g), c_out_g = static_cast<int>(plan.c_out_g);
  const int kH = static_cast<int>(s.kH), kW = static_cast<int>(s.kW);
  const int taps = static_cast<int>(s.kD) * kH * kW;
  const int K = c_in_g * taps;
  __shared__ double w_s[kProductChannels][kMaxReduction];
  __shared__ double e_s[kProductChannels], E_s[kMaxReduction];
  __shared__ double mu_s[conv::kLagMaxInputChannels];
  const int64_t item = blockIdx.x;
  const int64_t n = item / s.groups, g = item % s.groups;
  const T* w = static_cast<const T*>(a.p.weight) + g * c_out_g * K;
  const acc_t* coef = static_cast<const acc_t*>(a.coefficients) + (n * s.C_out + g * c_out_g) * 3;
  if (threadIdx.x < c_in_g) {
    mu_s[threadIdx.x] =
        static_cast<double>(static_cast<const acc_t*>(a.mu)[n * s.C_in + g * c_in_g + threadIdx.x]);
  }
  double E = 0.0;  // thread i < K's entry
  for (int c0 = 0; c0 < c_out_g; c0 += kProductChannels) {
    const int nc = min(kProductChannels, c_out_g - c0);
    __syncthreads();  // mu_s written; the previous chunk is done with w_s and e_s
    stage_weights(w, c0, nc, K, w_s);
    __syncthreads();
    // nu and e of channel c by warp c % kWarpsPerBlock, its lanes over the K terms.
    for (int c = threadIdx.x / kWarpSize; c < nc; c += kWarpsPerBlock) {
      double nu = 0.0;
      for (int i = threadIdx.x % kWarpSize; i < K; i += kWarpSize) {
        nu += w_s[c][i] * mu_s[i / taps];
      }
      nu = warp_allreduce_sum(nu);
      if (threadIdx.x % kWarpSize == 0) {
        const double alpha = static_cast<double>(coef[3 * (c0 + c)]);
        e_s[c] = static_cast<double>(coef[3 * (c0 + c) + 2]) +
                 alpha * (nu - static_cast<double>(coef[3 * (c0 + c) + 1]));
      }
    }
    __syncthreads();
    if (threadIdx.x < K) {
      for (int c = 0; c < nc; ++c) {
        E += w_s[c][threadIdx.x] * e_s[c];
      }
    }
  }
  if (threadIdx.x < K) {
    E_s[threadIdx.x] = E;
  }
  __syncthreads();
  const int patterns = static_cast<int>(plan.patterns[0] * plan.patterns[1] * plan.patterns[2]);
  acc_t* out = static_cast<acc_t*>(a.constants) + item * patterns * 4;
  for (int t = threadIdx.x; t < patterns * 4; t += kThreads) {
    const int ch = t % 4;
    double sum = 0.0;
    if (ch < c_in_g) {
      const PatternRanges pr = pattern_ranges(plan, t / 4);
      for (int kd = pr.lo[0]; kd <= pr.hi[0]; ++kd) {
        for (int kh = pr.lo[1]; kh <= pr.hi[1]; ++kh) {
          for (int kw = pr.lo[2]; kw <= pr.hi[2]; ++kw) {
            sum += E_s[ch * taps + (kd * kH + kh) * kW + kw];
          }
        }
      }
    }
    out[t] = static_cast<acc_t>(sum);
  }
}

// ---------------------------------------------------------------------------------------
// 3. The tables.

// Per source (blockIdx.x), its tables from its Q (`q` + blockIdx.x * K * K, staged in shared
// memory) to `out` + blockIdx.x * table_elems: a thread per row (pattern, b, dh, dw) and D lag
// (its c_in_g values of the row; the last lag's also the row's padding), a source's spread over
// blocks (blockIdx.y).
template <typename Out>
__global__ void __launch_bounds__(kThreads)
    lag_tables_kernel(const LagArgs a, const double* q, Out* out) {
  extern __shared__ double q_s[];  // [K][K]
  const conv::Conv3dShape& s = a.p.conv;
  const conv::LagInputGradPlan& plan = a.plan;
  const int c_in_g = static_cast<int>(plan.c_in_g);
  const int kD = static_cast<int>(s.kD), kH = static_cast<int>(s.kH), kW = static_cast<int>(s.kW);
  const int taps = kD * kH * kW;
  const int K = c_in_g * taps;
  const double* Q = q + static_cast<int64_t>(blockIdx.x) * K * K;
  block_copy(K * K, [&](int i) { return Q[i]; }, [&](int i, double v) { q_s[i] = v; });
  __syncthreads();
  const int span_d = static_cast<int>(plan.span[0]);
  const int span_h = static_cast<int>(plan.span[1]), span_w = static_cast<int>(plan.span[2]);
  const int row = static_cast<int>(plan.row);
  const int patterns = static_cast<int>(plan.patterns[0] * plan.patterns[1] * plan.patterns[2]);
  const int i = static_cast<int>(blockIdx.y) * kThreads + threadIdx.x;
  if (i >= patterns * c_in_g * span_h * span_w * span_d) {
    return;
  }
  // T[pattern][b][dh][dw][dd * c_in_g + a]
  int rest = i;
  const int sd = rest % span_d;
  rest /= span_d;
  const int sw = rest % span_w;
  rest /= span_w;
  const int sh = rest % span_h;
  rest /= span_h;
  const int b = rest % c_in_g;
  const PatternRanges pr = pattern_ranges(plan, rest / c_in_g);
  // Per dim, the taps k in V with k + lag a tap.
  const int lag_d = sd - (kD - 1), lag_h = sh - (kH - 1), lag_w = sw - (kW - 1);
  const int d_lo = max(pr.lo[0], -lag_d), d_hi = min(pr.hi[0], kD - 1 - lag_d);
  const int h_lo = max(pr.lo[1], -lag_h), h_hi = min(pr.hi[1], kH - 1 - lag_h);
  const int w_lo = max(pr.lo[2], -lag_w), w_hi = min(pr.hi[2], kW - 1 - lag_w);
  Out* dst = out + static_cast<int64_t>(blockIdx.x) * plan.table_elems +
             static_cast<int64_t>(i / span_d) * row;
  for (int ch = 0; ch < c_in_g; ++ch) {  // the gradient's input channel a
    double sum = 0.0;
    for (int kd = d_lo; kd <= d_hi; ++kd) {
      for (int kh = h_lo; kh <= h_hi; ++kh) {
        const double* qr = q_s + (ch * taps + (kd * kH + kh) * kW) * K + b * taps +
                           ((kd + lag_d) * kH + kh + lag_h) * kW + lag_w;
        for (int kw = w_lo; kw <= w_hi; ++kw) {
          sum += qr[kw * (K + 1)];
        }
      }
    }
    dst[sd * c_in_g + ch] = static_cast<Out>(sum);
  }
  if (sd == span_d - 1) {
    for (int r = span_d * c_in_g; r < row; ++r) {
      dst[r] = Out(0);
    }
  }
}

// lag_combine_kernel: a product of the items' alphas [items][segments] and the segment tables
// [segments][elems], a thread per 2 elements and kCombineTileItems items at a time (16 double
// accumulators: each 16-byte load of 2 alphas from shared memory serves 4 multiply-adds), the
// segments' elements kCombineBatch at a time. At the Conv3d headline (H100, 2026-11-26) 0.080
// -> 0.062 ms a step against a thread per element and 24 items (2 multiply-adds per 16-byte
// load, 3 blocks per SM in 3 waves); a thread per element and every item one at a time, one
// alpha load per multiply-add, took 0.110. The alphas of a tile of items sit in shared memory:
// kCombineAlphas of them, at least kCombineTileItems items as the plan bounds the segments.
constexpr int kCombineTileItems = 8;
constexpr int kCombineBatch = 4;  // segments' elements loaded at once
constexpr int kCombineAlphas = 2048;
static_assert(conv::kLagMaxCombineSegments * kCombineTileItems <= kCombineAlphas,
              "a tile holds at least kCombineTileItems items' alphas");

// Two adjacent table elements by one store (through L2, where the input-gradient kernel reads
// them; a plain float2 assignment compiled to two 4-byte stores).
__device__ __forceinline__ void store_pair(float* dst, double a, double b) {
  __stcg(reinterpret_cast<float2*>(dst), make_float2(static_cast<float>(a), static_cast<float>(b)));
}
__device__ __forceinline__ void store_pair(double* dst, double a, double b) {
  __stcg(reinterpret_cast<double2*>(dst), make_double2(a, b));
}

// The tables of the chunk's items of conv group blockIdx.y (every groups-th item) from the
// segment tables: per table element and item, the sum over the segments of alpha[n, segment]
// (that of any of its channels; 0 for an empty segment, whose tables are 0) times the segment's
// element, in double and segment order. A thread takes 2 adjacent elements (table_elems is a
// multiple of 4) and walks its conv group's items kCombineTileItems at a time, its segment
// elements reloaded per walk step (from L1).
template <typename T>
__global__ void __launch_bounds__(kThreads, 3) lag_combine_kernel(const LagArgs a, int count) {
  using acc_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  __shared__ __align__(16) double alpha_s[kCombineAlphas];  // [segment][item of the tile]
  const int64_t elems = a.plan.table_elems;
  const int64_t e = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 2;
  const bool active = e < elems;
  const int groups = static_cast<int>(s.groups), cg = static_cast<int>(blockIdx.y);
  // The chunk's items of conv group cg: j = first + groups * t, t < cg_items.
  const int first = static_cast<int>(((cg - a.item0) % groups + groups) % groups);
  const int cg_items = (count - first + groups - 1) / groups;
  const int segments = static_cast<int>(a.plan.segments_per_group);
  const double* seg_elems = a.segment_tables + static_cast<int64_t>(cg) * segments * elems + e;
  // Items per tile of alphas: a multiple of kCombineTileItems, no more than the conv group has.
  const int tile = min(kCombineAlphas / segments / kCombineTileItems,
                       (cg_items + kCombineTileItems - 1) / kCombineTileItems) *
                   kCombineTileItems;
  acc_t* out = static_cast<acc_t*>(a.tables) + e;
  for (int t0 = 0; t0 < cg_items; t0 += tile) {
    const int items = min(tile, cg_items - t0);
    __syncthreads();  // the previous tile's alphas used
    for (int i = threadIdx.x; i < tile * segments; i += kThreads) {
      const int k = i / tile, t = i % tile;
      double alpha = 0.0;  // (items past the conv group's: 0, their sums not stored)
      if (t < items) {
        const Segment seg = lag_segment(a, cg, k);
        if (seg.begin < seg.end) {
          const int64_t n = (a.item0 + first + static_cast<int64_t>(groups) * (t0 + t)) / groups;
          alpha = static_cast<double>(static_cast<const acc_t*>(
              a.coefficients)[(n * s.C_out + cg * a.plan.c_out_g + seg.begin) * 3]);
        }
      }
      alpha_s[i] = alpha;
    }
    __syncthreads();
    if (!active) {
      continue;
    }
    for (int t1 = 0; t1 < items; t1 += kCombineTileItems) {
      double2 sums[kCombineTileItems];
#pragma unroll
      for (int t = 0; t < kCombineTileItems; ++t) {
        sums[t] = make_double2(0.0, 0.0);
      }
      for (int k0 = 0; k0 < segments; k0 += kCombineBatch) {
        // kCombineBatch segments' elements loaded together (one at a time, each load waited on
        // the previous segment's products: 0.079 ms a step).
        double2 value[kCombineBatch];
#pragma unroll
        for (int u = 0; u < kCombineBatch; ++u) {
          value[u] = k0 + u < segments
                         ? __ldg(reinterpret_cast<const double2*>(seg_elems + (k0 + u) * elems))
                         : make_double2(0.0, 0.0);
        }
#pragma unroll
        for (int u = 0; u < kCombineBatch; ++u) {
          if (k0 + u < segments) {
            const double2* alpha = reinterpret_cast<const double2*>(alpha_s + (k0 + u) * tile + t1);
#pragma unroll
            for (int t = 0; t < kCombineTileItems; t += 2) {
              const double2 pair = alpha[t / 2];
              sums[t].x += pair.x * value[u].x;
              sums[t].y += pair.x * value[u].y;
              sums[t + 1].x += pair.y * value[u].x;
              sums[t + 1].y += pair.y * value[u].y;
            }
          }
        }
      }
      const int stored = min(kCombineTileItems, items - t1);
      for (int t = 0; t < stored; ++t) {
        store_pair(out + static_cast<int64_t>(first + groups * (t0 + t1 + t)) * elems, sums[t].x,
                   sums[t].y);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// 4. The input gradient.

// A table row (kRow values, a multiple of 4, 16-byte aligned) into registers: its 16-byte
// vectors in kVectors (a bit each), the others 0 (known zeros: kUnpaddedOwn).
template <int kRow, unsigned kVectors = ~0u>
__device__ __forceinline__ void load_row(const float* __restrict__ src, float (&v)[kRow]) {
#pragma unroll
  for (int q = 0; q < kRow / 4; ++q) {
    const float4 t = (kVectors >> q & 1u) != 0 ? __ldg(reinterpret_cast<const float4*>(src) + q)
                                               : make_float4(0.f, 0.f, 0.f, 0.f);
    v[4 * q] = t.x, v[4 * q + 1] = t.y, v[4 * q + 2] = t.z, v[4 * q + 3] = t.w;
  }
}
template <int kRow, unsigned kVectors = ~0u>
__device__ __forceinline__ void load_row(const double* __restrict__ src, double (&v)[kRow]) {
#pragma unroll
  for (int q = 0; q < kRow / 2; ++q) {
    const double2 t = (kVectors >> q & 1u) != 0 ? __ldg(reinterpret_cast<const double2*>(src) + q)
                                                : make_double2(0.0, 0.0);
    v[2 * q] = t.x, v[2 * q + 1] = t.y;
  }
}

// The 16-byte vectors of a table row that can be non-zero where the row's plane has D tap range
// [lo, hi] (kD = 3): its lags dd along D are those from a tap of the range to any tap,
// [-hi, 2 - lo], at values (dd + 2) * kCi + a, kPerVector values a vector.
constexpr unsigned row_vectors(int lo, int hi, int kCi, int kPerVector) {
  const int v0 = (2 - hi) * kCi / kPerVector, v1 = ((5 - lo) * kCi + kPerVector - 1) / kPerVector;
  return ((1u << v1) - 1u) & ~((1u << v0) - 1u);
}

// A hint that the line at p will be read soon: to L1, without a register (the callers' addresses
// lie inside the tables).
__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}
constexpr int kPrefetchLags = 2;

// The D tap range's pattern of input plane d (dilation 1 along D: the family).
__device__ __forceinline__ int d_pattern(const conv::LagInputGradPlan& plan,
                                         const conv::Conv3dShape& s, int d) {
  const conv::TapRange r = conv::lag_tap_range<int>(
      d, static_cast<int>(s.Do), static_cast<int>(s.kD), static_cast<int>(s.padding[0]), 1);
  return plan.pattern_id[0][r.lo * conv::kLagMaxTaps + r.hi];
}

// A footprint column's kColumn values (D planes), contiguous from `col`, 16-byte aligned (the
// column's pitch, kPitch, a multiple of 4): float32 sums by 16-byte loads (the pitch's padding
// past the last such load not read).
template <int kColumn, int kPitch>
__device__ __forceinline__ void load_column(const float* col, float (&xv)[kColumn]) {
  static_assert(kPitch % 4 == 0 && kPitch >= kColumn, "whole 16-byte vectors");
#pragma unroll
  for (int q = 0; q < (kColumn + 3) / 4; ++q) {
    const float4 t = reinterpret_cast<const float4*>(col)[q];
    const float v[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (4 * q + i < kColumn) {
        xv[4 * q + i] = v[i];
      }
    }
  }
}
template <int kColumn, int kPitch>
__device__ __forceinline__ void load_column(const double* col, double (&xv)[kColumn]) {
#pragma unroll
  for (int i = 0; i < kColumn; ++i) {
    xv[i] = col[i];
  }
}

// The tile's centred footprint into x_s, a column of kColumn D planes per (b, fh, fw), D
// innermost, kPitch apart: x_s[((b * FH + fh) * FW + fw) * kPitch + fd] = x - mu inside the
// input, -mu in the padding (and 0 in a column's pitch padding). A thread per column: its
// kColumn loads in flight at once, then stored by 16-byte stores (a warp's columns are 16-byte
// vectors kPitch floats apart: conflict-free for kPitch = 12 or 20, 2-way for 8). The main loop
// reads a column by kColumn / 4 such loads; with W innermost (cp.async of single elements) the
// staging was ~20% of the kernel's instructions and a column took kColumn loads.
template <typename T, int kCi, int kColumn, int kPitch>
__device__ __forceinline__ void stage_centred_footprint(
    const T* __restrict__ sample, const typename ScalarOps<T>::acc_t* __restrict__ mu,
    typename ScalarOps<T>::acc_t* x_s, const conv::Conv3dShape& s, int id0, int ih0, int iw0,
    int FH, int FW) {
  using acc_t = typename ScalarOps<T>::acc_t;
  const int D = static_cast<int>(s.D), H = static_cast<int>(s.H), W = static_cast<int>(s.W);
  const int HW = H * W;  // (a channel's offsets fit in int: the plan checks D * H * W)
  const int64_t DHW = static_cast<int64_t>(D) * HW;
  const int columns = kCi * FH * FW;
  // Column q = (b * FH + fh) * FW + fw, its indices advanced by carries (divisions by the
  // runtime FW and FH were most of this loop's instructions).
  StridedRow column(static_cast<int>(threadIdx.x), kThreads, FH, FW);
  for (int q = threadIdx.x; q < columns; q += kThreads) {
    const int b = column.hi, fh = column.mid, fw = column.lo;
    const int ih = ih0 + fh, iw = iw0 + fw;
    const bool hw_inside = static_cast<unsigned>(ih) < static_cast<unsigned>(H) &&
                           static_cast<unsigned>(iw) < static_cast<unsigned>(W);
    const T* channel = sample + b * DHW;
    const int offset = ih * W + iw;
    const acc_t m = mu[b];
    acc_t v[kPitch];
#pragma unroll
    for (int i = 0; i < kPitch; ++i) {
      const int id = id0 + i;
      acc_t value = acc_t(0);
      if (i < kColumn && hw_inside && static_cast<unsigned>(id) < static_cast<unsigned>(D)) {
        value = ScalarOps<T>::to_acc(channel[id * HW + offset]);
      }
      v[i] = i < kColumn ? value - m : acc_t(0);
    }
    acc_t* dst = x_s + q * kPitch;
    if constexpr (std::is_same_v<acc_t, float>) {
#pragma unroll
      for (int i = 0; i < kPitch; i += 4) {
        *reinterpret_cast<float4*>(dst + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPitch; ++i) {
        dst[i] = v[i];
      }
    }
    column.advance();
  }
}

// acc[kJ] += (own - base) . the column's values from plane kJ: a column plane whose D tap
// range differs from the column's (a zero difference where it does not).
template <int kJ, int kR, int kCi, int kRow, int kColumn, typename acc_t>
__device__ __forceinline__ void add_row_difference(acc_t (&acc)[kR][kCi], const acc_t (&own)[kRow],
                                                   const acc_t (&base)[kRow],
                                                   const acc_t (&xv)[kColumn]) {
#pragma unroll
  for (int sd = 0; sd < kColumn - kR + 1; ++sd) {
#pragma unroll
    for (int c = 0; c < kCi; ++c) {
      acc[kJ][c] += (own[sd * kCi + c] - base[sd * kCi + c]) * xv[kJ + sd];
    }
  }
}

// The (H, W) pattern of position (h, w) of the input (past its end: the last position's).
struct HwPattern {
  int h, w;
};
__device__ __forceinline__ HwPattern hw_pattern_of(const conv::LagInputGradPlan& plan,
                                                   const conv::Conv3dShape& s, int h, int w) {
  const conv::TapRange rh = conv::lag_tap_range<int>(
      min(h, static_cast<int>(s.H) - 1), static_cast<int>(s.Ho), static_cast<int>(s.kH),
      static_cast<int>(s.padding[1]), static_cast<int>(s.dilation[1]));
  const conv::TapRange rw = conv::lag_tap_range<int>(
      min(w, static_cast<int>(s.W) - 1), static_cast<int>(s.Wo), static_cast<int>(s.kW),
      static_cast<int>(s.padding[2]), static_cast<int>(s.dilation[2]));
  return HwPattern{plan.pattern_id[1][rh.lo * conv::kLagMaxTaps + rh.hi],
                   plan.pattern_id[2][rw.lo * conv::kLagMaxTaps + rw.hi]};
}

// The tile position (th, tw) this thread computes. A warp's table rows are one load of one
// address when its positions share their (H, W) pattern, of one per pattern when they do not:
// with a warp per row of the tile, every warp of a tile that holds the input's W edges read 5
// rows per table load at the headline (twice the L1 sectors, and misses, of one). So the
// tile's positions are regrouped, in a fixed order: first those whose H and W patterns are both
// the tile centre's, then those differing in W only, in H only, in both, each class in
// row-major order; thread t takes the t-th. (Any assignment gives the same sums: a position's
// are one thread's, in a fixed order.) `scratch`: 4 * kWarpsPerBlock ints and kThreads shorts
// of shared memory (the footprint's: at least a tile's 8 x 32 columns of 4 values), free again
// when this returns.
__device__ __forceinline__ void grouped_tile_position(const conv::LagInputGradPlan& plan,
                                                      const conv::Conv3dShape& s, int h0, int w0,
                                                      unsigned char* scratch, int& th, int& tw) {
  constexpr int kClasses = 4;
  static_assert(kWarpsPerBlock * kClasses * 4 + kThreads * 2 <= kTileH * kTileW * 4 * 4,
                "the scratch within the smallest footprint");
  int* counts = reinterpret_cast<int*>(scratch);  // [warp][class]
  unsigned short* order = reinterpret_cast<unsigned short*>(counts + kWarpsPerBlock * kClasses);
  const int p = static_cast<int>(threadIdx.x);
  const int lane = p % kWarpSize, warp = p / kWarpSize;
  const HwPattern mine = hw_pattern_of(plan, s, h0 + p / kTileW, w0 + p % kTileW);
  const HwPattern centre = hw_pattern_of(plan, s, h0 + kTileH / 2, w0 + kTileW / 2);
  const int cls = (mine.h != centre.h ? 2 : 0) + (mine.w != centre.w ? 1 : 0);
  int rank = 0;
#pragma unroll
  for (int c = 0; c < kClasses; ++c) {
    const unsigned members = __ballot_sync(0xffffffffu, cls == c);
    if (cls == c) {
      rank = __popc(members & ((1u << lane) - 1u));
    }
    if (lane == 0) {
      counts[warp * kClasses + c] = __popc(members);
    }
  }
  __syncthreads();
  // (The warps before this one in its class, and every warp in the classes before it.)
  for (int w = 0; w < kWarpsPerBlock; ++w) {
    const int4 n = *reinterpret_cast<const int4*>(counts + w * kClasses);
    const int in_class[kClasses] = {n.x, n.y, n.z, n.w};
#pragma unroll
    for (int c = 0; c < kClasses; ++c) {
      rank += c < cls || (c == cls && w < warp) ? in_class[c] : 0;
    }
  }
  order[rank] = static_cast<unsigned short>(p);
  __syncthreads();
  const int q = order[p];
  th = q / kTileW;
  tw = q % kTileW;
  __syncthreads();  // (the scratch is the footprint's space)
}

template <typename T, int kCi, int kR>
__device__ __forceinline__ void lag_tile(const LagArgs& a, unsigned char* smem, int64_t n,
                                         int64_t g, int d0) {
  using acc_t = typename ScalarOps<T>::acc_t;
  constexpr int kSpanD = kSpanMax;  // kD = 3 (the family)
  constexpr int kColumn = kR + kSpanD - 1;
  constexpr int kPitch = static_cast<int>(conv::lag_column_pitch(kColumn));
  constexpr int kRow = (kSpanD * kCi + 3) / 4 * 4;
  const conv::Conv3dShape& s = a.p.conv;
  const conv::LagInputGradPlan& plan = a.plan;
  const int H = static_cast<int>(s.H), W = static_cast<int>(s.W);
  const int64_t DHW = s.D * s.H * s.W;
  const int span_h = static_cast<int>(plan.span[1]), span_w = static_cast<int>(plan.span[2]);
  const int dil_h = static_cast<int>(s.dilation[1]), dil_w = static_cast<int>(s.dilation[2]);
  const int FH = static_cast<int>(plan.FH), FW = static_cast<int>(plan.FW);
  const int w_tiles = static_cast<int>(plan.w_tiles);
  const int h0 = static_cast<int>(blockIdx.x) / w_tiles * kTileH;
  const int w0 = static_cast<int>(blockIdx.x) % w_tiles * kTileW;

  int th, tw;
  grouped_tile_position(plan, s, h0, w0, smem, th, tw);
  // The centred footprint: x - mu inside the input, -mu in the padding and beyond.
  acc_t* x_s = reinterpret_cast<acc_t*>(smem);
  const T* sample = static_cast<const T*>(a.p.x) + (n * s.C_in + g * kCi) * DHW;
  const acc_t* mu = static_cast<const acc_t*>(a.mu) + n * s.C_in + g * kCi;
  stage_centred_footprint<T, kCi, kColumn, kPitch>(sample, mu, x_s, s, d0 - (kSpanD - 1) / 2,
                                                   h0 - static_cast<int>(s.kH - 1) * dil_h,
                                                   w0 - static_cast<int>(s.kW - 1) * dil_w, FH, FW);
  __syncthreads();

  const int h = h0 + th, w = w0 + tw;
  // (Threads past the input's end take the last position's pattern and store nothing.)
  const HwPattern own = hw_pattern_of(plan, s, h, w);
  const int ph = own.h, pw = own.w;
  const int hw_patterns = static_cast<int>(plan.patterns[1] * plan.patterns[2]);
  const int hw_pattern = ph * static_cast<int>(plan.patterns[2]) + pw;
  const int per_pattern = kCi * span_h * span_w * kRow;
  const acc_t* table =
      static_cast<const acc_t*>(a.tables) + (n * s.groups + g - a.item0) * plan.table_elems;
  // The column's table (its middle plane's D range). Its first two and last two planes (the
  // low and the high pair; one pair where kR <= 2) may have their own range: the main pass
  // then takes their products from their own table's rows, whose loads are issued with the
  // column's. A column whose two pairs both differ (D of at most 8 or so) corrects the high
  // pair in a second pass, adding the difference of its rows from the column's.
  const int base_pd = d_pattern(plan, s, d0 + kR / 2);
  const acc_t* trow = table + (base_pd * hw_patterns + hw_pattern) * per_pattern;
  constexpr int kHigh0 = kR >= 4 ? kR - 2 : 0, kHigh1 = kR >= 2 ? kR - 1 : 0;
  const int pattern_stride = hw_patterns * per_pattern;
  const int low0 = (d_pattern(plan, s, d0) - base_pd) * pattern_stride;
  const int low1 = (d_pattern(plan, s, d0 + (kR >= 2 ? 1 : 0)) - base_pd) * pattern_stride;
  const int high0 = (d_pattern(plan, s, d0 + kHigh0) - base_pd) * pattern_stride;
  const int high1 = (d_pattern(plan, s, d0 + kHigh1) - base_pd) * pattern_stride;
  const bool low_differs = low0 != 0 || low1 != 0;
  const bool high_differs = kR >= 4 && (high0 != 0 || high1 != 0);
  // The pair the main pass corrects (0: none, 1: low, 2: high), and its rows' offsets.
  const int main_pair = low_differs ? 1 : high_differs ? 2 : 0;
  const int main0 = main_pair == 2 ? high0 : low0, main1 = main_pair == 2 ? high1 : low1;

  acc_t acc[kR][kCi];
#pragma unroll
  for (int j = 0; j < kR; ++j) {
#pragma unroll
    for (int c = 0; c < kCi; ++c) {
      acc[j][c] = acc_t(0);
    }
  }
  const acc_t* rows_end = trow + kCi * span_h * span_w * kRow;  // (the column's pattern's)
  // Every lag's table row and footprint column, in the tables' order (input channel, h lag,
  // w lag): visit(row, column).
  const auto for_each_lag = [&](auto&& visit) {
    const acc_t* row = trow;
    for (int b = 0; b < kCi; ++b) {
      for (int sh = 0; sh < span_h; ++sh) {
        const acc_t* col = x_s + ((b * FH + th + sh * dil_h) * FW + tw) * kPitch;
        for (int sw = 0; sw < span_w; ++sw) {
          visit(row, col);
          row += kRow;
          col += dil_w * kPitch;
        }
      }
    }
  };
  // The main pass: each plane's products with its table row, the column's or, for the pair it
  // corrects (kPair 1: the low, 2: the high), the plane's own (plane indices resolved at
  // compile time, so that a corrected plane costs no more than another). kKind, the pair's:
  //   kBothOwn: both planes have their own rows;
  //   kOuterOwn: only the pair's outer plane (the column's first or last) has its own range,
  //     as with padding (k - 1) / 2, where only the input's first and last planes differ: one
  //     own row per lag, not two (each row is 4 16-byte loads, 16 of the L1's data wavefronts
  //     per warp, the kernel's busiest unit);
  //   kUnpaddedOwn: both planes have their own rows, with the ranges of an unpadded D's first
  //     two planes ((0, 0), (0, 1)) or last two ((1, 2), (2, 2)): the rows' vectors that are
  //     zero for those ranges (row_vectors) are not loaded (3 of the pair's 8 at the headline).
  enum PairKind { kBothOwn, kOuterOwn, kUnpaddedOwn };
  const auto main_pass = [&](auto pair, auto kind) {
    constexpr int kPair = decltype(pair)::value;
    constexpr PairKind kKind = static_cast<PairKind>(decltype(kind)::value);
    constexpr int kOwn0 = kPair == 2 ? kHigh0 : 0;
    constexpr int kOwn1 = kPair == 2 ? kHigh1 : (kR >= 2 ? 1 : 0);
    constexpr bool kUse0 = kPair != 0 && (kKind != kOuterOwn || kPair == 1);
    constexpr bool kUse1 = kPair != 0 && (kKind != kOuterOwn || kPair == 2);
    constexpr int kPerVector = 16 / static_cast<int>(sizeof(acc_t));
    constexpr unsigned kVectors0 = kKind != kUnpaddedOwn ? ~0u
                                   : kPair == 1          ? row_vectors(0, 0, kCi, kPerVector)
                                                         : row_vectors(1, 2, kCi, kPerVector);
    constexpr unsigned kVectors1 = kKind != kUnpaddedOwn ? ~0u
                                   : kPair == 1          ? row_vectors(0, 1, kCi, kPerVector)
                                                         : row_vectors(2, 2, kCi, kPerVector);
    for_each_lag([&](const acc_t* row, const acc_t* col) {
      // The rows kPrefetchLags lags on towards L1 (the loads below then wait for L1, not L2).
      if (row + kPrefetchLags * kRow < rows_end) {
        prefetch_l1(row + kPrefetchLags * kRow);
        if constexpr (kUse0) {
          prefetch_l1(row + main0 + kPrefetchLags * kRow);
        }
        if constexpr (kUse1) {
          prefetch_l1(row + main1 + kPrefetchLags * kRow);
        }
      }
      acc_t tv[kRow], own0[kRow], own1[kRow];
      load_row<kRow>(row, tv);
      if constexpr (kUse0) {
        load_row<kRow, kVectors0>(row + main0, own0);
      }
      if constexpr (kUse1) {
        load_row<kRow, kVectors1>(row + main1, own1);
      }
      acc_t xv[kColumn];
      load_column<kColumn, kPitch>(col, xv);
#pragma unroll
      for (int sd = 0; sd < kSpanD; ++sd) {
#pragma unroll
        for (int c = 0; c < kCi; ++c) {
#pragma unroll
          for (int j = 0; j < kR; ++j) {
            acc_t t = tv[sd * kCi + c];
            if constexpr (kUse1) {
              t = j == kOwn1 ? own1[sd * kCi + c] : t;
            }
            if constexpr (kUse0) {
              t = j == kOwn0 && !(kUse1 && j == kOwn1) ? own0[sd * kCi + c] : t;
            }
            acc[j][c] += t * xv[j + sd];
          }
        }
      }
    });
  };
  // (Uniform: the whole block's column.) The pair's kind from its planes' D tap ranges.
  const auto d_range_is = [&](int d, int lo, int hi) {
    const conv::TapRange r = conv::lag_tap_range<int>(d, static_cast<int>(s.Do), kSpanD / 2 + 1,
                                                      static_cast<int>(s.padding[0]), 1);
    return r.lo == lo && r.hi == hi;
  };
  using Both = std::integral_constant<int, kBothOwn>;
  using Outer = std::integral_constant<int, kOuterOwn>;
  using Unpadded = std::integral_constant<int, kUnpaddedOwn>;
  if (main_pair == 1) {
    if (main1 == 0 && kR >= 2) {
      main_pass(std::integral_constant<int, 1>{}, Outer{});
    } else if (kR >= 2 && d_range_is(d0, 0, 0) && d_range_is(d0 + 1, 0, 1)) {
      main_pass(std::integral_constant<int, 1>{}, Unpadded{});
    } else {
      main_pass(std::integral_constant<int, 1>{}, Both{});
    }
  } else if (main_pair == 2) {
    if (main0 == 0) {
      main_pass(std::integral_constant<int, 2>{}, Outer{});
    } else if (d_range_is(d0 + kHigh0, 1, 2) && d_range_is(d0 + kHigh1, 2, 2)) {
      main_pass(std::integral_constant<int, 2>{}, Unpadded{});
    } else {
      main_pass(std::integral_constant<int, 2>{}, Both{});
    }
  } else {
    main_pass(std::integral_constant<int, 0>{}, Both{});
  }
  if (main_pair == 1 && high_differs) {
    for_each_lag([&](const acc_t* row, const acc_t* col) {
      acc_t tv[kRow], own0[kRow], own1[kRow];
      load_row<kRow>(row, tv);
      load_row<kRow>(row + high0, own0);
      load_row<kRow>(row + high1, own1);
      acc_t xv[kColumn];
      load_column<kColumn, kPitch>(col, xv);
      add_row_difference<kHigh0>(acc, own0, tv, xv);
      add_row_difference<kHigh1>(acc, own1, tv, xv);
    });
  }
  if (h < H && w < W) {
    const int patterns = static_cast<int>(plan.patterns[0]) * hw_patterns;
    const acc_t* constants =
        static_cast<const acc_t*>(a.constants) + (n * s.groups + g) * patterns * 4;
    T* dx = static_cast<T*>(a.p.dx) + (n * s.C_in + g * kCi) * DHW +
            (static_cast<int64_t>(d0) * H + h) * W + w;
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      const int pattern = d_pattern(plan, s, d0 + j) * hw_patterns + hw_pattern;
#pragma unroll
      for (int c = 0; c < kCi; ++c) {
        dx[c * DHW + static_cast<int64_t>(j) * H * W] =
            ScalarOps<T>::from_acc(acc[j][c] + constants[pattern * 4 + c]);
      }
    }
  }
}

// blockIdx: x the (h, w) tile, y the D column (columns of 12 from 0, then 8, 4, 2, 1), z the
// chunk's item.
template <typename T, int kCi>
__global__ void __launch_bounds__(kThreads, 2) lag_input_grad_kernel(const LagArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kMaxDepth = static_cast<int>(conv::kLagMaxTileD);
  const int D = static_cast<int>(a.p.conv.D);
  const int t = static_cast<int>(blockIdx.y);
  const int full = D / kMaxDepth;
  int d0 = t * kMaxDepth, depth = kMaxDepth;
  if (t >= full) {  // the rest: 8, 4, 2, 1 in that order
    int index = t - full;
    d0 = full * kMaxDepth;
    depth = 0;
    for (int part = static_cast<int>(conv::kLagRestTileD); part > 0; part /= 2) {
      if ((D % kMaxDepth & part) != 0) {
        if (index == 0) {
          depth = part;
          break;
        }
        --index;
        d0 += part;
      }
    }
  }
  const int64_t item = a.item0 + blockIdx.z;
  const int64_t n = item / a.p.conv.groups, g = item % a.p.conv.groups;
  switch (depth) {
    case 12:
      lag_tile<T, kCi, 12>(a, smem, n, g, d0);
      break;
    case 8:
      lag_tile<T, kCi, 8>(a, smem, n, g, d0);
      break;
    case 4:
      lag_tile<T, kCi, 4>(a, smem, n, g, d0);
      break;
    case 2:
      lag_tile<T, kCi, 2>(a, smem, n, g, d0);
      break;
    case 1:
      lag_tile<T, kCi, 1>(a, smem, n, g, d0);
      break;
    default:
      break;
  }
}

template <typename T>
auto input_grad_kernel(int64_t c_in_g) -> void (*)(LagArgs) {
  switch (c_in_g) {
    case 1:
      return lag_input_grad_kernel<T, 1>;
    case 2:
      return lag_input_grad_kernel<T, 2>;
    case 3:
      return lag_input_grad_kernel<T, 3>;
    case 4:
      return lag_input_grad_kernel<T, 4>;
    default:
      return nullptr;
  }
}

struct LagWorkspace {
  double* segment_products;
  double* segment_tables;
  double* products;
  void* tables;
  void* constants;
  size_t bytes;
};

template <typename T>
LagWorkspace carve_lag(const conv::Conv3dGroupNormMeanBackwardParams& p,
                       const conv::LagInputGradPlan& plan, void* base) {
  using acc_t = typename ScalarOps<T>::acc_t;
  WorkspaceCarver carver(base);
  LagWorkspace ws{};
  const conv::Conv3dShape& s = p.conv;
  const int64_t K = lag_reduction(s, plan);
  if (plan.segment_tables) {
    const int64_t segments = s.groups * plan.segments_per_group;
    ws.segment_products = carver.take<double>(segments * K * K);
    ws.segment_tables = carver.take<double>(segments * plan.table_elems);
  } else {
    ws.products = carver.take<double>(plan.items_per_chunk * K * K);
  }
  ws.tables = carver.take<acc_t>(plan.items_per_chunk * plan.table_elems);
  ws.constants = carver.take<acc_t>(s.N * s.groups * plan.patterns[0] * plan.patterns[1] *
                                    plan.patterns[2] * 4);
  ws.bytes = carver.bytes();
  return ws;
}

// Q of `sources` sources (segments, or the chunk's items), then their tables.
template <typename T, typename Out>
cudaError_t launch_products_and_tables(const LagArgs& args, int64_t sources, bool segments,
                                       double* products, Out* tables, cudaStream_t stream) {
  const conv::LagInputGradPlan& plan = args.plan;
  const int64_t K = lag_reduction(args.p.conv, plan);
  lag_products_kernel<T>
      <<<dim3(static_cast<unsigned>(sources), static_cast<unsigned>(product_splits(K))), kThreads,
         0, stream>>>(args, segments, products);
  FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  const int64_t threads = plan.patterns[0] * plan.patterns[1] * plan.patterns[2] * plan.c_in_g *
                          plan.span[0] * plan.span[1] * plan.span[2];
  const size_t q_bytes = static_cast<size_t>(K * K) * sizeof(double);  // (the plan checks it fits)
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(lag_tables_kernel<Out>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      static_cast<int>(q_bytes)));
  lag_tables_kernel<Out>
      <<<dim3(static_cast<unsigned>(sources), static_cast<unsigned>(ceil_div(threads, kThreads))),
         kThreads, q_bytes, stream>>>(args, products, tables);
  return cudaGetLastError();
}

}  // namespace

bool lag_input_grad_enabled() { return !env_switch_off("FUSED_OPS_CONV3D_LAG_INPUT_GRAD"); }

conv::LagInputGradPlan lag_input_grad_plan(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                           bool weight_grad_elsewhere, size_t table_bytes) {
  // Where the tile kernel computes the weight gradient, it computes the input gradient too for
  // less than these kernels take (benchmarks/h100-2026-11-23-lag).
  if (p.dx == nullptr || (p.dweight != nullptr && !weight_grad_elsewhere)) {
    return {};
  }
  const DeviceInfo device = current_device_info();
  return conv::plan_conv3d_group_norm_mean_lag_input_grad(
      p.conv, p.num_groups, p.dtype, device.shared_memory, device.multiprocessors, table_bytes);
}

template <typename T>
size_t lag_input_grad_workspace_bytes(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                      const conv::LagInputGradPlan& plan) {
  return plan.supported ? carve_lag<T>(p, plan, nullptr).bytes : 0;
}

template <typename T>
cudaError_t launch_input_channel_means(const conv::Conv3dGroupNormMeanBackwardParams& p, void* mu,
                                       cudaStream_t stream) {
  const conv::Conv3dShape& s = p.conv;
  if (!grid_fits(s.N * s.C_in)) {
    return cudaErrorInvalidConfiguration;
  }
  lag_mean_kernel<T><<<static_cast<unsigned>(s.N * s.C_in), kThreads, 0, stream>>>(
      static_cast<const T*>(p.x), s.D * s.H * s.W, mu);
  return cudaGetLastError();
}

template <typename T>
cudaError_t lag_input_grad_launch(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                  const conv::LagInputGradPlan& plan, const void* coefficients,
                                  const void* mu, void* workspace, cudaStream_t stream) {
  using acc_t = typename ScalarOps<T>::acc_t;
  const auto dx_kernel = input_grad_kernel<T>(plan.c_in_g);
  if (!plan.supported || dx_kernel == nullptr) {
    return cudaErrorInvalidValue;
  }
  const LagWorkspace ws = carve_lag<T>(p, plan, workspace);
  LagArgs args{p, plan, coefficients, mu, ws.segment_tables, ws.tables, ws.constants, 0};
  const conv::Conv3dShape& s = p.conv;
  const int64_t items = s.N * s.groups;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(
      dx_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem_bytes)));
  if (!grid_fits(items)) {
    return cudaErrorInvalidConfiguration;
  }
  lag_constants_kernel<T><<<static_cast<unsigned>(items), kThreads, 0, stream>>>(args);
  FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  if (plan.segment_tables) {  // once: the segments' Q and tables
    FUSED_OPS_RETURN_IF_CUDA_ERROR(
        launch_products_and_tables<T>(args, s.groups * plan.segments_per_group, true,
                                      ws.segment_products, ws.segment_tables, stream));
  }
  for (int64_t item0 = 0; item0 < items; item0 += plan.items_per_chunk) {
    const int64_t count = std::min(plan.items_per_chunk, items - item0);
    args.item0 = item0;
    if (plan.segment_tables) {
      lag_combine_kernel<T><<<dim3(static_cast<unsigned>(ceil_div(plan.table_elems, 2 * kThreads)),
                                   static_cast<unsigned>(s.groups)),
                              kThreads, 0, stream>>>(args, static_cast<int>(count));
      FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
    } else {
      FUSED_OPS_RETURN_IF_CUDA_ERROR(launch_products_and_tables<T>(
          args, count, false, ws.products, static_cast<acc_t*>(ws.tables), stream));
    }
    const dim3 grid(static_cast<unsigned>(plan.w_tiles * plan.h_tiles),
                    static_cast<unsigned>(plan.d_tiles), static_cast<unsigned>(count));
    dx_kernel<<<grid, kThreads, plan.smem_bytes, stream>>>(args);
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  }
  return cudaSuccess;
}

#define FUSED_OPS_INSTANTIATE_LAG(T)                                                            \
  template size_t lag_input_grad_workspace_bytes<T>(                                            \
      const conv::Conv3dGroupNormMeanBackwardParams&, const conv::LagInputGradPlan&);           \
  template cudaError_t launch_input_channel_means<T>(                                           \
      const conv::Conv3dGroupNormMeanBackwardParams&, void*, cudaStream_t);                     \
  template cudaError_t lag_input_grad_launch<T>(const conv::Conv3dGroupNormMeanBackwardParams&, \
                                                const conv::LagInputGradPlan&, const void*,     \
                                                const void*, void*, cudaStream_t);
FUSED_OPS_INSTANTIATE_LAG(float)
FUSED_OPS_INSTANTIATE_LAG(double)
FUSED_OPS_INSTANTIATE_LAG(__half)
FUSED_OPS_INSTANTIATE_LAG(__nv_bfloat16)
#undef FUSED_OPS_INSTANTIATE_LAG

}  // namespace gpu
}  // namespace fused_ops
