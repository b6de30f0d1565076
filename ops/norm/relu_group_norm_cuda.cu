// CUDA kernels of fused::relu_group_norm: y = group_norm(relu(x)).
//
// The input is viewed as (N, C, HxW) with G groups of Cg = C / G channels; group (n, g) is
// the contiguous run of M = Cg * HxW elements starting at (n * G + g) * M, and row (n, c) the
// run of HxW elements starting at (n * C + c) * HxW. r = relu(x), NaN kept. The generic
// kernels and their tiling are described in row_kernels.cuh; sizes below are for the
// headline case, float input (16, 128, 34, 34, 34), G = 8: M = 628,864, HxW = 39,304.
//
// Forward (input read twice, output written once; no floating-point atomics):
//   1. segment_pair_sums_kernel<ShiftedMomentsOp<relu>>: each group is cut into equal chunks
//      of ~2048 16-byte vectors (77 chunks here), one 256-thread block per (group, chunk):
//      grid 128 * 77 = 9,856 blocks. A thread sums d = r - r[first element of its group] and
//      d^2 in double over its vectors (4 independent 128-bit loads in flight), the block
//      reduces in a fixed order, and thread 0 writes the chunk's pair to the workspace.
//      (Groups shorter than 1024 vectors get 2^k <= 32 threads each, several per block.)
//   2. relu_group_stats_kernel: one warp per (n, g) (128 warps, 16 blocks) adds the group's
//      chunk pairs in a fixed order (lane-strided, then a butterfly), turns them into mean and
//      rstd (saved), and the (center, scale, shift) of the group's channels
//      (group_norm_math.h: centered_affine).
//   3. row_map_kernel<ReluAffineOp>: y = (r - center) * scale + shift, one 256-thread block
//      per (row, tile) of <= 1024 vectors (10 balanced tiles per row: grid 2048 * 10 = 20,480
//      blocks), 4 x 128-bit loads then 4 x 128-bit stores per thread.
//   Determinism: every sum has a fixed order that depends only on the shape (the chunking is
//   a function of (M, dtype), not of the device or of the alignment).
//
// Backward (input x and dy read twice, dx written once):
//   1. segment_pair_sums_kernel<ReluBackwardSumsOp> over rows: per (row, chunk), in double,
//      ds = sum(dy * r) and db = sum(dy) (HxW = 9,826 vectors: 5 chunks per row, grid 10,240
//      blocks), then sum_chunk_partials_kernel adds each row's chunks (one warp per row).
//   2. relu_backward_coefficients_kernel, one warp per (n, g): with w the weight (1 when
//      absent), ds_w = sum_c ds * w, db_w = sum_c db * w,
//        c2 = (db_w * mean - ds_w) * rstd^3 / M,  c3 = -c2 * mean - db_w * rstd / M,
//      and per row the coefficients (c1 = rstd * w[c], c2, c3).
//   3. row_map_kernel<ReluBackwardInputOp>: dx = x > 0 ? c1 * dy + c2 * x + c3 : 0; or, with
//      dx_channels_last, relu_backward_input_channels_last_kernel: the same values written
//      (N, HxW, C) through 32 x 64 shared-memory tiles (a conv operator's backward convolution
//      reads NDHWC: writing dx so costs less than a transpose of it afterwards), rounded to
//      TF32 with dx_tf32_rounded (for TF32 convolutions, which read it as it lies). With
//      dx_channel_sums (a conv bias's gradient: dx's sum per channel, before the rounding),
//      each tile also writes its channels' sums (float32 for float), and channel_sums_kernel
//      adds a channel's partials in double, one block per channel: no pass over dx for them.
//   4. affine_param_grads_kernel (row_kernels.cuh), one warp per channel c, over n in a fixed
//   order:
//        dweight[c] = sum_n (ds - db * mean[n, g]) * rstd[n, g],  dbias[c] = sum_n db.
//
// Workspace (float headline): forward 157,696 B of chunk pairs + 24 KB of center/scale/shift;
// backward 160 KB of chunk pairs + 32 KB of row sums + 24 KB of coefficients (+ 5 MB of tile
// sums with dx_channel_sums: 128 channels x 16 samples x 615 tiles).
#include "common/cuda/cuda_kernel.cuh"
#include "common/cuda/tf32_rounding.cuh"
#include "norm/channels_last_kernels.h"
#include "norm/group_norm_math.h"
#include "norm/norm_kernels.h"
#include "norm/row_kernels.cuh"

