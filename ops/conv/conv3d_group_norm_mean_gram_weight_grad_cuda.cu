// The Gram weight gradient of the one-pass conv3d_group_norm_mean backward (stride 1): the
// weight gradient from per-sample sums of lag products of the centred input, without the
// convolution's output (conv_kernels.h, GramWeightGradPlan: the identity, the classes and
// pieces, the family).
//
// 1. gram_lag_sums_kernel: a persistent grid (a block per SM) walks the launch's units (an item's
//    chunks of planes and rows: bulk ones, and edge ones of the rows of the H-classes some box
//    leaves out), two windows in shared memory (the next unit's copies in flight while this
//    one's products run), and writes each unit's pieces (per D-class it meets; per edge class).
//    A warp per lag (dd, dw) along D and W of one half (dd > 0, or dd = 0 and dw >= 0: R is
//    symmetric; (kD - 1) x (2kW - 1) + kW warps: 13 at k = 3, so that a thread may hold its 45
//    sums and 15 ring values without spilling, where 25 warps left it 72 registers), a lane per
//    position of the padded input's W (<= 32). The window holds xe = x - mu (-mu in the
//    padding, 0 past it) for every input channel of the group, the unit's planes and rows with
//    the lags' reach (along D above the unit only), each row in zero margins the W lags reach
//    (16-byte copies of whole rows where the input's rows are the 32 positions). Each lane
//    walks its column down a piece's rows keeping the b rows of the 2kH - 1 lags dh in
//    registers (a ring), so that per row it loads c_in_g values xe[a, p] and c_in_g values
//    xe[b, p + (dd, kH - 1, dw)] and adds c_in_g^2 x (2kH - 1) products to float sums
//    (headline: 45 multiply-adds per 6 shared loads; the centre lag (0, 0) 27: dh >= 0). At a
//    piece's end a warp writes per (a, b, dh) its lanes' total (recursive halving: 62 shuffles
//    for the 45 totals) and the values of its edge lanes, those some box along W leaves out.
// 2. gram_box_sums_kernel: 4 lanes per total: R per box, in double and a fixed
//    order: along W the total minus the edge lanes outside the box, along D the pieces of the
//    classes inside the box, along H all of them minus the edge pieces of the H-classes outside
//    it; and R's mirror entry. gram_window_sums_kernel, a block per (item, input channel): Sc,
//    the sums of xe over each tap's box (not run where the forward kept x's sums per tap, X:
//    then Sc = X - S * mu). gram_item_grads_kernel, a block per item and 8 output channels: the
//    item's share of the weight gradient (the identity), in double.
// 3. gram_sample_sum_kernel: dweight = the items' shares summed over the samples.
// (Each step's measurements: benchmarks/h100-2026-11-26-gram-weight-grad/notes.txt.)
// No atomics: every sum has a fixed order; results are deterministic.
#include "common/cuda/device_info.cuh"
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "conv/conv3d_group_norm_mean_gram_weight_grad.cuh"
#include "conv/conv_input_box.cuh"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace fused_ops {
namespace gpu {
namespace {

struct GramArgs {
  conv::Conv3dGroupNormMeanBackwardParams p;
  conv::GramWeightGradPlan plan;
  const void* coefficients;  // [N][C_out][3] of acc_t: alpha, m0, gamma
  const void* mu;            // [N][C_in] of acc_t
  float* partials;           // [items_per_launch][pieces][piece_floats]
  double* gram_sums;         // [items_per_launch][J * J]: R
  double* window_sums;       // [N * groups][J]: Sc (null where p.input_sums holds x's sums)
  double* item_grads;        // [N * groups][c_out_g][J]
  int64_t item0;             // the launch's first item: n * groups + conv group
  bool whole_rows;           // float32 and plan.whole_rows with x 16-byte aligned
};

constexpr int kLanes = static_cast<int>(conv::kGramMaxWidth);
static_assert(kLanes == kWarpSize, "a lane per position of the padded input's W");
constexpr int kMaxWarps =
    static_cast<int>((conv::kGramMaxTaps - 1) * (2 * conv::kGramMaxTaps - 1) + conv::kGramMaxTaps);
constexpr int kMaxThreads = kMaxWarps * kWarpSize;

// The lag (dd, dw) along D and W of a warp of the sums kernel: the half with dd > 0, or dd = 0
// and dw >= 0 (R is symmetric: the other half's sums are theirs with a and b swapped), first
// dd = 0: warp 0 is the centre (0, 0).
struct LagDW {
  int dd, dw;
};
__device__ inline LagDW lag_of_warp(int warp, int kW) {
  if (warp < kW) {
    return {0, warp};
  }
  const int rest = warp - kW;
  return {1 + rest / (2 * kW - 1), rest % (2 * kW - 1) - (kW - 1)};
}
constexpr unsigned kFullMask = 0xffffffffu;

// f(std::integral_constant<int, i>{}) for i = 0 .. kCount - 1, unrolled with i a constant.
template <int kCount, typename F, int... kIs>
__device__ __forceinline__ void static_for_impl(F&& f, std::integer_sequence<int, kIs...>) {
  (f(std::integral_constant<int, kIs>{}), ...);
}
template <int kCount, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_impl<kCount>(f, std::make_integer_sequence<int, kCount>{});
}

// The class of D (classes[0]) that holds segment `segment`, from the classes' first segments.
__device__ inline int class_of_segment(const int32_t* begin, int classes, int segment) {
  int c = 0;
  while (c + 1 < classes && segment >= begin[c + 1]) {
    ++c;
  }
  return c;
}

// ---------------------------------------------------------------------------------------
// 1. The pieces' lag sums.

// One step of warp_transpose_sums: lanes exchange half of their kActive values with the lane
// kOffset away and keep the sums of the other half (lanes with that bit set the upper half).
template <int kSize, int kActive, int kOffset>
__device__ __forceinline__ void transpose_sums_step(float (&v)[kSize], int lane) {
  constexpr int kHalf = kActive / 2;
  const bool upper = (lane & kOffset) != 0;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    // (Values first, then the selects: a select between v[i] and v[i + kHalf] themselves can
    // become a dynamic index, and v goes to local memory.)
    const float low = v[i], high = v[i + kHalf];
    const float send = upper ? low : high;
    const float keep = upper ? high : low;
    v[i] = keep + __shfl_xor_sync(kFullMask, send, kOffset);
  }
  if constexpr (kOffset > 1) {
    transpose_sums_step<kSize, kHalf, kOffset / 2>(v, lane);
  }
}

// Sums each of the 32 * kM values v over the warp's lanes by recursive halving (31 * kM
// shuffles, where a butterfly per value takes 5): on return lane l holds in v[0, kM) the totals
// of values l * kM ... l * kM + kM - 1.
template <int kM>
__device__ __forceinline__ void warp_transpose_sums(float (&v)[kM * kWarpSize], int lane) {
  transpose_sums_step<kM * kWarpSize, kM * kWarpSize, kWarpSize / 2>(v, lane);
}

