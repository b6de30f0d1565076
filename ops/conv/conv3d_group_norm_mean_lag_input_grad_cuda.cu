// The lag input gradient of the one-pass conv3d_group_norm_mean backward (stride 1): dx from
// tables of weight products and the centred input, without the convolution's output
// (conv_kernels.h, LagInputGradPlan: the identity, the family, the table layout).
//
// 1. lag_mean_kernel (launch_input_channel_means; the backward's launcher runs it once for this
//    and the Gram weight gradient): mu[n, ci], the input's mean per (sample, channel) (a block
//    per row, in a fixed order), rounded to the accumulation type: the tables and the centred
//    footprints use that one value.
// 2. lag_products_kernel: per (sample, conv group) item of a chunk, in double, the group's
//    Q = sum_c alpha[c] w[c] w[c]^T ((C_in/groups * k^3)^2 entries) and E[a, k] (blocks share
//    an item's entries; the weights pass through shared memory 16 channels at a time).
// 3. lag_tables_kernel: for every pattern P = (pd, ph, pw) of tap ranges and lag
//    d = (dd, dh, dw) the table
//      T[P][b][dh][dw][dd * c_in_g + a] = sum over taps k in V(P) with k + d a tap of
//                                         Q[(a, k), (b, k + d)]
//    and the constants sum over k in V(P) of E[a, k], in the accumulation type (a thread per
//    row).
// 4. lag_input_grad_kernel: a block per tile of 32 (W: lanes) x 8 (H: warps) x R (D) input
//    positions: D cut into columns of 8 from 0, the rest into 4, 2, 1. The tile's centred
//    footprint (c_in_g x (R + 4) x FH x FW) sits in shared memory; a thread keeps its column's
//    R x c_in_g sums in registers and, per input channel b and lag (dh, dw), loads the R + 4
//    footprint values of its column and one table row (5 x c_in_g values by 16-byte loads: the
//    same row for the whole warp unless its positions' tap ranges differ along W), then does
//    R x 5 x c_in_g multiply-adds (headline: 8 x 5 x 3 = 120 per 12 shared and 4 global
//    loads). The column's table is that of its middle plane's tap range along D; the first and
//    last two planes, the only ones whose range can differ, add the difference of their own
//    table's row where it does (the correction slots).
// No atomics: every element is written once, by one thread, its sum in a fixed order.
#include "common/cuda/device_info.cuh"
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "conv/conv3d_group_norm_mean_lag_input_grad.cuh"
#include "conv/conv_input_box.cuh"

#include <algorithm>