#include <type_traits>

namespace fused_ops {
namespace gpu {
namespace {

// ---------------------------------------------------------------------------------------
// Functors of the generic kernels.

// Backward partial sums over a row: (sum dy * relu(x), sum dy), in0 = x, in1 = dy.
struct ReluBackwardSumsOp {
  __device__ __forceinline__ int segment_state(int64_t /*segment*/) const { return 0; }
  template <typename acc_t>
  __device__ __forceinline__ void accumulate(int /*state*/, acc_t x, acc_t dy, double& s0,
                                             double& s1) const {
    const double g = static_cast<double>(dy);
    s0 = fma(g, static_cast<double>(relu_keep_nan(x)), s0);
    s1 += g;
  }
};

// y = (relu(x) - center[row]) * scale[row] + shift[row] (group_norm_math.h: centered_affine;
// centering first keeps a group of equal values at exactly the bias); affine holds the
// (center, scale, shift) of each row.
template <typename acc_t>
struct ReluAffineOp {
  const norm::CenteredAffine<acc_t>* affine;
  __device__ __forceinline__ norm::CenteredAffine<acc_t> row_params(int64_t row) const {
    return affine[row];
  }
  __device__ __forceinline__ acc_t operator()(const norm::CenteredAffine<acc_t>& p, acc_t x,
                                              acc_t /*unused*/) const {
    return (relu_keep_nan(x) - p.center) * p.scale + p.shift;
  }
};

// dx = x > 0 ? c1 * dy + c2 * x + c3 : 0 (NaN x gives 0, as on the CPU); coefficients holds
// (c1, c2, c3) per row. in0 = x, in1 = dy.
template <typename acc_t>
struct ReluBackwardInputOp {
  const acc_t* coefficients;
  struct Params {
    acc_t c1;
    acc_t c2;
    acc_t c3;
  };
  __device__ __forceinline__ Params row_params(int64_t row) const {
    return Params{coefficients[3 * row], coefficients[3 * row + 1], coefficients[3 * row + 2]};
  }
  __device__ __forceinline__ acc_t operator()(const Params& p, acc_t x, acc_t dy) const {
    return norm::relu_group_norm_input_grad(p.c1, p.c2, p.c3, x, dy);
  }
};

// Backward partial sums over a row where no pass writes dx (dx_coefficients: the convolutions
// apply the coefficients as they load dy and x): ReluBackwardSumsOp's pair, then (sum of dy
// where x > 0, sum of relu(x)), (count of x > 0, 0): with the row's coefficients they give the
// row's sum of dx (a conv bias's gradient) without dx. in0 = x, in1 = dy.
struct ReluBackwardOperandSumsOp {
  static constexpr int kPairs = 3;
  __device__ __forceinline__ int segment_state(int64_t /*segment*/) const { return 0; }
  template <typename acc_t>
  __device__ __forceinline__ void accumulate(int /*state*/, acc_t x, acc_t dy,
                                             double (&s)[2 * kPairs]) const {
    const double g = static_cast<double>(dy);
    s[0] = fma(g, static_cast<double>(relu_keep_nan(x)), s[0]);
    s[1] += g;
    const bool on = x > acc_t(0);
    s[2] += on ? g : 0.0;
    s[3] += on ? static_cast<double>(x) : 0.0;
    s[4] += on ? 1.0 : 0.0;
  }
};

// Backward, step 3 with dx channels-last: dx[n, s, c] = ReluBackwardInputOp(x, dy)[n, c, s].
// One 256-thread block per tile of 32 channels x 64 positions of one sample. A warp computes
// rows (channels) of the tile, each lane 2 positions of 4 rows: its 16 loads of x and dy are
// issued before any arithmetic (a first version that loaded and computed one element at a time,
// 32 x 32 tiles, took 0.46 ms at the headline size on an H100 (2026-11-22), where moving the bytes
// takes 0.32 ms). The values go through a padded shared tile (no bank conflicts) and are written
// position by position, coalesced along c, as in the batched transpose (transpose_cuda.cu).
constexpr int kLayoutChannels = 32;                                   // channels per tile
constexpr int kLayoutLanePositions = 2;                               // positions per lane
constexpr int kLayoutPositions = kWarpSize * kLayoutLanePositions;    // positions per tile
constexpr int kLayoutRowStep = kThreads / kWarpSize;                  // 8 warps
constexpr int kLayoutRowsPerWarp = kLayoutChannels / kLayoutRowStep;  // 4

template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) relu_backward_input_channels_last_kernel(
    const scalar_t* __restrict__ x, const scalar_t* __restrict__ dy, scalar_t* __restrict__ dx,
    ReluBackwardInputOp<acc_t> op, int64_t C, int64_t HxW, int64_t channel_tiles,
    int64_t position_tiles, bool round_to_tf32, acc_t* __restrict__ channel_partials) {
  __shared__ acc_t tile[kLayoutChannels][kLayoutPositions + 1];
  __shared__ acc_t warp_channel_sums[kLayoutRowStep][kWarpSize];
  int64_t block = blockIdx.x;
  const int64_t s0 = block % position_tiles * kLayoutPositions;
  block /= position_tiles;
  const int64_t c0 = block % channel_tiles * kLayoutChannels;
  const int64_t n = block / channel_tiles;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;

  acc_t xs[kLayoutRowsPerWarp][kLayoutLanePositions];
  acc_t gs[kLayoutRowsPerWarp][kLayoutLanePositions];
#pragma unroll
  for (int k = 0; k < kLayoutRowsPerWarp; ++k) {
    const int64_t c = c0 + warp + k * kLayoutRowStep;
    const int64_t row_start = (n * C + c) * HxW;
#pragma unroll
    for (int j = 0; j < kLayoutLanePositions; ++j) {
      const int64_t s = s0 + lane + j * kWarpSize;
      const bool inside = c < C && s < HxW;
      xs[k][j] = inside ? ScalarOps<scalar_t>::to_acc(x[row_start + s]) : acc_t(0);
      gs[k][j] = inside ? ScalarOps<scalar_t>::to_acc(dy[row_start + s]) : acc_t(0);
    }
  }
#pragma unroll
  for (int k = 0; k < kLayoutRowsPerWarp; ++k) {
    const int r = warp + k * kLayoutRowStep;
    const int64_t c = c0 + r;
    if (c < C) {
      const auto params = op.row_params(n * C + c);
#pragma unroll
      for (int j = 0; j < kLayoutLanePositions; ++j) {
        tile[r][lane + j * kWarpSize] = op(params, xs[k][j], gs[k][j]);
      }
    }
  }
  __syncthreads();
  const int64_t c = c0 + lane;
  acc_t channel_sum = acc_t(0);  // of this thread's positions of channel c, before rounding
  for (int r = warp; r < kLayoutPositions; r += kLayoutRowStep) {
    const int64_t s = s0 + r;
    if (c < C && s < HxW) {
      acc_t v = tile[lane][r];
      channel_sum += v;
      if constexpr (std::is_same_v<scalar_t, float>) {
        v = round_to_tf32 ? tf32_rounded(v) : v;
      }
      dx[(n * HxW + s) * C + c] = ScalarOps<scalar_t>::from_acc(v);
    }
  }
  if (channel_partials != nullptr) {  // (the same for the whole grid)
    // The tile's sum per channel, its warps added in order: one partial per (channel, sample,
    // position tile), channel-major for channel_sums_kernel.
    warp_channel_sums[warp][lane] = channel_sum;
    __syncthreads();
    if (warp == 0 && c < C) {
      acc_t tile_sum = warp_channel_sums[0][lane];
#pragma unroll
      for (int w = 1; w < kLayoutRowStep; ++w) {
        tile_sum += warp_channel_sums[w][lane];
      }
      const int64_t partials_per_channel = gridDim.x / channel_tiles;  // N * position_tiles
      channel_partials[c * partials_per_channel + n * position_tiles + s0 / kLayoutPositions] =
          tile_sum;
    }
  }
}

// Backward, after step 3 where the conv bias's gradient is asked for: sums[c] = the sum of
// channel c's `count` partials (relu_backward_input_channels_last_kernel's tile sums), in double,
// in a fixed order (thread-strided, then block_reduce_sum). One block per channel.
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    channel_sums_kernel(const acc_t* __restrict__ partials, int64_t count,
                        scalar_t* __restrict__ sums) {
  __shared__ double2 scratch[kWarpsPerBlock];
  const acc_t* channel = partials + static_cast<int64_t>(blockIdx.x) * count;
  double s = 0.0;
  for (int64_t k = threadIdx.x; k < count; k += kThreads) {
    s += static_cast<double>(channel[k]);
  }
  const double2 total = block_reduce_sum(make_double2(s, 0.0), scratch);
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = ScalarOps<scalar_t>::from_acc(static_cast<acc_t>(total.x));
  }
}

// ---------------------------------------------------------------------------------------
// Per-(n, g) and per-channel kernels (one warp per item, kWarpsPerBlock items per block).

// Forward, step 2. partials: chunks pairs (shifted sum, shifted sum of squares) per group.
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads)
    relu_group_stats_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                            const T* __restrict__ bias, const double2* __restrict__ partials,
                            int64_t chunks, int64_t num_groups_total, int64_t G, int64_t Cg,
                            int64_t group_size, double eps, S* __restrict__ mean_out,
                            S* __restrict__ rstd_out,
                            norm::CenteredAffine<S>* __restrict__ affine) {
  const int64_t ng = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (ng >= num_groups_total) {
    return;  // whole warps only
  }
  const double2 sums = warp_sum_pairs(partials + ng * chunks, chunks, lane);

  // The shift the partials were taken around (ShiftedMomentsOp: first element of the group).
  const double shift = relu_keep_nan(ScalarOps<T>::to_double(x[ng * group_size]));
  const double count = static_cast<double>(group_size);
  const norm::Moments m = norm::moments_from_shifted_sums(shift, sums.x, sums.y, count);
  const double rstd = norm::rstd_from_m2(m.m2, count, eps);
  if (lane == 0) {
    mean_out[ng] = static_cast<S>(m.mean);
    rstd_out[ng] = static_cast<S>(rstd);
  }
  const int64_t g = ng % G;
  for (int64_t k = lane; k < Cg; k += kWarpSize) {
    const int64_t c = g * Cg + k;
    const int64_t row = ng * Cg + k;
    const double w = weight != nullptr ? ScalarOps<T>::to_double(weight[c]) : 1.0;
    const double b = bias != nullptr ? ScalarOps<T>::to_double(bias[c]) : 0.0;
    affine[row] = norm::centered_affine<S>(m.mean, rstd, w, b);
  }
}