// A unit of work of the sums kernel (plan.units_per_item per item): a bulk unit, D chunk `chunk`
// x H chunk `sub`, or an edge unit, D chunk `chunk` x edge group `sub`. Its window: planes
// [d0, d0 + planes) and rows [h_first, h_first + rows) of the padded input, the chunk's planes
// [d0, d1) with the lags' reach above them (along D the lags dd are >= 0) and its rows with
// the reach on both sides; [kC][planes][rows][plan.row_floats].
struct UnitWork {
  int item_local;
  bool edge;
  int chunk, sub;
  int d0, d1, h_first;
  int planes, rows;
};

__device__ inline UnitWork unit_work(const conv::GramWeightGradPlan& plan, int k) {
  UnitWork w;
  const int per_item = static_cast<int>(plan.units_per_item);
  const int bulk_units = static_cast<int>(plan.bulk_d_chunks * plan.h_chunks);
  const int reach_h = static_cast<int>(plan.reach[1]), ED = static_cast<int>(plan.E[0]);
  w.item_local = k / per_item;
  const int u = k % per_item;
  w.edge = u >= bulk_units;
  int planes_per_chunk, h0, h1;
  if (!w.edge) {
    const int h_chunks = static_cast<int>(plan.h_chunks),
              bulk_rows = static_cast<int>(plan.bulk_rows);
    w.chunk = u / h_chunks;
    w.sub = u % h_chunks;
    planes_per_chunk = static_cast<int>(plan.bulk_planes);
    h0 = w.sub * bulk_rows;
    h1 = min(h0 + bulk_rows, static_cast<int>(plan.E[1]));
  } else {
    const int groups = static_cast<int>(plan.edge_groups);
    w.chunk = (u - bulk_units) / groups;
    w.sub = (u - bulk_units) % groups;
    planes_per_chunk = static_cast<int>(plan.edge_planes);
    h0 = plan.class_lo[1][plan.edge_class[plan.edge_group_begin[w.sub]]];
    h1 = plan.class_hi[1][plan.edge_class[plan.edge_group_begin[w.sub + 1] - 1]];
  }
  w.d0 = w.chunk * planes_per_chunk;
  w.d1 = min(w.d0 + planes_per_chunk, ED);
  w.h_first = h0 - reach_h;
  w.planes = w.d1 - w.d0 + static_cast<int>(plan.reach[0]);
  w.rows = h1 - h0 + 2 * reach_h;
  return w;
}

// Calls f(b, plane, j, col, r) for the window rows r = (b, plane, j) and columns col (of
// `width` per row: floats, or 16-byte chunks) this thread handles, with few instructions each:
// a fixed column col = tid % width of rows tid / width + k * slots (slots = blockDim / width
// rows at a time; the plan keeps width <= blockDim).
template <typename F>
__device__ __forceinline__ void for_window_rows(int channels, int planes, int rows, int width,
                                                F&& f) {
  const int slots = static_cast<int>(blockDim.x) / width;
  const int slot = static_cast<int>(threadIdx.x) / width;
  if (slot >= slots) {
    return;
  }
  const int col = static_cast<int>(threadIdx.x) % width;
  const int total_rows = channels * planes * rows;
  StridedRow row(slot, slots, planes, rows);  // (b, plane, j)
  for (int r = slot; r < total_rows; r += slots) {
    f(row.hi, row.mid, row.lo, col, r);
    row.advance();
  }
}

// mu[b] for a b known only at run time, from registers.
template <int kC>
__device__ __forceinline__ float mu_of(const float (&mu)[kC], int b) {
  float m = mu[0];
#pragma unroll
  for (int i = 1; i < kC; ++i) {
    m = b == i ? mu[i] : m;
  }
  return m;
}

// The item's mu[b] (x's mean per input channel of its conv group) into registers.
template <int kC>
__device__ __forceinline__ void load_item_mu(const GramArgs& a, const UnitWork& w,
                                             float (&mu)[kC]) {
  const conv::Conv3dShape& s = a.p.conv;
  const int64_t item = a.item0 + w.item_local;
  const float* mu_item =
      static_cast<const float*>(a.mu) + item / s.groups * s.C_in + item % s.groups * kC;
#pragma unroll
  for (int i = 0; i < kC; ++i) {
    mu[i] = mu_item[i];
  }
}

// The window of a unit: xe = x - mu at padded (d0 + plane, h_first + j, col - margin)
// inside the padded input (-mu in the padding), 0 past it. float32: x by asynchronous copies
// (zero-filled outside the input; 16 bytes each where whole_rows), centred by centre_window
// once they landed; other types through registers, centred here.
template <typename T, int kC>
__device__ __forceinline__ void stage_window(const GramArgs& a, const UnitWork& w, float* window) {
  const conv::GramWeightGradPlan& plan = a.plan;
  const conv::Conv3dShape& s = a.p.conv;
  const int64_t item = a.item0 + w.item_local;
  const int64_t n = item / s.groups, g = item % s.groups;
  const int D = static_cast<int>(s.D), H = static_cast<int>(s.H), W = static_cast<int>(s.W);
  const int row_floats = static_cast<int>(plan.row_floats), margin = static_cast<int>(plan.margin);
  // Window (plane, j, col) to input (plane + xd0, j + xh0, col + xw0).
  const int xd0 = w.d0 - static_cast<int>(s.padding[0]);
  const int xh0 = w.h_first - static_cast<int>(s.padding[1]);
  const int xw0 = -margin - static_cast<int>(s.padding[2]);
  const T* x = static_cast<const T*>(a.p.x) + (n * s.C_in + g * kC) * s.D * s.H * s.W;
  const auto source = [&](int b, int xd, int xh, int xw, bool inside) {
    return x + (inside ? (static_cast<int64_t>(b) * D + xd) * H * W + xh * W + xw : 0);
  };
  if constexpr (std::is_same_v<T, float>) {
    if (a.whole_rows) {  // a row: 8 copies of 16 bytes
      for_window_rows(kC, w.planes, w.rows, kLanes / 4,
                      [&](int b, int plane, int j, int chunk, int r) {
                        const int xd = xd0 + plane, xh = xh0 + j;
                        const bool inside = xd >= 0 && xd < D && xh >= 0 && xh < H;
                        cp_async_16(window + r * row_floats + margin + 4 * chunk,
                                    source(b, xd, xh, 4 * chunk, inside), inside);
                      });
    } else {
      for_window_rows(
          kC, w.planes, w.rows, row_floats, [&](int b, int plane, int j, int col, int r) {
            const int xd = xd0 + plane, xh = xh0 + j, xw = xw0 + col;
            const bool inside = xd >= 0 && xd < D && xh >= 0 && xh < H && xw >= 0 && xw < W;
            cp_async_4(window + r * row_floats + col, source(b, xd, xh, xw, inside), inside);
          });
    }
  } else {
    float mu[kC];
    load_item_mu<kC>(a, w, mu);
    const int ED = static_cast<int>(plan.E[0]), EH = static_cast<int>(plan.E[1]),
              EW = static_cast<int>(plan.E[2]);
    const int pad_d = static_cast<int>(s.padding[0]), pad_h = static_cast<int>(s.padding[1]),
              pad_w = static_cast<int>(s.padding[2]);
    for_window_rows(kC, w.planes, w.rows, row_floats, [&](int b, int plane, int j, int col, int r) {
      const int xd = xd0 + plane, xh = xh0 + j, xw = xw0 + col;
      const bool inside = xd >= 0 && xd < D && xh >= 0 && xh < H && xw >= 0 && xw < W;
      const bool in_e = xd + pad_d < ED && xh + pad_h >= 0 && xh + pad_h < EH && xw + pad_w >= 0 &&
                        xw + pad_w < EW;
      const float v = inside ? ScalarOps<T>::to_acc(*source(b, xd, xh, xw, inside)) : 0.0f;
      window[r * row_floats + col] = in_e ? v - mu_of<kC>(mu, b) : 0.0f;
    });
  }
}