namespace fused_ops {
namespace gpu {
namespace {

struct LagArgs {
  conv::Conv3dGroupNormMeanBackwardParams p;
  conv::LagInputGradPlan plan;
  const void* coefficients;  // [N][C_out][3] of acc_t: alpha, m0, gamma
  const void* mu;            // [N][C_in] of acc_t
  double* products;          // [items_per_chunk][K * K + K]: Q, then E
  void* tables;              // [items_per_chunk][table_elems] of acc_t
  int64_t item0;             // the chunk's first item: n * groups + conv group
};

constexpr int kSpanMax = static_cast<int>(conv::kLagMaxSpan);
constexpr int kTileW = static_cast<int>(conv::kLagTileW);
constexpr int kTileH = static_cast<int>(conv::kLagTileH);
static_assert(kTileW * kTileH == kThreads, "a thread per (h, w) position of a tile");
static_assert(kTileW == kWarpSize, "a warp per row of a tile");

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
// 2. Q and E.

constexpr int kProductChannels = 16;  // weights in shared memory at a time
constexpr int kProductsPerThread = 2;
constexpr int kMaxReduction = static_cast<int>(conv::kLagMaxInputChannels * conv::kLagMaxTaps *
                                               conv::kLagMaxTaps * conv::kLagMaxTaps);

// Blocks per item for the products (each thread at most kProductsPerThread entries).
inline int64_t product_splits(int64_t K) {
  return ceil_div(K * K + K, static_cast<int64_t>(kThreads) * kProductsPerThread);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) lag_products_kernel(const LagArgs a) {
  using acc_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  const int c_in_g = static_cast<int>(a.plan.c_in_g), c_out_g = static_cast<int>(a.plan.c_out_g);
  const int taps = static_cast<int>(s.kD * s.kH * s.kW);
  const int K = c_in_g * taps;  // (a, k) index: a * taps + (kd * kH + kh) * kW + kw
  __shared__ double w_s[kProductChannels][kMaxReduction];
  __shared__ double alpha_s[kProductChannels], e_s[kProductChannels];
  __shared__ double mu_s[conv::kLagMaxInputChannels];

  const int64_t item = a.item0 + blockIdx.x;
  const int64_t n = item / s.groups, g = item % s.groups;
  const T* w = static_cast<const T*>(a.p.weight) + g * c_out_g * K;  // [c_out_g][K]
  const acc_t* coef = static_cast<const acc_t*>(a.coefficients) + (n * s.C_out + g * c_out_g) * 3;
  const acc_t* mu = static_cast<const acc_t*>(a.mu) + n * s.C_in + g * c_in_g;
  if (threadIdx.x < c_in_g) {
    mu_s[threadIdx.x] = static_cast<double>(mu[threadIdx.x]);
  }
  // This thread's entries: Q's (i < K * K) and E's.
  const int first = static_cast<int>(blockIdx.y) * kThreads * kProductsPerThread + threadIdx.x;
  double sums[kProductsPerThread];
#pragma unroll
  for (int e = 0; e < kProductsPerThread; ++e) {
    sums[e] = 0.0;
  }
  for (int c0 = 0; c0 < c_out_g; c0 += kProductChannels) {
    const int nc = min(kProductChannels, c_out_g - c0);
    __syncthreads();  // mu_s written; the previous chunk is done with w_s
    for (int i = threadIdx.x; i < nc * K; i += kThreads) {
      w_s[i / K][i % K] = ScalarOps<T>::to_double(w[c0 * K + i]);
    }
    __syncthreads();
    // e[c] = gamma + alpha * (nu - m0), nu = sum_{b, k} w[c, b, k] mu[b]: the constant part
    // of dy[c] once y0 = conv(x - mu) + nu.
    if (threadIdx.x < nc) {
      const int c = threadIdx.x;
      double nu = 0.0;
      for (int i = 0; i < K; ++i) {
        nu += w_s[c][i] * mu_s[i / taps];
      }
      const double alpha = static_cast<double>(coef[3 * (c0 + c)]);
      alpha_s[c] = alpha;
      e_s[c] = static_cast<double>(coef[3 * (c0 + c) + 2]) +
               alpha * (nu - static_cast<double>(coef[3 * (c0 + c) + 1]));
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
      } else if (i < K * K + K) {
        for (int c = 0; c < nc; ++c) {
          sums[e] += w_s[c][i - K * K] * e_s[c];
        }
      }
    }
  }
  double* out = a.products + static_cast<int64_t>(blockIdx.x) * (K * K + K);
#pragma unroll
  for (int e = 0; e < kProductsPerThread; ++e) {
    const int i = first + e * kThreads;
    if (i < K * K + K) {
      out[i] = sums[e];
    }
  }
}

// ---------------------------------------------------------------------------------------
// 3. The tables.

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

// A thread per table row (pattern, b, dh, dw) or per pattern's constants; an item's rows spread
// over blocks.
template <typename T>
__global__ void __launch_bounds__(kThreads) lag_tables_kernel(const LagArgs a) {
  using acc_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  const conv::LagInputGradPlan& plan = a.plan;
  const int c_in_g = static_cast<int>(plan.c_in_g);
  const int kD = static_cast<int>(s.kD), kH = static_cast<int>(s.kH), kW = static_cast<int>(s.kW);
  const int taps = kD * kH * kW;
  const int K = c_in_g * taps;
  const double* Q = a.products + static_cast<int64_t>(blockIdx.x) * (K * K + K);  // then E
  const double* E = Q + K * K;
  const int span_h = static_cast<int>(plan.span[1]), span_w = static_cast<int>(plan.span[2]);
  const int row = static_cast<int>(plan.row);
  const int patterns = static_cast<int>(plan.patterns[0] * plan.patterns[1] * plan.patterns[2]);
  const int rows = patterns * c_in_g * span_h * span_w;
  acc_t* out = static_cast<acc_t*>(a.tables) + static_cast<int64_t>(blockIdx.x) * plan.table_elems;
  const int i = static_cast<int>(blockIdx.y) * kThreads + threadIdx.x;
  if (i < rows) {  // T[pattern][b][dh][dw][dd * c_in_g + a]
    int rest = i;
    const int sw = rest % span_w;
    rest /= span_w;
    const int sh = rest % span_h;
    rest /= span_h;
    const int b = rest % c_in_g;
    const PatternRanges pr = pattern_ranges(plan, rest / c_in_g);
    // Per dim, the taps k in V with k + lag a tap.
    const int lag_h = sh - (kH - 1), lag_w = sw - (kW - 1);
    const int h_lo = max(pr.lo[1], -lag_h), h_hi = min(pr.hi[1], kH - 1 - lag_h);
    const int w_lo = max(pr.lo[2], -lag_w), w_hi = min(pr.hi[2], kW - 1 - lag_w);
    acc_t* dst = out + static_cast<int64_t>(i) * row;
    int r = 0;
    for (int lag_d = -(kD - 1); lag_d <= kD - 1; ++lag_d) {
      const int d_lo = max(pr.lo[0], -lag_d), d_hi = min(pr.hi[0], kD - 1 - lag_d);
      for (int ch = 0; ch < c_in_g; ++ch, ++r) {  // the gradient's input channel a
        double sum = 0.0;
        for (int kd = d_lo; kd <= d_hi; ++kd) {
          for (int kh = h_lo; kh <= h_hi; ++kh) {
            const double* q = Q + (ch * taps + (kd * kH + kh) * kW) * K + b * taps +
                              ((kd + lag_d) * kH + kh + lag_h) * kW + lag_w;
            for (int kw = w_lo; kw <= w_hi; ++kw) {
              sum += __ldg(q + kw * (K + 1));
            }
          }
        }
        dst[r] = static_cast<acc_t>(sum);
      }
    }
    for (; r < row; ++r) {
      dst[r] = acc_t(0);
    }
  } else if (i < rows + patterns) {  // the constants [pattern][4]
    const int pattern = i - rows;
    const PatternRanges pr = pattern_ranges(plan, pattern);
    acc_t* dst = out + static_cast<int64_t>(rows) * row + pattern * 4;
    for (int ch = 0; ch < 4; ++ch) {
      double sum = 0.0;
      if (ch < c_in_g) {
        for (int kd = pr.lo[0]; kd <= pr.hi[0]; ++kd) {
          for (int kh = pr.lo[1]; kh <= pr.hi[1]; ++kh) {
            for (int kw = pr.lo[2]; kw <= pr.hi[2]; ++kw) {
              sum += __ldg(E + ch * taps + (kd * kH + kh) * kW + kw);
            }
          }
        }
      }
      dst[ch] = static_cast<acc_t>(sum);
    }
  }
}

// ---------------------------------------------------------------------------------------
// 4. The input gradient.

// A table row (kRow values, a multiple of 4, 16-byte aligned) into registers.
template <int kRow>
__device__ __forceinline__ void load_row(const float* __restrict__ src, float (&v)[kRow]) {
#pragma unroll
  for (int q = 0; q < kRow / 4; ++q) {
    const float4 t = __ldg(reinterpret_cast<const float4*>(src) + q);
    v[4 * q] = t.x, v[4 * q + 1] = t.y, v[4 * q + 2] = t.z, v[4 * q + 3] = t.w;
  }
}
template <int kRow>
__device__ __forceinline__ void load_row(const double* __restrict__ src, double (&v)[kRow]) {
#pragma unroll
  for (int q = 0; q < kRow / 2; ++q) {
    const double2 t = __ldg(reinterpret_cast<const double2*>(src) + q);
    v[2 * q] = t.x, v[2 * q + 1] = t.y;
  }
}

// The D tap range's pattern of input plane d.
__device__ __forceinline__ int d_pattern(const conv::LagInputGradPlan& plan,
                                         const conv::Conv3dShape& s, int d) {
  const conv::TapRange r = conv::lag_tap_range(d, s.Do, s.kD, s.padding[0], 1);
  return plan.pattern_id[0][r.lo * conv::kLagMaxTaps + r.hi];
}

// A thread's column of the footprint: kColumn values `plane` elements apart.
template <int kColumn, typename acc_t>
__device__ __forceinline__ void load_column(const acc_t* col, int plane, acc_t (&xv)[kColumn]) {
#pragma unroll
  for (int i = 0; i < kColumn; ++i) {
    xv[i] = col[i * plane];
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

template <typename T, int kCi, int kR>
__device__ __forceinline__ void lag_tile(const LagArgs& a, unsigned char* smem, int64_t n,
                                         int64_t g, int d0) {
  using acc_t = typename ScalarOps<T>::acc_t;
  constexpr int kSpanD = kSpanMax;  // kD = 3 (the family)
  constexpr int kColumn = kR + kSpanD - 1;
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

  // The centred footprint: x - mu inside the input, -mu in the padding and beyond.
  acc_t* x_s = reinterpret_cast<acc_t*>(smem);
  const T* sample = static_cast<const T*>(a.p.x) + (n * s.C_in + g * kCi) * DHW;
  const InputBox box{kCi,
                     d0 - (kSpanD - 1) / 2,
                     h0 - static_cast<int>(s.kH - 1) * dil_h,
                     w0 - static_cast<int>(s.kW - 1) * dil_w,
                     kColumn,
                     FH,
                     FW};
  load_footprint<T, acc_t>(sample, x_s, s, box, false);
  const acc_t* mu = static_cast<const acc_t*>(a.mu) + n * s.C_in + g * kCi;
  const int plane = kColumn * FH * FW;
  cp_async_wait_all();
  __syncthreads();
#pragma unroll
  for (int b = 0; b < kCi; ++b) {
    const acc_t m = mu[b];
    for (int i = threadIdx.x; i < plane; i += kThreads) {
      x_s[b * plane + i] -= m;
    }
  }
  __syncthreads();

  const int tw = threadIdx.x % kTileW, th = threadIdx.x / kTileW;
  const int h = h0 + th, w = w0 + tw;
  // (Threads past the input's end take the last position's pattern and store nothing.)
  const conv::TapRange rh =
      conv::lag_tap_range(min(h, H - 1), s.Ho, s.kH, s.padding[1], s.dilation[1]);
  const conv::TapRange rw =
      conv::lag_tap_range(min(w, W - 1), s.Wo, s.kW, s.padding[2], s.dilation[2]);
  const int ph = plan.pattern_id[1][rh.lo * conv::kLagMaxTaps + rh.hi];
  const int pw = plan.pattern_id[2][rw.lo * conv::kLagMaxTaps + rw.hi];
  const int hw_patterns = static_cast<int>(plan.patterns[1] * plan.patterns[2]);
  const int hw_pattern = ph * static_cast<int>(plan.patterns[2]) + pw;
  const int per_pattern = kCi * span_h * span_w * kRow;
  const acc_t* table =
      static_cast<const acc_t*>(a.tables) + (n * s.groups + g - a.item0) * plan.table_elems;
  // The column's table (its middle plane's D range). Its first two and last two planes (the
  // low and the high pair; one pair where kR <= 2) may have their own range: the products
  // then add the difference of their own table's row, whose loads are issued before the
  // column's products so that their latency overlaps them. A column whose two pairs both
  // differ (D of at most 8 or so) corrects the high pair in a second pass.
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
  const int plane_hw = FH * FW;
  // Every lag's table row and footprint column, in the tables' order (input channel, h lag,
  // w lag): visit(row, column).
  const auto for_each_lag = [&](auto&& visit) {
    const acc_t* row = trow;
    for (int b = 0; b < kCi; ++b) {
      for (int sh = 0; sh < span_h; ++sh) {
        const acc_t* col_row = x_s + (b * kColumn * FH + th + sh * dil_h) * FW + tw;
        for (int sw = 0; sw < span_w; ++sw) {
          visit(row, col_row + sw * dil_w);
          row += kRow;
        }
      }
    }
  };
  for_each_lag([&](const acc_t* row, const acc_t* col) {
    acc_t tv[kRow], own0[kRow], own1[kRow];
    load_row<kRow>(row, tv);
    if (main_pair != 0) {  // (uniform: the whole block's column)
      load_row<kRow>(row + main0, own0);
      load_row<kRow>(row + main1, own1);
    }
    acc_t xv[kColumn];
    load_column(col, plane_hw, xv);
#pragma unroll
    for (int sd = 0; sd < kSpanD; ++sd) {
#pragma unroll
      for (int c = 0; c < kCi; ++c) {
#pragma unroll
        for (int j = 0; j < kR; ++j) {
          acc[j][c] += tv[sd * kCi + c] * xv[j + sd];
        }
      }
    }
    if (main_pair == 1) {
      add_row_difference<0>(acc, own0, tv, xv);
      add_row_difference<kR >= 2 ? 1 : 0>(acc, own1, tv, xv);
    } else if (main_pair == 2) {
      add_row_difference<kHigh0>(acc, own0, tv, xv);
      add_row_difference<kHigh1>(acc, own1, tv, xv);
    }
  });
  if (main_pair == 1 && high_differs) {
    for_each_lag([&](const acc_t* row, const acc_t* col) {
      acc_t tv[kRow], own0[kRow], own1[kRow];
      load_row<kRow>(row, tv);
      load_row<kRow>(row + high0, own0);
      load_row<kRow>(row + high1, own1);
      acc_t xv[kColumn];
      load_column(col, plane_hw, xv);
      add_row_difference<kHigh0>(acc, own0, tv, xv);
      add_row_difference<kHigh1>(acc, own1, tv, xv);
    });
  }
  if (h < H && w < W) {
    const int patterns = static_cast<int>(plan.patterns[0]) * hw_patterns;
    const acc_t* constants = table + patterns * per_pattern;
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

// blockIdx: x the (h, w) tile, y the D column (columns of 8 from 0, then 4, 2, 1), z the
// chunk's item.
template <typename T, int kCi>
__global__ void __launch_bounds__(kThreads, 2) lag_input_grad_kernel(const LagArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kMaxDepth = static_cast<int>(conv::kLagMaxTileD);
  const int D = static_cast<int>(a.p.conv.D);
  const int t = static_cast<int>(blockIdx.y);
  const int full = D / kMaxDepth;
  int d0 = t * kMaxDepth, depth = kMaxDepth;
  if (t >= full) {  // the rest: 4, 2, 1 in that order
    int index = t - full;
    d0 = full * kMaxDepth;
    depth = 0;
    for (int part = kMaxDepth / 2; part > 0; part /= 2) {
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
  double* products;
  void* tables;
  size_t bytes;
};

template <typename T>
LagWorkspace carve_lag(const conv::Conv3dGroupNormMeanBackwardParams& p,
                       const conv::LagInputGradPlan& plan, void* base) {
  using acc_t = typename ScalarOps<T>::acc_t;
  WorkspaceCarver carver(base);
  LagWorkspace ws;
  const int64_t K = plan.c_in_g * p.conv.kD * p.conv.kH * p.conv.kW;
  ws.products = carver.take<double>(plan.items_per_chunk * (K * K + K));
  ws.tables = carver.take<acc_t>(plan.items_per_chunk * plan.table_elems);
  ws.bytes = carver.bytes();
  return ws;
}

}  // namespace

bool lag_input_grad_enabled() { return !env_switch_off("FUSED_OPS_CONV3D_LAG_INPUT_GRAD"); }

conv::LagInputGradPlan lag_input_grad_plan(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                           bool weight_grad_elsewhere) {
  // Where the tile kernel computes the weight gradient, it computes the input gradient too for
  // less than these kernels take (benchmarks/h100-2026-11-23-lag).
  if (p.dx == nullptr || (p.dweight != nullptr && !weight_grad_elsewhere)) {
    return {};
  }
  return conv::plan_conv3d_group_norm_mean_lag_input_grad(p.conv, p.dtype,
                                                          current_device_info().shared_memory);
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
  const auto dx_kernel = input_grad_kernel<T>(plan.c_in_g);
  if (!plan.supported || dx_kernel == nullptr) {
    return cudaErrorInvalidValue;
  }
  const LagWorkspace ws = carve_lag<T>(p, plan, workspace);
  LagArgs args{p, plan, coefficients, mu, ws.products, ws.tables, 0};
  const conv::Conv3dShape& s = p.conv;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(
      dx_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem_bytes)));
  const int64_t items = s.N * s.groups;
  const int64_t K = plan.c_in_g * s.kD * s.kH * s.kW;
  for (int64_t item0 = 0; item0 < items; item0 += plan.items_per_chunk) {
    const int64_t count = std::min(plan.items_per_chunk, items - item0);
    args.item0 = item0;
    lag_products_kernel<T>
        <<<dim3(static_cast<unsigned>(count), static_cast<unsigned>(product_splits(K))), kThreads,
           0, stream>>>(args);
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
    const int64_t patterns = plan.patterns[0] * plan.patterns[1] * plan.patterns[2];
    const int64_t table_rows = patterns * plan.c_in_g * plan.span[1] * plan.span[2] + patterns;
    lag_tables_kernel<T><<<dim3(static_cast<unsigned>(count),
                                static_cast<unsigned>(ceil_div(table_rows, kThreads))),
                           kThreads, 0, stream>>>(args);
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
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