// Backward, step 2. row_sums: (ds, db) per row. With row_dx_sums (dx_coefficients with
// dx_channel_sums): each row's sum of dx from ReluBackwardOperandSumsOp's other pairs
// (operand_sums: rows entries of (sum of dy where x > 0, sum of relu(x)), then rows of (count,
// 0)) and the row's coefficients as stored, c1 S_dy + c2 S_x + c3 count, in double.
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads)
    relu_backward_coefficients_kernel(const double2* __restrict__ row_sums,
                                      const S* __restrict__ mean, const S* __restrict__ rstd,
                                      const T* __restrict__ weight, int64_t num_groups_total,
                                      int64_t G, int64_t Cg, int64_t group_size,
                                      S* __restrict__ coefficients,
                                      const double2* __restrict__ operand_sums = nullptr,
                                      double* __restrict__ row_dx_sums = nullptr) {
  const int64_t ng = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (ng >= num_groups_total) {
    return;  // whole warps only
  }
  const int64_t g = ng % G;
  double ds_w = 0.0;
  double db_w = 0.0;
  for (int64_t k = lane; k < Cg; k += kWarpSize) {
    const double w = weight != nullptr ? ScalarOps<T>::to_double(weight[g * Cg + k]) : 1.0;
    const double2 sums = row_sums[ng * Cg + k];
    ds_w += sums.x * w;
    db_w += sums.y * w;
  }
  ds_w = warp_allreduce_sum(ds_w);
  db_w = warp_allreduce_sum(db_w);
  const double rs = static_cast<double>(rstd[ng]);
  const norm::BackwardCoefficients coef = norm::backward_coefficients(
      ds_w, db_w, static_cast<double>(mean[ng]), rs, static_cast<double>(group_size));
  for (int64_t k = lane; k < Cg; k += kWarpSize) {
    const double w = weight != nullptr ? ScalarOps<T>::to_double(weight[g * Cg + k]) : 1.0;
    const int64_t row = ng * Cg + k;
    const S c1 = static_cast<S>(rs * w), c2 = static_cast<S>(coef.c2);
    const S c3 = static_cast<S>(coef.c3);
    coefficients[3 * row] = c1;
    coefficients[3 * row + 1] = c2;
    coefficients[3 * row + 2] = c3;
    if (row_dx_sums != nullptr) {
      const int64_t rows = num_groups_total * Cg;
      const double2 masked = operand_sums[row], count = operand_sums[rows + row];
      row_dx_sums[row] = static_cast<double>(c1) * masked.x + static_cast<double>(c2) * masked.y +
                         static_cast<double>(c3) * count.x;
    }
  }
}