// float32: xe = x - mu in place where stage_window's copies landed inside the padded input:
// each thread the elements it copied (the same walk), after its copies completed
// (cp_async_wait_all), before the barrier that publishes the window.
template <int kC>
__device__ __forceinline__ void centre_window(const GramArgs& a, const UnitWork& w, float* window) {
  const conv::GramWeightGradPlan& plan = a.plan;
  float mu[kC];
  load_item_mu<kC>(a, w, mu);
  const int row_floats = static_cast<int>(plan.row_floats), margin = static_cast<int>(plan.margin);
  const int ED = static_cast<int>(plan.E[0]), EH = static_cast<int>(plan.E[1]),
            EW = static_cast<int>(plan.E[2]);
  if (a.whole_rows) {  // every position of a row inside the padded input is inside it
    for_window_rows(
        kC, w.planes, w.rows, kLanes / 4, [&](int b, int plane, int j, int chunk, int r) {
          const int pd = w.d0 + plane, ph = w.h_first + j;
          if (pd < ED && ph >= 0 && ph < EH) {
            const float m = mu_of<kC>(mu, b);
            float4* v = reinterpret_cast<float4*>(window + r * row_floats + margin + 4 * chunk);
            float4 x = *v;
            x.x -= m, x.y -= m, x.z -= m, x.w -= m;
            *v = x;
          }
        });
    return;
  }
  for_window_rows(kC, w.planes, w.rows, row_floats, [&](int b, int plane, int j, int col, int r) {
    const int pd = w.d0 + plane, ph = w.h_first + j, pw = col - margin;
    if (pd < ED && ph >= 0 && ph < EH && pw >= 0 && pw < EW) {
      window[r * row_floats + col] -= mu_of<kC>(mu, b);
    }
  });
}

// A lane's lag sums over rows [row0, row0 + piece_rows) of window planes [p0, p1) (a piece's
// rows; rows h = phase + t * dilation of each phase, whose lags along H are rows of the same
// phase): each lane walks its column keeping the b rows of the 2kH - 1 lags dh in registers (a
// ring), so that a row costs 2 c_in_g shared loads for c_in_g^2 (2kH - 1) multiply-adds (45 at
// the headline). b_shift: the b values' offset from the a values' (the lag along D and W).
// kFirstLag: the first lag dh (index into 0 .. 2kH - 2) whose products are summed: kH - 1 for
// the centre lag (dd, dw) = (0, 0), whose sums of dh < 0 are those of -dh with a and b swapped
// (gram_box_sums_kernel reads dh >= 0 only), so that warp 0 adds 27 products a row where the
// others add 45 (it shares its multiprocessor's quarter with 3 warps where the other quarters'
// warps share theirs with 2: 13 warps).
template <int kC, int kKH, int kFirstLag>
__device__ __forceinline__ void add_lag_products(float (&acc)[kC][kC][2 * kKH - 1],
                                                 const float* column, int channel_stride,
                                                 int plane_stride, int row_floats, int dil_h,
                                                 int p0, int p1, int row0, int piece_rows,
                                                 int b_shift) {
  constexpr int kSpanH = 2 * kKH - 1;
  const int row_step = dil_h * row_floats;  // one lag along H
  for (int phase = 0; phase < min(dil_h, piece_rows); ++phase) {
    const int count = (piece_rows - phase + dil_h - 1) / dil_h;
    // Whole rounds of kSpanH rows (the ring's slots fixed per step), then the rest.
    const int whole = count - count % kSpanH;
    for (int d = p0; d < p1; ++d) {
      const float* a_row = column + d * plane_stride + (row0 + phase) * row_floats;
      const float* b_row = a_row + b_shift;
      // ring[(t + s + kKH - 1) % kSpanH] holds the b values of lag s (row t + s) at row t.
      float ring[kSpanH][kC];
#pragma unroll
      for (int sh = 0; sh < kSpanH - 1; ++sh) {
#pragma unroll
        for (int b = 0; b < kC; ++b) {
          ring[sh][b] = b_row[b * channel_stride + (sh - (kKH - 1)) * row_step];
        }
      }
      const auto row = [&](int t, auto step_tag) {
        constexpr int kStep = decltype(step_tag)::value;
        const int at = t * row_step;
#pragma unroll
        for (int b = 0; b < kC; ++b) {
          ring[(kStep + kSpanH - 1) % kSpanH][b] =
              b_row[b * channel_stride + at + (kKH - 1) * row_step];
        }
        float av[kC];
#pragma unroll
        for (int i = 0; i < kC; ++i) {
          av[i] = a_row[i * channel_stride + at];
        }
#pragma unroll
        for (int l = kFirstLag; l < kSpanH; ++l) {
#pragma unroll
          for (int j = 0; j < kC; ++j) {
            const float bv = ring[(kStep + l) % kSpanH][j];
#pragma unroll
            for (int i = 0; i < kC; ++i) {
              acc[i][j][l] = fmaf(av[i], bv, acc[i][j][l]);
            }
          }
        }
      };
      int t = 0;
      for (; t < whole; t += kSpanH) {
        static_for<kSpanH>([&](auto step) { row(t + decltype(step)::value, step); });
      }
      static_for<kSpanH - 1>([&](auto step) {
        if (t + decltype(step)::value < count) {
          row(t + decltype(step)::value, step);
        }
      });
    }
  }
}

// acc = 0: a lane's lag sums, after a piece's share is written.
template <int kC, int kKH>
__device__ __forceinline__ void zero_lag_sums(float (&acc)[kC][kC][2 * kKH - 1]) {
#pragma unroll
  for (int i = 0; i < kC; ++i) {
#pragma unroll
    for (int j = 0; j < kC; ++j) {
#pragma unroll
      for (int l = 0; l < 2 * kKH - 1; ++l) {
        acc[i][j][l] = 0.0f;
      }
    }
  }
}

// The values a lane's sums are written as, rounded up to 4 (plan.value_stride: 16-byte stores).
template <int kC, int kKH>
constexpr int kValueStride = (kC * kC * (2 * kKH - 1) + 3) / 4 * 4;