// Backward, step 4: the per-(n, c) sums of affine_param_grads_kernel, (ds, db) per row.
struct RowSums {
  const double2* row_sums;
  __device__ __forceinline__ double2 operator()(int64_t n, int64_t c) const {
    return row_sums[n * C + c];
  }
  int64_t C;
};

// dx's sums per row as affine_param_grads_kernel's "db" (its bias gradient: the sum over n is
// the channel's sum of dx).
struct RowDxSums {
  const double* row_dx_sums;
  __device__ __forceinline__ double2 operator()(int64_t n, int64_t c) const {
    return make_double2(0.0, row_dx_sums[n * C + c]);
  }
  int64_t C;
};

// ---------------------------------------------------------------------------------------
// Workspace layouts (one function sizes and carves, so the two always agree).

template <typename T, typename S>
struct ForwardWorkspace {
  ReducePlan plan;
  double2* partials;                // N * G * chunks
  norm::CenteredAffine<S>* affine;  // N * C
  size_t bytes;
};

template <typename T, typename S>
ForwardWorkspace<T, S> forward_workspace(void* base, int64_t N, int64_t C, int64_t G, int64_t HxW) {
  ForwardWorkspace<T, S> ws;
  WorkspaceCarver carver(base);
  ws.plan = make_reduce_plan((C / G) * HxW, ScalarOps<T>::kVecElems);
  ws.partials = carver.take<double2>(N * G * ws.plan.chunks_per_segment);
  ws.affine = carver.take<norm::CenteredAffine<S>>(N * C);
  ws.bytes = carver.bytes();
  return ws;
}

template <typename T, typename S>
struct BackwardWorkspace {
  ReducePlan plan;
  int pairs;               // sums per row: 1, or 3 with dx_coefficients (ReluBackwardOperandSumsOp)
  double2* partials;       // pairs * N * C * chunks
  double2* row_sums;       // pairs * N * C (used when chunks > 1)
  S* coefficients;         // 3 * N * C (not used with dx_coefficients)
  S* dx_channel_partials;  // C * N * position tiles (with dx_channel_sums and dx only)
  double* row_dx_sums;     // N * C (with dx_channel_sums and dx_coefficients only)
  size_t bytes;
};

// The tiles of relu_backward_input_channels_last_kernel along a sample's positions.
inline int64_t layout_position_tiles(int64_t HxW) { return ceil_div(HxW, kLayoutPositions); }

template <typename T, typename S>
BackwardWorkspace<T, S> backward_workspace(void* base, const norm::ReluGroupNormBackwardParams& p) {
  const int64_t N = p.sizes.N, C = p.sizes.C, HxW = p.sizes.HxW;
  BackwardWorkspace<T, S> ws;
  WorkspaceCarver carver(base);
  const bool operand = p.dx_coefficients != nullptr;
  ws.plan = make_reduce_plan(HxW, ScalarOps<T>::kVecElems);
  ws.pairs = operand ? ReluBackwardOperandSumsOp::kPairs : 1;
  ws.partials = carver.take<double2>(ws.pairs * N * C * ws.plan.chunks_per_segment);
  ws.row_sums = carver.take<double2>(ws.plan.chunks_per_segment > 1 ? ws.pairs * N * C : 0);
  ws.coefficients = carver.take<S>(operand ? 0 : 3 * N * C);
  ws.dx_channel_partials = carver.take<S>(
      p.dx_channel_sums != nullptr && !operand ? C * N * layout_position_tiles(HxW) : 0);
  ws.row_dx_sums = carver.take<double>(p.dx_channel_sums != nullptr && operand ? N * C : 0);
  ws.bytes = carver.bytes();
  return ws;
}