// A warp's share of a piece, from its lanes' sums acc (zeroed after): per (a, b, dh) the total
// over its lanes, then the values of the edge lanes ([0, reach_w) and [Wo, E_W): the lanes
// some box along W leaves out), from which gram_box_sums_kernel forms each box's sum.
template <int kC, int kKH>
__device__ __forceinline__ void write_piece_share(float (&acc)[kC][kC][2 * kKH - 1],
                                                  float* warp_out, int lane, int reach_w, int wo,
                                                  int EW) {
  constexpr int kSpanH = 2 * kKH - 1;
  constexpr int kValues = kC * kC * kSpanH;
  constexpr int kStride = kValueStride<kC, kKH>;
  constexpr int kM = (kValues + kWarpSize - 1) / kWarpSize;
  static_assert(kStride <= kM * kWarpSize, "the padded values are in v");
  float v[kM * kWarpSize];
#pragma unroll
  for (int i = 0; i < kM * kWarpSize; ++i) {
    v[i] = i < kValues ? acc[i / (kC * kSpanH)][i / kSpanH % kC][i % kSpanH] : 0.0f;
  }
  zero_lag_sums<kC, kKH>(acc);
  const auto store_lane_values = [&](int slot) {
    float4* to = reinterpret_cast<float4*>(warp_out + (1 + slot) * kStride);
#pragma unroll
    for (int i = 0; i < kStride / 4; ++i) {
      to[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    }
  };
  // (A lane may hold both kinds of edge where Wo < reach_w.)
  if (lane < reach_w) {
    store_lane_values(lane);
  }
  if (lane >= wo && lane < EW) {
    store_lane_values(reach_w + lane - wo);
  }
  warp_transpose_sums<kM>(v, lane);
#pragma unroll
  for (int i = 0; i < kM; ++i) {
    if (lane * kM + i < kValues) {
      warp_out[lane * kM + i] = v[i];
    }
  }
}

// A persistent grid: block b takes the launch's units b, b + grid, ... (unit_work) with two
// windows in shared memory, the next unit's copies in flight while this one's products run.
// A unit writes one piece per D-segment of its chunk (the D-classes it meets) and, edge units,
// per edge class of its group: pieces of one unit share its window's copies and barrier (apart,
// the 20 one-row edge pieces of a headline item each paid them, 29 units an item where now 8).
// kC = c_in_g, kKH = kH. A warp per lag (dd, dw) of the half (lag_of_warp).
template <typename T, int kC, int kKH>
__global__ void __launch_bounds__(kMaxThreads, 1)
    gram_lag_sums_kernel(const GramArgs a, int units) {
  using acc_t = typename ScalarOps<T>::acc_t;
  static_assert(sizeof(acc_t) == 4, "float sums");
  constexpr int kSpanH = 2 * kKH - 1;
  constexpr int kStride = kValueStride<kC, kKH>;  // a lane's sums (a, b, dh), padded
  extern __shared__ float windows[];              // two of plan.smem_bytes
  const conv::GramWeightGradPlan& plan = a.plan;
  const conv::Conv3dShape& s = a.p.conv;
  const int reach_h = static_cast<int>(plan.reach[1]), reach_w = static_cast<int>(plan.reach[2]);
  const int row_floats = static_cast<int>(plan.row_floats), margin = static_cast<int>(plan.margin);
  const int EW = static_cast<int>(plan.E[2]), wo = static_cast<int>(s.Wo);
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const LagDW lag = lag_of_warp(warp, static_cast<int>(s.kW));
  const int dil_h = static_cast<int>(s.dilation[1]);
  const int window_floats = static_cast<int>(plan.smem_bytes / sizeof(float));
  const int d_classes = static_cast<int>(plan.classes[0]);

  int k = static_cast<int>(blockIdx.x);
  if (k >= units) {
    return;
  }
  if (a.whole_rows) {
    // Both windows start as zeros: the 16-byte copies write the 32 positions of a row, never
    // the margins the W lags reach (the other copies write whole rows).
    for (int i = static_cast<int>(threadIdx.x); i < window_floats / 2;
         i += static_cast<int>(blockDim.x)) {
      reinterpret_cast<float4*>(windows)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __syncthreads();  // (before any thread's copies land in them)
  }
  stage_window<T, kC>(a, unit_work(plan, k), windows);
  float acc[kC][kC][kSpanH] = {};
  for (int it = 0; k < units; k += static_cast<int>(gridDim.x), ++it) {
    const UnitWork w = unit_work(plan, k);
    float* window = windows + (it & 1) * window_floats;
    if constexpr (std::is_same_v<T, float>) {
      cp_async_wait_all();
      centre_window<kC>(a, w, window);
    }
    __syncthreads();  // this unit's window complete; every warp done with the other one
    if (k + static_cast<int>(gridDim.x) < units) {
      stage_window<T, kC>(a, unit_work(plan, k + static_cast<int>(gridDim.x)),
                          windows + ((it + 1) & 1) * window_floats);
    }
    const float* lane_column = window + margin + lane;  // the lane's position of row 0
    const int plane_stride = w.rows * row_floats;
    const int channel_stride = w.planes * plane_stride;
    const int b_shift = lag.dd * static_cast<int>(s.dilation[0]) * plane_stride +
                        lag.dw * static_cast<int>(s.dilation[2]);
    float* item_out =
        a.partials + static_cast<int64_t>(w.item_local) * plan.pieces * plan.piece_floats;
    const int planes_per_chunk = static_cast<int>(w.edge ? plan.edge_planes : plan.bulk_planes);
    const int32_t* segment_begin = w.edge ? plan.edge_segment_begin : plan.d_segment_begin;
    // The chunk's D-segments: the classes c it meets, planes [max(d0, lo), min(d1, hi)).
    int c = 0;
    while (plan.class_hi[0][c] <= w.d0) {
      ++c;
    }
    for (; c < d_classes && plan.class_lo[0][c] < w.d1; ++c) {
      const int lo = plan.class_lo[0][c];
      const int p0 = max(w.d0, lo) - w.d0, p1 = min(w.d1, plan.class_hi[0][c]) - w.d0;
      const int segment = segment_begin[c] + w.chunk - lo / planes_per_chunk;
      // A bulk unit's piece: the chunk's rows; an edge unit's: one per edge class of its group.
      const int subs = w.edge ? plan.edge_group_begin[w.sub + 1] - plan.edge_group_begin[w.sub] : 1;
      for (int e = 0; e < subs; ++e) {
        int piece, row0, piece_rows;
        if (w.edge) {
          const int edge = plan.edge_group_begin[w.sub] + e;
          const int h_class = plan.edge_class[edge];
          piece = static_cast<int>(plan.bulk_pieces) +
                  segment * static_cast<int>(plan.edge_classes) + edge;
          row0 = plan.class_lo[1][h_class] - w.h_first;
          piece_rows = plan.class_hi[1][h_class] - plan.class_lo[1][h_class];
        } else {
          piece = segment * static_cast<int>(plan.h_chunks) + w.sub;
          row0 = reach_h;
          piece_rows = w.rows - 2 * reach_h;
        }
        if (warp == 0) {  // the centre lag (0, 0)
          add_lag_products<kC, kKH, kKH - 1>(acc, lane_column, channel_stride, plane_stride,
                                             row_floats, dil_h, p0, p1, row0, piece_rows, b_shift);
        } else {
          add_lag_products<kC, kKH, 0>(acc, lane_column, channel_stride, plane_stride, row_floats,
                                       dil_h, p0, p1, row0, piece_rows, b_shift);
        }
        write_piece_share<kC, kKH>(
            acc, item_out + piece * plan.piece_floats + warp * kStride * (1 + 2 * reach_w), lane,
            reach_w, wo, EW);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// 2. R and Sc per item from the pieces, then the item's share of the weight gradient.

// Per piece, the boxes (k1d, k1h) of the D and H taps it counts for (bit k1d * kTaps + k1h) and
// its sign (bit kGramPieceSubtracted: edge pieces are subtracted): a bulk piece of D-class c
// counts for the boxes inside c (box_mask[0][c]), an edge piece of D-class c and H-class h for
// those inside c but outside h. The same for every total: gram_box_sums_kernel finds them once
// per block, into shared memory.
constexpr unsigned kGramPieceSubtracted = 1u << (conv::kGramMaxTaps * conv::kGramMaxTaps);
__device__ inline uint16_t gram_piece_code(const conv::GramWeightGradPlan& plan, int piece) {
  constexpr int kTaps = static_cast<int>(conv::kGramMaxTaps);
  constexpr unsigned kEveryBox = (1u << kTaps) - 1u;
  const int bulk_pieces = static_cast<int>(plan.bulk_pieces);
  const bool edge = piece >= bulk_pieces;
  const int edges = static_cast<int>(plan.edge_classes);
  const int segment =
      edge ? (piece - bulk_pieces) / edges : piece / static_cast<int>(plan.h_chunks);
  const int c = class_of_segment(edge ? plan.edge_segment_begin : plan.d_segment_begin,
                                 static_cast<int>(plan.classes[0]), segment);
  const unsigned mask_d = plan.box_mask[0][c];
  const unsigned mask_h =
      edge ? ~plan.box_mask[1][plan.edge_class[(piece - bulk_pieces) % edges]] & kEveryBox
           : kEveryBox;
  unsigned code = edge ? kGramPieceSubtracted : 0u;
  for (int k1d = 0; k1d < kTaps; ++k1d) {
    code |= ((mask_d >> k1d) & 1u) != 0 ? mask_h << (k1d * kTaps) : 0u;
  }
  return static_cast<uint16_t>(code);
}

// blockIdx: x the block of totals, y the launch's item; kBoxSumLanes lanes per total of a warp's
// share (a lag (dd, dw), channels (a, b), lag dh), each taking every kBoxSumLanes-th batch of
// pieces. The total's value per box (k1d, k1h, k1w), in double and a fixed order: per piece the
// total minus the edge lanes outside box k1w along W, times the piece's coefficient for (k1d,
// k1h) (1, -1 or 0: gram_piece_code); the lanes' sums added by butterfly; each is one entry of
// R and its mirror. (A thread per total and box k1w, each loading the total and its edge lanes,
// was 0.100 ms a step at the headline; a thread per total 0.087, its 30 pieces one batch after
// another; 4 lanes a total finding each piece's boxes by divisions and adding under selects,
// 336 instructions a piece, 0.082.)
constexpr int kBoxSumLanes = 4;

__global__ void __launch_bounds__(kThreads) gram_box_sums_kernel(const GramArgs a) {
  constexpr int kTaps = static_cast<int>(conv::kGramMaxTaps);
  extern __shared__ uint16_t piece_codes[];  // [plan.pieces]
  const conv::GramWeightGradPlan& plan = a.plan;
  const conv::Conv3dShape& s = a.p.conv;
  const int pieces = static_cast<int>(plan.pieces);
  for (int p = static_cast<int>(threadIdx.x); p < pieces; p += kThreads) {
    piece_codes[p] = gram_piece_code(plan, p);
  }
  __syncthreads();
  const int C = static_cast<int>(plan.c_in_g);
  const int kD = static_cast<int>(s.kD), kH = static_cast<int>(s.kH), kW = static_cast<int>(s.kW);
  const int taps = kD * kH * kW, J = C * taps, span_h = 2 * kH - 1;
  const int values = C * C * span_h, reach_w = static_cast<int>(plan.reach[2]);
  const int stride = static_cast<int>(plan.value_stride);
  const int edge_lanes = 2 * reach_w, dil_w = static_cast<int>(s.dilation[2]);
  const int thread = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  const int slot = thread / kBoxSumLanes, part = thread % kBoxSumLanes;
  if (slot >= plan.warps * values) {
    return;  // (a slot's lanes together: kBoxSumLanes divides the warp)
  }
  const int warp = slot / values, rest = slot % values;
  const int i = rest / (C * span_h), j = rest / span_h % C, dh = rest % span_h - (kH - 1);
  const LagDW lag = lag_of_warp(warp, kW);
  const int dd = lag.dd, dw = lag.dw;
  if (dd == 0 && dw == 0 && dh < 0) {
    return;  // (the mirror of lag -dh with a and b swapped, which writes both)
  }
  // The total's place in a piece, then its edge lanes' (`stride` apart): slot e < reach_w is
  // lane e, the others lane Wo + e - reach_w; outside box k1w: lanes [0, k1w * dil_w) and
  // [k1w * dil_w + Wo, E_W).
  const int offset = warp * stride * (1 + edge_lanes) + rest;
  const auto outside = [&](int e, int k1w) {
    return e < reach_w ? e < k1w * dil_w : e - reach_w >= k1w * dil_w;
  };
  const float* parts =
      a.partials + static_cast<int64_t>(blockIdx.y) * plan.pieces * plan.piece_floats + offset;
  // The pieces kBatch at a time, each slot's loads of the batch issued together (one piece at
  // a time, each load's latency was the kernel's). (A coefficient of 0 times a piece's value is
  // 0 unless the value is not finite; the weight gradient is NaN then either way: the
  // GroupNorm statistics are.)
  constexpr int kBatch = 4;
  double box[kTaps][kTaps * kTaps] = {};  // [k1w][k1d * kTaps + k1h]
  for (int first = part * kBatch; first < pieces; first += kBoxSumLanes * kBatch) {
    const float* v[kBatch];
    double value[kBatch][kTaps];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      v[u] = parts + static_cast<int64_t>(min(first + u, pieces - 1)) * plan.piece_floats;
      const double total = static_cast<double>(v[u][0]);
#pragma unroll
      for (int k1w = 0; k1w < kTaps; ++k1w) {
        value[u][k1w] = total;
      }
    }
#pragma unroll 4
    for (int e = 0; e < edge_lanes; ++e) {
      float lane_value[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        lane_value[u] = v[u][stride * (1 + e)];
      }
#pragma unroll
      for (int k1w = 0; k1w < kTaps; ++k1w) {
        if (outside(e, k1w)) {
#pragma unroll
          for (int u = 0; u < kBatch; ++u) {
            value[u][k1w] -= static_cast<double>(lane_value[u]);
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const unsigned code = first + u < pieces ? piece_codes[first + u] : 0u;
      const double sign = (code & kGramPieceSubtracted) != 0 ? -1.0 : 1.0;
#pragma unroll
      for (int k = 0; k < kTaps * kTaps; ++k) {
        const double coefficient = ((code >> k) & 1u) != 0 ? sign : 0.0;
#pragma unroll
        for (int k1w = 0; k1w < kTaps; ++k1w) {
          box[k1w][k] = fma(coefficient, value[u][k1w], box[k1w][k]);
        }
      }
    }
  }
  // The slot's lanes' sums, in a fixed order: ((q0 + q1) + (q2 + q3)) for 4 lanes.
  const unsigned group = ((1u << kBoxSumLanes) - 1u)
                         << (threadIdx.x % kWarpSize / kBoxSumLanes * kBoxSumLanes);
#pragma unroll
  for (int lanes = 1; lanes < kBoxSumLanes; lanes *= 2) {
#pragma unroll
    for (int k1w = 0; k1w < kTaps; ++k1w) {
#pragma unroll
      for (int k = 0; k < kTaps * kTaps; ++k) {
        box[k1w][k] += __shfl_xor_sync(group, box[k1w][k], lanes);
      }
    }
  }
  if (part != 0) {
    return;
  }
  double* R = a.gram_sums + static_cast<int64_t>(blockIdx.y) * J * J;
#pragma unroll
  for (int k1w = 0; k1w < kTaps; ++k1w) {
#pragma unroll
    for (int k1d = 0; k1d < kTaps; ++k1d) {
#pragma unroll
      for (int k1h = 0; k1h < kTaps; ++k1h) {
        const int k2d = k1d + dd, k2h = k1h + dh, k2w = k1w + dw;
        if (k1d >= kD || k1h >= kH || k1w >= kW || k2d < 0 || k2d >= kD || k2h < 0 || k2h >= kH ||
            k2w < 0 || k2w >= kW) {
          continue;
        }
        const int t1 = (k1d * kH + k1h) * kW + k1w, t2 = (k2d * kH + k2h) * kW + k2w;
        const double r = box[k1w][k1d * kTaps + k1h];
        R[(i * taps + t1) * J + j * taps + t2] = r;
        if (dd != 0 || dw != 0 || dh != 0) {  // R's other half (lag 0: its own slot)
          R[(j * taps + t2) * J + i * taps + t1] = r;
        }
      }
    }
  }
}

// blockIdx: x the item (one launch for all), y its input channel b. Sc[(b, k)] = the sum of
// xe[b] over box k of the padded input (its positions [k * dilation, k * dilation + out) per
// dim, S = Do * Ho * Wo of them) = X[b, k] - (S - I[k]) * mu[b], X the sum of xe over the
// box's I[k] positions inside the input (the padding's xe is -mu). A lane per position along W,
// each of 8 warps every 8th plane: per plane the float sums of each box along H (16 rows' loads in
// flight, each batch's rows of a box as a bit mask), added in double into the boxes along D
// that hold the plane; then in a fixed order the warps' sums per lane and the lanes of each
// box along W. (Each row's boxes found by divisions, 33 instructions a row, and 8 rows in
// flight: 0.045 ms a step at the headline; blocks of 32 warps, a launch per launch of the sums,
// 0.049.)
constexpr int kWindowSumWarps = 8;

template <typename T>
__global__ void __launch_bounds__(kWindowSumWarps* kWarpSize, 4)
    gram_window_sums_kernel(const GramArgs a) {
  using acc_t = typename ScalarOps<T>::acc_t;
  constexpr int kTaps = static_cast<int>(conv::kGramMaxTaps);
  constexpr int kWarps = kWindowSumWarps;
  constexpr int kBlock = kWarps * kWarpSize;
  constexpr int kRowsInFlight = 16;
  __shared__ double rows_s[kWarps][kTaps * kTaps][kLanes];
  __shared__ double lanes_s[kTaps * kTaps][kLanes];
  const conv::GramWeightGradPlan& plan = a.plan;
  const conv::Conv3dShape& s = a.p.conv;
  const int64_t item = blockIdx.x;
  const int64_t n = item / s.groups, g = item % s.groups;
  const int b = static_cast<int>(blockIdx.y), C = static_cast<int>(plan.c_in_g);
  const int kD = static_cast<int>(s.kD), kH = static_cast<int>(s.kH), kW = static_cast<int>(s.kW);
  const int D = static_cast<int>(s.D), H = static_cast<int>(s.H), W = static_cast<int>(s.W);
  const int pad_d = static_cast<int>(s.padding[0]), pad_h = static_cast<int>(s.padding[1]),
            pad_w = static_cast<int>(s.padding[2]);
  const int Do = static_cast<int>(s.Do), Ho = static_cast<int>(s.Ho), Wo = static_cast<int>(s.Wo);
  const int dil_d = static_cast<int>(s.dilation[0]), dil_h = static_cast<int>(s.dilation[1]),
            dil_w = static_cast<int>(s.dilation[2]);
  const T* x = static_cast<const T*>(a.p.x) + (n * s.C_in + g * C + b) * s.D * s.H * s.W;
  const float mu = static_cast<const acc_t*>(a.mu)[n * s.C_in + g * C + b];
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  // Box k of a dim in input positions: [k * dil - pad, k * dil - pad + out).
  const auto in_box = [](int i, int pad, int k, int dil, int out) {
    return i + pad >= k * dil && i + pad < k * dil + out;
  };
  double sums[kTaps][kTaps] = {};  // [kd][kh]: this lane's over the warp's planes
  for (int d = warp; d < D; d += kWarps) {
    const T* row = x + static_cast<int64_t>(d) * H * W + min(lane, W - 1);
    float rows[kTaps] = {};  // [kh]: the plane's sums of xe over box kh's rows
    for (int h0 = 0; h0 < H; h0 += kRowsInFlight, row += kRowsInFlight * W) {
      float v[kRowsInFlight];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        v[u] = h0 + u < H ? ScalarOps<T>::to_acc(row[u * W]) - mu : 0.0f;
      }
#pragma unroll
      for (int kh = 0; kh < kTaps; ++kh) {
        // Bit u: row h0 + u in box kh ([lo, hi) of the batch's rows, clipped to H).
        const int lo = min(max(kh * dil_h - pad_h - h0, 0), kRowsInFlight);
        const int hi = min(max(min(kh * dil_h - pad_h + Ho, H) - h0, 0), kRowsInFlight);
        const unsigned mask = ((1u << hi) - 1u) & ~((1u << lo) - 1u);
#pragma unroll
        for (int u = 0; u < kRowsInFlight; ++u) {
          rows[kh] += (mask >> u) & 1u ? v[u] : 0.0f;
        }
      }
    }
#pragma unroll
    for (int kd = 0; kd < kTaps; ++kd) {
      if (in_box(d, pad_d, kd, dil_d, Do)) {
#pragma unroll
        for (int kh = 0; kh < kTaps; ++kh) {
          sums[kd][kh] += static_cast<double>(rows[kh]);
        }
      }
    }
  }
#pragma unroll
  for (int kd = 0; kd < kTaps; ++kd) {
#pragma unroll
    for (int kh = 0; kh < kTaps; ++kh) {
      rows_s[warp][kd * kTaps + kh][lane] = sums[kd][kh];
    }
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < kTaps * kTaps * kLanes; i += kBlock) {
    double total = 0.0;
    for (int w = 0; w < kWarps; ++w) {
      total += rows_s[w][i / kLanes][i % kLanes];
    }
    lanes_s[i / kLanes][i % kLanes] = total;
  }
  __syncthreads();
  const int J = C * kD * kH * kW;
  const double S = static_cast<double>(s.Do * s.Ho * s.Wo);
  double* Sc = a.window_sums + item * J;
  const int t = static_cast<int>(threadIdx.x);  // a tap (kd, kh, kw) per thread
  if (t < kD * kH * kW) {
    const int kd = t / (kH * kW), kh = t / kW % kH, kw = t % kW;
    // The positions inside the input (the lanes w < W), then the padding's -mu each.
    double total = 0.0;
    int inside = 0;
    for (int w = 0; w < W; ++w) {
      if (in_box(w, pad_w, kw, dil_w, Wo)) {
        total += lanes_s[kd * kTaps + kh][w];
        ++inside;
      }
    }
    const auto count = [&](int extent, int pad, int k, int dil, int out) {
      return max(0, min(k * dil - pad + out, extent) - max(k * dil - pad, 0));
    };
    const double inside_positions = static_cast<double>(count(D, pad_d, kd, dil_d, Do)) *
                                    count(H, pad_h, kh, dil_h, Ho) * inside;
    Sc[b * kD * kH * kW + t] = total - (S - inside_positions) * static_cast<double>(mu);
  }
}

// blockIdx: x the launch's item, y a chunk of kGradChannels output channels. The item's share
// of dweight (the identity of conv_kernels.h) per (output channel c, column j), in double, with
// R, Sc and the chunk's weights in shared memory. Sc from gram_window_sums_kernel, or where the
// forward kept x's sums (p.input_sums) X - S * mu, in double (X exact, where that kernel sums xe
// in float per plane).
template <typename T>
__global__ void __launch_bounds__(kThreads) gram_item_grads_kernel(const GramArgs a) {
  using acc_t = typename ScalarOps<T>::acc_t;
  constexpr int kChannels = static_cast<int>(conv::kGramGradChannels);
  extern __shared__ double finalize_smem[];
  const conv::GramWeightGradPlan& plan = a.plan;
  const conv::Conv3dShape& s = a.p.conv;
  const int C = static_cast<int>(plan.c_in_g), c_out_g = static_cast<int>(plan.c_out_g);
  const int taps = static_cast<int>(s.kD * s.kH * s.kW), J = C * taps;
  const int c0 = static_cast<int>(blockIdx.y) * kChannels;
  const int channels = min(kChannels, c_out_g - c0);
  double* R = finalize_smem;           // [J][J]
  double* Sc = R + J * J;              // [J]
  double* mu_col = Sc + J;             // [J]: mu of column j's input channel
  double* w_s = mu_col + J;            // [kChannels][J]
  double* w_sc = w_s + kChannels * J;  // [kChannels]: w[c] . Sc
  double* e_c = w_sc + kChannels;      // [kChannels]
  const int64_t item = a.item0 + blockIdx.x;
  const int64_t n = item / s.groups, g = item % s.groups;
  const double* R_item = a.gram_sums + static_cast<int64_t>(blockIdx.x) * J * J;
  const acc_t* mu = static_cast<const acc_t*>(a.mu) + n * s.C_in + g * C;
  const T* weight = static_cast<const T*>(a.p.weight) + (g * c_out_g + c0) * J;
  const double S = static_cast<double>(s.Do * s.Ho * s.Wo);
  const double* X = a.p.input_sums != nullptr
                        ? a.p.input_sums + (n * s.C_in + g * C) * conv::input_sums_row(s)
                        : nullptr;
  const double* Sc_item = X == nullptr ? a.window_sums + item * J : nullptr;
  const auto window_sum = [&](int j) {
    return X != nullptr
               ? X[conv::input_sums_column(j, taps)] - S * static_cast<double>(mu[j / taps])
               : Sc_item[j];
  };
  block_copy(
      J * J + J, [&](int e) { return e < J * J ? R_item[e] : window_sum(e - J * J); },
      [&](int e, double v) { R[e] = v; });  // (R, then Sc)
  for (int j = threadIdx.x; j < J; j += kThreads) {
    mu_col[j] = static_cast<double>(mu[j / taps]);
  }
  block_copy(
      channels * J, [&](int e) { return ScalarOps<T>::to_double(weight[e]); },
      [&](int e, double v) { w_s[e] = v; });
  __syncthreads();
  const acc_t* coef =
      static_cast<const acc_t*>(a.coefficients) + (n * s.C_out + g * c_out_g + c0) * 3;
  // Per channel (a warp each, its lanes over j, then a butterfly) w[c] . Sc and e[c].
  for (int c = threadIdx.x / kWarpSize; c < channels; c += kWarpsPerBlock) {
    double ws = 0.0, nu = 0.0;
    for (int j = threadIdx.x % kWarpSize; j < J; j += kWarpSize) {
      ws += w_s[c * J + j] * Sc[j];
      nu += w_s[c * J + j] * mu_col[j];
    }
    ws = warp_allreduce_sum(ws);
    nu = warp_allreduce_sum(nu);
    if (threadIdx.x % kWarpSize == 0) {
      const double alpha = static_cast<double>(coef[3 * c]);
      w_sc[c] = ws;
      e_c[c] = static_cast<double>(coef[3 * c + 2]) +
               alpha * (nu - static_cast<double>(coef[3 * c + 1]));
    }
  }
  __syncthreads();
  // Per column j and 4 of the block's channels, a thread each: w[c] . R[:, j] for the 4
  // channels together, one pass over i (each entry of R loaded once for 4 channels). (A thread
  // per (c, j), loading R and w per product, was 0.027 ms a step at the Conv3d headline, H100,
  // 2026-11-27, bound by those shared loads; a thread per j for all 8 channels, 0.032: 81
  // threads a block, each a chain of 81 x 8 products.)
  constexpr int kThreadChannels = 4;
  double* grads = a.item_grads + (item * c_out_g + c0) * J;
  const int channel_groups = (channels + kThreadChannels - 1) / kThreadChannels;
  for (int t = threadIdx.x; t < channel_groups * J; t += kThreads) {
    const int first = t / J * kThreadChannels, j = t % J;
    double wr[kThreadChannels] = {};
    for (int i = 0; i < J; ++i) {
      const double r = R[i * J + j];
#pragma unroll
      for (int u = 0; u < kThreadChannels; ++u) {
        if (first + u < channels) {
          wr[u] += w_s[(first + u) * J + i] * r;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kThreadChannels; ++u) {
      const int c = first + u;
      if (c < channels) {
        const double alpha = static_cast<double>(coef[3 * c]);
        grads[c * J + j] = alpha * (wr[u] + mu_col[j] * w_sc[c]) + e_c[c] * (Sc[j] + S * mu_col[j]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// 3. dweight: the items' shares summed over n: a warp per element of dweight, lane l summing
// n = l, l + 32, ... in order, then the lanes by xor butterfly (a fixed order). (A thread per
// element summing all n in order, 2K threads with 128 dependent loads each at the headline,
// was 0.014 ms.)

template <typename T>
__global__ void __launch_bounds__(kThreads) gram_sample_sum_kernel(const GramArgs a) {
  const conv::Conv3dShape& s = a.p.conv;
  const int64_t J = a.plan.c_in_g * s.kD * s.kH * s.kW;
  const int64_t per_group = a.plan.c_out_g * J;
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  if (i >= s.C_out * J) {
    return;  // (whole warps)
  }
  const int64_t g = i / per_group, r = i % per_group;
  double total = 0.0;
  for (int64_t n = lane; n < s.N; n += kWarpSize) {
    total += a.item_grads[(n * s.groups + g) * per_group + r];
  }
  total = subwarp_allreduce_sum(total, kWarpSize);
  if (lane == 0) {
    static_cast<T*>(a.p.dweight)[i] = ScalarOps<T>::from_double(total);
  }
}

template <typename T, int kC>
auto lag_sums_kernel_for_c(int64_t kH) -> void (*)(GramArgs, int) {
  switch (kH) {
    case 1:
      return gram_lag_sums_kernel<T, kC, 1>;
    case 2:
      return gram_lag_sums_kernel<T, kC, 2>;
    case 3:
      return gram_lag_sums_kernel<T, kC, 3>;
    default:
      return nullptr;
  }
}

template <typename T>
auto lag_sums_kernel(int64_t c_in_g, int64_t kH) -> void (*)(GramArgs, int) {
  switch (c_in_g) {
    case 1:
      return lag_sums_kernel_for_c<T, 1>(kH);
    case 2:
      return lag_sums_kernel_for_c<T, 2>(kH);
    case 3:
      return lag_sums_kernel_for_c<T, 3>(kH);
    default:
      return nullptr;
  }
}

struct GramWorkspace {
  float* partials;
  double* gram_sums;
  double* window_sums;
  double* item_grads;
  size_t bytes;
};

GramWorkspace carve_gram(const conv::Conv3dGroupNormMeanBackwardParams& p,
                         const conv::GramWeightGradPlan& plan, void* base) {
  WorkspaceCarver carver(base);
  GramWorkspace ws;
  ws.partials = carver.take<float>(plan.items_per_launch * plan.pieces * plan.piece_floats);
  const int64_t J = plan.c_in_g * p.conv.kD * p.conv.kH * p.conv.kW;
  ws.gram_sums = carver.take<double>(plan.items_per_launch * J * J);
  // Sc, where the forward did not keep x's sums (gram_item_grads_kernel takes it from them).
  ws.window_sums =
      p.input_sums == nullptr ? carver.take<double>(p.conv.N * p.conv.groups * J) : nullptr;
  ws.item_grads = carver.take<double>(p.conv.N * p.conv.C_out * J);
  ws.bytes = carver.bytes();
  return ws;
}

}  // namespace

bool gram_weight_grad_enabled() { return !env_switch_off("FUSED_OPS_CONV3D_GRAM_WEIGHT_GRAD"); }

conv::GramWeightGradPlan gram_weight_grad_plan(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                               size_t partial_bytes) {
  if (p.dweight == nullptr) {
    return {};
  }
  const DeviceInfo device = current_device_info();
  return conv::plan_conv3d_group_norm_mean_gram_weight_grad(p.conv, p.dtype, device.shared_memory,
                                                            device.multiprocessors, partial_bytes);
}

template <typename T>
size_t gram_weight_grad_workspace_bytes(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                        const conv::GramWeightGradPlan& plan) {
  return plan.supported ? carve_gram(p, plan, nullptr).bytes : 0;
}

template <typename T>
cudaError_t gram_weight_grad_launch(const conv::Conv3dGroupNormMeanBackwardParams& p,
                                    const conv::GramWeightGradPlan& plan, const void* coefficients,
                                    const void* mu, void* workspace, cudaStream_t stream) {
  const auto sums_kernel = lag_sums_kernel<T>(plan.c_in_g, p.conv.kH);
  if (!plan.supported || sums_kernel == nullptr) {
    return cudaErrorInvalidValue;
  }
  const GramWorkspace ws = carve_gram(p, plan, workspace);
  const bool whole_rows =
      std::is_same_v<T, float> && plan.whole_rows && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  GramArgs args{p,           plan,         coefficients,   mu,
                ws.partials, ws.gram_sums, ws.window_sums, ws.item_grads,
                0,           whole_rows};
  const conv::Conv3dShape& s = p.conv;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(sums_kernel,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      static_cast<int>(2 * plan.smem_bytes)));
  const int64_t sms = std::max(current_device_info().multiprocessors, 1);
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(gram_item_grads_kernel<T>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      static_cast<int>(plan.finalize_smem_bytes)));
  const int64_t size = s.C_out * plan.c_in_g * s.kD * s.kH * s.kW;
  const int64_t sample_sum_blocks = ceil_div(size * kWarpSize, kThreads);  // a warp per element
  if (!grid_fits(sample_sum_blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  const int64_t items = s.N * s.groups;
  const unsigned threads = static_cast<unsigned>(plan.warps * kWarpSize);
  if (p.input_sums == nullptr) {  // (else gram_item_grads_kernel takes Sc from the sums)
    gram_window_sums_kernel<T>
        <<<dim3(static_cast<unsigned>(items), static_cast<unsigned>(plan.c_in_g)),
           kWindowSumWarps * kWarpSize, 0, stream>>>(args);
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  }
  for (int64_t item0 = 0; item0 < items; item0 += plan.items_per_launch) {
    const int64_t count = std::min(plan.items_per_launch, items - item0);
    args.item0 = item0;
    const int64_t units = count * plan.units_per_item;
    sums_kernel<<<static_cast<unsigned>(std::min<int64_t>(units, sms)), threads,
                  2 * plan.smem_bytes, stream>>>(args, static_cast<int>(units));
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
    const int64_t totals = plan.warps * plan.c_in_g * plan.c_in_g * (2 * s.kH - 1);
    gram_box_sums_kernel<<<dim3(static_cast<unsigned>(ceil_div(totals * kBoxSumLanes, kThreads)),
                                static_cast<unsigned>(count)),
                           kThreads, plan.pieces * sizeof(uint16_t), stream>>>(args);
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
    gram_item_grads_kernel<T>
        <<<dim3(static_cast<unsigned>(count),
                static_cast<unsigned>(ceil_div(plan.c_out_g, conv::kGramGradChannels))),
           kThreads, plan.finalize_smem_bytes, stream>>>(args);
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  }
  gram_sample_sum_kernel<T>
      <<<static_cast<unsigned>(sample_sum_blocks), kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

// (No double instances: the plan never takes double, whose sums would spill.)
#define FUSED_OPS_INSTANTIATE_GRAM(T)                                                             \
  template size_t gram_weight_grad_workspace_bytes<T>(                                            \
      const conv::Conv3dGroupNormMeanBackwardParams&, const conv::GramWeightGradPlan&);           \
  template cudaError_t gram_weight_grad_launch<T>(const conv::Conv3dGroupNormMeanBackwardParams&, \
                                                  const conv::GramWeightGradPlan&, const void*,   \
                                                  const void*, void*, cudaStream_t);
FUSED_OPS_INSTANTIATE_GRAM(float)
FUSED_OPS_INSTANTIATE_GRAM(__half)
FUSED_OPS_INSTANTIATE_GRAM(__nv_bfloat16)
#undef FUSED_OPS_INSTANTIATE_GRAM

}  // namespace gpu
}  // namespace fused_ops