// ---------------------------------------------------------------------------------------
// Launchers.

template <typename scalar_t>
cudaError_t launch_forward(const norm::ReluGroupNormForwardParams& p, void* workspace,
                           cudaStream_t stream) {
  using acc_t = typename ScalarOps<scalar_t>::acc_t;  // also the statistics' type
  constexpr int kNatural = ScalarOps<scalar_t>::kVecElems;
  const auto* x = static_cast<const scalar_t*>(p.x);
  auto* y = static_cast<scalar_t*>(p.y);
  const int64_t N = p.sizes.N, C = p.sizes.C, G = p.sizes.G, HxW = p.sizes.HxW;
  const int64_t Cg = C / G;
  const int64_t group_size = Cg * HxW;
  const int64_t num_groups_total = N * G;
  const ForwardWorkspace<scalar_t, acc_t> ws =
      forward_workspace<scalar_t, acc_t>(workspace, N, C, G, HxW);

  // 1. Chunk partials of the shifted moments of relu(x), per group.
  const bool vectorized_stats = group_size % kNatural == 0 && is_aligned_16(x);
  FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_segment_pair_sums<scalar_t, /*kTwoInputs=*/false>(
      x, nullptr, ws.partials, num_groups_total, group_size, ws.plan, vectorized_stats,
      ShiftedMomentsOp<scalar_t, /*kRelu=*/true>{x, 1, group_size}, stream)));

  // 2. mean, rstd, and per-row center/scale/shift.
  const int64_t stats_blocks = blocks_for_warp_items(num_groups_total);
  if (!grid_fits(stats_blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  relu_group_stats_kernel<scalar_t, acc_t>
      <<<static_cast<unsigned>(stats_blocks), kThreads, 0, stream>>>(
          x, static_cast<const scalar_t*>(p.weight), static_cast<const scalar_t*>(p.bias),
          ws.partials, ws.plan.chunks_per_segment, num_groups_total, G, Cg, group_size, p.eps,
          static_cast<acc_t*>(p.mean), static_cast<acc_t*>(p.rstd), ws.affine);
  FUSED_OPS_RETURN_IF_LAUNCH_FAILED();

  // 3. y = (relu(x) - center) * scale + shift.
  const bool vectorized_map = HxW % kNatural == 0 && is_aligned_16(x) && is_aligned_16(y);
  return launch_row_map<scalar_t, /*kTwoInputs=*/false>(x, nullptr, y, N * C, HxW, vectorized_map,
                                                        ReluAffineOp<acc_t>{ws.affine}, stream);
}

template <typename scalar_t>
cudaError_t launch_backward(const norm::ReluGroupNormBackwardParams& p, void* workspace,
                            cudaStream_t stream) {
  using acc_t = typename ScalarOps<scalar_t>::acc_t;  // also the statistics' type
  constexpr int kNatural = ScalarOps<scalar_t>::kVecElems;
  const auto* x = static_cast<const scalar_t*>(p.x);
  const auto* dy = static_cast<const scalar_t*>(p.dy);
  const auto* weight = static_cast<const scalar_t*>(p.weight);
  const auto* mean = static_cast<const acc_t*>(p.mean);
  const auto* rstd = static_cast<const acc_t*>(p.rstd);
  auto* dx = static_cast<scalar_t*>(p.dx);
  // No weight, no weight gradient (the host leaves it undefined).
  auto* dweight = weight != nullptr ? static_cast<scalar_t*>(p.dweight) : nullptr;
  auto* dbias = static_cast<scalar_t*>(p.dbias);
  auto* dx_coefficients = static_cast<acc_t*>(p.dx_coefficients);
  if (dx == nullptr && dweight == nullptr && dbias == nullptr && dx_coefficients == nullptr) {
    return cudaSuccess;
  }
  const int64_t N = p.sizes.N, C = p.sizes.C, G = p.sizes.G, HxW = p.sizes.HxW;
  const int64_t Cg = C / G;
  const int64_t rows = N * C;
  if (p.dx_channel_sums != nullptr &&
      !((p.dx_channels_last && dx != nullptr) || dx_coefficients != nullptr)) {
    return cudaErrorInvalidValue;  // (the channels-last dx kernel's only: the host checks)
  }
  if (dx_coefficients != nullptr && dx != nullptr) {
    return cudaErrorInvalidValue;  // (one or the other: the host checks)
  }
  const BackwardWorkspace<scalar_t, acc_t> ws = backward_workspace<scalar_t, acc_t>(workspace, p);

  // 1. Per-row ds = sum(dy * relu(x)), db = sum(dy) (and, for dx_coefficients,
  // ReluBackwardOperandSumsOp's other sums: pairs 1 and 2 after the rows' first).
  const bool vectorized_sums = HxW % kNatural == 0 && is_aligned_16(x) && is_aligned_16(dy);
  if (dx_coefficients != nullptr) {
    FUSED_OPS_RETURN_IF_CUDA_ERROR(
        (launch_segment_pair_sums<scalar_t, /*kTwoInputs=*/true, ReluBackwardOperandSumsOp,
                                  ReluBackwardOperandSumsOp::kPairs>(
            x, dy, ws.partials, rows, HxW, ws.plan, vectorized_sums, ReluBackwardOperandSumsOp{},
            stream)));
  } else {
    FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_segment_pair_sums<scalar_t, /*kTwoInputs=*/true>(
        x, dy, ws.partials, rows, HxW, ws.plan, vectorized_sums, ReluBackwardSumsOp{}, stream)));
  }
  const double2* row_sums = nullptr;
  const int64_t chunks = ws.plan.chunks_per_segment;
  for (int i = 0; i < ws.pairs; ++i) {  // (pair i's row sums at row_sums + i * rows)
    const double2* pair_sums = nullptr;
    FUSED_OPS_RETURN_IF_CUDA_ERROR(reduce_chunk_partials(
        ws.partials + i * rows * chunks, chunks, rows, ws.row_sums + i * rows, &pair_sums, stream));
    if (i == 0) {
      row_sums = pair_sums;
    }
  }

  if (dx != nullptr || dx_coefficients != nullptr) {
    // 2. Per-row coefficients: into dx_coefficients for the convolutions that apply them (with
    // each row's sum of dx, then each channel's, where the channel sums are asked for), else
    // into the workspace for step 3. (ws.row_dx_sums only where carved: the carver's take(0)
    // gives the workspace's end, not a null pointer.)
    const bool row_dx_sums = dx_coefficients != nullptr && p.dx_channel_sums != nullptr;
    const int64_t coefficient_blocks = blocks_for_warp_items(N * G);
    if (!grid_fits(coefficient_blocks)) {
      return cudaErrorInvalidConfiguration;
    }
    relu_backward_coefficients_kernel<scalar_t, acc_t>
        <<<static_cast<unsigned>(coefficient_blocks), kThreads, 0, stream>>>(
            row_sums, mean, rstd, weight, N * G, G, Cg, Cg * HxW,
            dx_coefficients != nullptr ? dx_coefficients : ws.coefficients,
            row_dx_sums ? row_sums + rows : nullptr, row_dx_sums ? ws.row_dx_sums : nullptr);
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
    if (row_dx_sums) {
      FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_affine_param_grads<scalar_t, acc_t>(
          RowDxSums{ws.row_dx_sums, C}, mean, rstd, N, C, G, /*dweight=*/nullptr,
          static_cast<scalar_t*>(p.dx_channel_sums), stream)));
    }
  }

  if (dx != nullptr) {
    // 3. dx.
    const ReluBackwardInputOp<acc_t> input_grad{ws.coefficients};
    if (p.dx_channels_last) {
      const int64_t channel_tiles = ceil_div(C, kLayoutChannels);
      const int64_t position_tiles = layout_position_tiles(HxW);
      const int64_t blocks = N * channel_tiles * position_tiles;
      if (!grid_fits(blocks) || (p.dx_channel_sums != nullptr && !grid_fits(C))) {
        return cudaErrorInvalidConfiguration;
      }
      relu_backward_input_channels_last_kernel<scalar_t, acc_t>
          <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
              x, dy, dx, input_grad, C, HxW, channel_tiles, position_tiles, p.dx_tf32_rounded,
              p.dx_channel_sums != nullptr ? ws.dx_channel_partials : nullptr);
      FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
      if (p.dx_channel_sums != nullptr) {
        channel_sums_kernel<scalar_t, acc_t><<<static_cast<unsigned>(C), kThreads, 0, stream>>>(
            ws.dx_channel_partials, N * position_tiles, static_cast<scalar_t*>(p.dx_channel_sums));
        FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
      }
    } else {
      const bool vectorized_map =
          HxW % kNatural == 0 && is_aligned_16(x) && is_aligned_16(dy) && is_aligned_16(dx);
      FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_row_map<scalar_t, /*kTwoInputs=*/true>(
          x, dy, dx, rows, HxW, vectorized_map, input_grad, stream)));
    }
  }

  // 4. dweight, dbias.
  return launch_affine_param_grads<scalar_t, acc_t>(RowSums{row_sums, C}, mean, rstd, N, C, G,
                                                    dweight, dbias, stream);
}

template <typename T>
struct ForwardFamily {
  static size_t workspace_bytes(const norm::ReluGroupNormForwardParams& p) {
    if (p.channels_last) {
      return norm::relu_group_norm_channels_last_workspace_bytes(p);
    }
    return forward_workspace<T, typename ScalarOps<T>::acc_t>(nullptr, p.sizes.N, p.sizes.C,
                                                              p.sizes.G, p.sizes.HxW)
        .bytes;
  }
  static cudaError_t launch(const norm::ReluGroupNormForwardParams& p, void* workspace,
                            cudaStream_t stream) {
    if (p.channels_last) {
      return norm::launch_relu_group_norm_channels_last(p, workspace, stream);
    }
    if (p.x_bias != nullptr || p.x_channels_first != nullptr) {
      return cudaErrorInvalidValue;  // (the channels-last kernel's only: the host checks)
    }
    return launch_forward<T>(p, workspace, stream);
  }
};

template <typename T>
struct BackwardFamily {
  static size_t workspace_bytes(const norm::ReluGroupNormBackwardParams& p) {
    return backward_workspace<T, typename ScalarOps<T>::acc_t>(nullptr, p).bytes;
  }
  static cudaError_t launch(const norm::ReluGroupNormBackwardParams& p, void* workspace,
                            cudaStream_t stream) {
    return launch_backward<T>(p, workspace, stream);
  }
};

}  // namespace
}  // namespace gpu

namespace norm {

const CudaKernel<ReluGroupNormForwardParams> relu_group_norm_forward_cuda =
    gpu::make_cuda_kernel<ReluGroupNormForwardParams, gpu::ForwardFamily>();
const CudaKernel<ReluGroupNormBackwardParams> relu_group_norm_backward_cuda =
    gpu::make_cuda_kernel<ReluGroupNormBackwardParams, gpu::BackwardFamily>();

}  // namespace norm
}  // namespace fused_ops
