// CUDA kernels of fused::relu_group_norm: y = group_norm(relu(x)).
//
// The input is viewed as (N, C, HxW) with G groups of Cg = C / G channels; group (n, g) is
// the contiguous run of M = Cg * HxW elements starting at (n * G + g) * M, and row (n, c) the
// run of HxW elements starting at (n * C + c) * HxW. r = relu(x), NaN kept. The generic
// kernels and their tiling are described in cuda_utils.cuh; sizes below are for the
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
//      rstd (saved), and folds rstd, weight and bias into scale[n, c] and shift[n, c] for the
//      group's channels.
//   3. row_map_kernel<ReluAffineOp>: y = r * scale + shift, one 256-thread block per (row,
//      tile) of <= 1024 vectors (10 balanced tiles per row: grid 2048 * 10 = 20,480 blocks),
//      4 x 128-bit loads then 4 x 128-bit stores per thread.
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
//   3. row_map_kernel<ReluBackwardInputOp>: dx = x > 0 ? c1 * dy + c2 * x + c3 : 0.
//   4. relu_param_grads_kernel, one warp per channel c, over n in a fixed order:
//        dweight[c] = sum_n (ds - db * mean[n, g]) * rstd[n, g],  dbias[c] = sum_n db.
//
// Workspace (float headline): forward 157,696 B of chunk pairs + 16 KB of scale/shift;
// backward 160 KB of chunk pairs + 32 KB of row sums + 24 KB of coefficients.
#include "relu_group_norm_kernels.h"

#include "cuda_utils.cuh"

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

// y = relu(x) * scale[row] + shift[row]; scale_shift holds (scale, shift) per row.
template <typename acc_t>
struct ReluAffineOp {
  const acc_t* scale_shift;
  struct Params {
    acc_t scale;
    acc_t shift;
  };
  __device__ __forceinline__ Params row_params(int64_t row) const {
    return Params{scale_shift[2 * row], scale_shift[2 * row + 1]};
  }
  __device__ __forceinline__ acc_t operator()(const Params& p, acc_t x, acc_t /*unused*/) const {
    return relu_keep_nan(x) * p.scale + p.shift;
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
    const acc_t dr = p.c1 * dy + p.c2 * x + p.c3;
    return x > acc_t(0) ? dr : acc_t(0);
  }
};

// ---------------------------------------------------------------------------------------
// Per-(n, g) and per-channel kernels (one warp per item, kWarpsPerBlock items per block).

// Forward, step 2. partials: chunks pairs (shifted sum, shifted sum of squares) per group.
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads)
    relu_group_stats_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                            const T* __restrict__ bias, const double2* __restrict__ partials,
                            int64_t chunks, int64_t num_groups_total, int64_t G, int64_t Cg,
                            int64_t group_size, double eps, S* __restrict__ mean_out,
                            S* __restrict__ rstd_out, S* __restrict__ scale_shift) {
  const int64_t ng = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (ng >= num_groups_total) {
    return;  // whole warps only
  }
  double sum = 0.0;
  double sum_sq = 0.0;
  for (int64_t k = lane; k < chunks; k += kWarpSize) {
    const double2 p = partials[ng * chunks + k];
    sum += p.x;
    sum_sq += p.y;
  }
  sum = warp_allreduce_sum(sum);
  sum_sq = warp_allreduce_sum(sum_sq);

  // The shift the partials were taken around (ShiftedMomentsOp: first element of the group).
  const double shift = relu_keep_nan(ScalarOps<T>::to_double(x[ng * group_size]));
  const double count = static_cast<double>(group_size);
  const double mean = shift + sum / count;
  double m2 = sum_sq - sum * sum / count;
  m2 = m2 < 0.0 ? 0.0 : m2;  // keeps NaN
  const double rstd = 1.0 / sqrt(m2 / count + eps);
  if (lane == 0) {
    mean_out[ng] = static_cast<S>(mean);
    rstd_out[ng] = static_cast<S>(rstd);
  }
  const int64_t g = ng % G;
  for (int64_t k = lane; k < Cg; k += kWarpSize) {
    const int64_t c = g * Cg + k;
    const int64_t row = ng * Cg + k;
    const double w = weight != nullptr ? ScalarOps<T>::to_double(weight[c]) : 1.0;
    const double b = bias != nullptr ? ScalarOps<T>::to_double(bias[c]) : 0.0;
    const double scale = rstd * w;
    scale_shift[2 * row] = static_cast<S>(scale);
    scale_shift[2 * row + 1] = static_cast<S>(b - mean * scale);
  }
}

// Backward, step 2. row_sums: (ds, db) per row.
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads)
    relu_backward_coefficients_kernel(const double2* __restrict__ row_sums,
                                      const S* __restrict__ mean, const S* __restrict__ rstd,
                                      const T* __restrict__ weight, int64_t num_groups_total,
                                      int64_t G, int64_t Cg, int64_t group_size,
                                      S* __restrict__ coefficients) {
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
  const double mu = static_cast<double>(mean[ng]);
  const double rs = static_cast<double>(rstd[ng]);
  const double inv_count = 1.0 / static_cast<double>(group_size);
  const double c2 = (db_w * mu - ds_w) * rs * rs * rs * inv_count;
  const double c3 = -c2 * mu - db_w * rs * inv_count;
  for (int64_t k = lane; k < Cg; k += kWarpSize) {
    const double w = weight != nullptr ? ScalarOps<T>::to_double(weight[g * Cg + k]) : 1.0;
    const int64_t row = ng * Cg + k;
    coefficients[3 * row] = static_cast<S>(rs * w);
    coefficients[3 * row + 1] = static_cast<S>(c2);
    coefficients[3 * row + 2] = static_cast<S>(c3);
  }
}

// Backward, step 4: one warp per channel, lanes over n, then a butterfly (fixed order).
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads)
    relu_param_grads_kernel(const double2* __restrict__ row_sums, const S* __restrict__ mean,
                            const S* __restrict__ rstd, int64_t N, int64_t C, int64_t G,
                            int64_t Cg, T* __restrict__ dweight, T* __restrict__ dbias) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (c >= C) {
    return;  // whole warps only
  }
  const int64_t g = c / Cg;
  double dw = 0.0;
  double db = 0.0;
  for (int64_t n = lane; n < N; n += kWarpSize) {
    const double2 sums = row_sums[n * C + c];
    const int64_t ng = n * G + g;
    dw += (sums.x - sums.y * static_cast<double>(mean[ng])) * static_cast<double>(rstd[ng]);
    db += sums.y;
  }
  dw = warp_allreduce_sum(dw);
  db = warp_allreduce_sum(db);
  if (lane == 0) {
    if (dweight != nullptr) {
      dweight[c] = ScalarOps<T>::from_double(dw);
    }
    if (dbias != nullptr) {
      dbias[c] = ScalarOps<T>::from_double(db);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Workspace layouts (one function sizes and carves, so the two always agree).

template <typename T, typename S>
struct ForwardWorkspace {
  ReducePlan plan;
  double2* partials;  // N * G * chunks
  S* scale_shift;     // 2 * N * C
  size_t bytes;
};

template <typename T, typename S>
ForwardWorkspace<T, S> forward_workspace(void* base, int64_t N, int64_t C, int64_t G,
                                         int64_t HxW) {
  ForwardWorkspace<T, S> ws;
  WorkspaceCarver carver(base);
  ws.plan = make_reduce_plan((C / G) * HxW, ScalarOps<T>::kVecElems);
  ws.partials = carver.take<double2>(N * G * ws.plan.chunks_per_segment);
  ws.scale_shift = carver.take<S>(2 * N * C);
  ws.bytes = carver.bytes();
  return ws;
}

template <typename T, typename S>
struct BackwardWorkspace {
  ReducePlan plan;
  double2* partials;  // N * C * chunks
  double2* row_sums;  // N * C (used when chunks > 1)
  S* coefficients;    // 3 * N * C
  size_t bytes;
};

template <typename T, typename S>
BackwardWorkspace<T, S> backward_workspace(void* base, int64_t N, int64_t C, int64_t HxW) {
  BackwardWorkspace<T, S> ws;
  WorkspaceCarver carver(base);
  ws.plan = make_reduce_plan(HxW, ScalarOps<T>::kVecElems);
  ws.partials = carver.take<double2>(N * C * ws.plan.chunks_per_segment);
  ws.row_sums = carver.take<double2>(ws.plan.chunks_per_segment > 1 ? N * C : 0);
  ws.coefficients = carver.take<S>(3 * N * C);
  ws.bytes = carver.bytes();
  return ws;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Launchers.

template <typename scalar_t, typename stats_t>
size_t relu_group_norm_forward_workspace_bytes(int64_t N, int64_t C, int64_t G, int64_t HxW) {
  if (N * C * HxW == 0) {
    return 0;
  }
  return forward_workspace<scalar_t, stats_t>(nullptr, N, C, G, HxW).bytes;
}

template <typename scalar_t, typename stats_t>
cudaError_t launch_relu_group_norm_forward(const scalar_t* x, const scalar_t* weight,
                                           const scalar_t* bias, scalar_t* y, stats_t* mean,
                                           stats_t* rstd, int64_t N, int64_t C, int64_t G,
                                           int64_t HxW, double eps, void* workspace,
                                           cudaStream_t stream) {
  using acc_t = typename ScalarOps<scalar_t>::acc_t;
  static_assert(std::is_same_v<acc_t, stats_t>, "stats_t must be the accumulation type");
  constexpr int kNatural = ScalarOps<scalar_t>::kVecElems;
  if (N * C * HxW == 0) {
    return cudaSuccess;  // nothing to launch (the host returns empty outputs)
  }
  const int64_t Cg = C / G;
  const int64_t group_size = Cg * HxW;
  const int64_t num_groups_total = N * G;
  const ForwardWorkspace<scalar_t, stats_t> ws =
      forward_workspace<scalar_t, stats_t>(workspace, N, C, G, HxW);

  // 1. Chunk partials of the shifted moments of relu(x), per group.
  const bool vectorized_stats = group_size % kNatural == 0 && is_aligned_16(x);
  FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_segment_pair_sums<scalar_t, /*kTwoInputs=*/false>(
      x, nullptr, ws.partials, num_groups_total, group_size, ws.plan, vectorized_stats,
      ShiftedMomentsOp<scalar_t, /*kRelu=*/true>{x, 1, group_size}, stream)));

  // 2. mean, rstd, and per-row scale/shift.
  const int64_t stats_blocks = blocks_for_warp_items(num_groups_total);
  if (!grid_fits(stats_blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  relu_group_stats_kernel<scalar_t, stats_t>
      <<<static_cast<unsigned>(stats_blocks), kThreads, 0, stream>>>(
          x, weight, bias, ws.partials, ws.plan.chunks_per_segment, num_groups_total, G, Cg,
          group_size, eps, mean, rstd, ws.scale_shift);
  FUSED_OPS_RETURN_IF_LAUNCH_FAILED();

  // 3. y = relu(x) * scale + shift.
  const bool vectorized_map = HxW % kNatural == 0 && is_aligned_16(x) && is_aligned_16(y);
  return launch_row_map<scalar_t, /*kTwoInputs=*/false>(x, nullptr, y, N * C, HxW,
                                                        vectorized_map,
                                                        ReluAffineOp<acc_t>{ws.scale_shift},
                                                        stream);
}

template <typename scalar_t, typename stats_t>
size_t relu_group_norm_backward_workspace_bytes(int64_t N, int64_t C, int64_t /*G*/,
                                               int64_t HxW) {
  if (N * C * HxW == 0) {
    return 0;
  }
  return backward_workspace<scalar_t, stats_t>(nullptr, N, C, HxW).bytes;
}

template <typename scalar_t, typename stats_t>
cudaError_t launch_relu_group_norm_backward(const scalar_t* dy, const scalar_t* x,
                                            const stats_t* mean, const stats_t* rstd,
                                            const scalar_t* weight, scalar_t* dx,
                                            scalar_t* dweight, scalar_t* dbias, int64_t N,
                                            int64_t C, int64_t G, int64_t HxW, void* workspace,
                                            cudaStream_t stream) {
  using acc_t = typename ScalarOps<scalar_t>::acc_t;
  static_assert(std::is_same_v<acc_t, stats_t>, "stats_t must be the accumulation type");
  constexpr int kNatural = ScalarOps<scalar_t>::kVecElems;
  if (N * C * HxW == 0) {
    return cudaSuccess;
  }
  if (weight == nullptr) {
    dweight = nullptr;  // no weight, no weight gradient (the host leaves it undefined)
  }
  if (dx == nullptr && dweight == nullptr && dbias == nullptr) {
    return cudaSuccess;
  }
  const int64_t Cg = C / G;
  const int64_t rows = N * C;
  const BackwardWorkspace<scalar_t, stats_t> ws =
      backward_workspace<scalar_t, stats_t>(workspace, N, C, HxW);

  // 1. Per-row ds = sum(dy * relu(x)), db = sum(dy).
  const bool vectorized_sums = HxW % kNatural == 0 && is_aligned_16(x) && is_aligned_16(dy);
  FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_segment_pair_sums<scalar_t, /*kTwoInputs=*/true>(
      x, dy, ws.partials, rows, HxW, ws.plan, vectorized_sums, ReluBackwardSumsOp{}, stream)));
  const double2* row_sums = nullptr;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(reduce_chunk_partials(
      ws.partials, ws.plan.chunks_per_segment, rows, ws.row_sums, &row_sums, stream));

  if (dx != nullptr) {
    // 2. Per-row coefficients, 3. dx.
    const int64_t coefficient_blocks = blocks_for_warp_items(N * G);
    if (!grid_fits(coefficient_blocks)) {
      return cudaErrorInvalidConfiguration;
    }
    relu_backward_coefficients_kernel<scalar_t, stats_t>
        <<<static_cast<unsigned>(coefficient_blocks), kThreads, 0, stream>>>(
            row_sums, mean, rstd, weight, N * G, G, Cg, Cg * HxW, ws.coefficients);
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
    const bool vectorized_map =
        HxW % kNatural == 0 && is_aligned_16(x) && is_aligned_16(dy) && is_aligned_16(dx);
    FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_row_map<scalar_t, /*kTwoInputs=*/true>(
        x, dy, dx, rows, HxW, vectorized_map, ReluBackwardInputOp<acc_t>{ws.coefficients},
        stream)));
  }

  if (dweight != nullptr || dbias != nullptr) {
    // 4. dweight, dbias.
    const int64_t channel_blocks = blocks_for_warp_items(C);
    if (!grid_fits(channel_blocks)) {
      return cudaErrorInvalidConfiguration;
    }
    relu_param_grads_kernel<scalar_t, stats_t>
        <<<static_cast<unsigned>(channel_blocks), kThreads, 0, stream>>>(
            row_sums, mean, rstd, N, C, G, Cg, dweight, dbias);
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  }
  return cudaSuccess;
}

#define FUSED_OPS_INSTANTIATE_RELU_GROUP_NORM(scalar_t, stats_t)                               \
  template size_t relu_group_norm_forward_workspace_bytes<scalar_t, stats_t>(                  \
      int64_t, int64_t, int64_t, int64_t);                                                     \
  template cudaError_t launch_relu_group_norm_forward<scalar_t, stats_t>(                      \
      const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*, stats_t*, stats_t*,        \
      int64_t, int64_t, int64_t, int64_t, double, void*, cudaStream_t);                        \
  template size_t relu_group_norm_backward_workspace_bytes<scalar_t, stats_t>(                 \
      int64_t, int64_t, int64_t, int64_t);                                                     \
  template cudaError_t launch_relu_group_norm_backward<scalar_t, stats_t>(                     \
      const scalar_t*, const scalar_t*, const stats_t*, const stats_t*, const scalar_t*,       \
      scalar_t*, scalar_t*, scalar_t*, int64_t, int64_t, int64_t, int64_t, void*, cudaStream_t);

FUSED_OPS_INSTANTIATE_RELU_GROUP_NORM(float, float)
FUSED_OPS_INSTANTIATE_RELU_GROUP_NORM(double, double)
FUSED_OPS_INSTANTIATE_RELU_GROUP_NORM(__half, float)
FUSED_OPS_INSTANTIATE_RELU_GROUP_NORM(__nv_bfloat16, float)

#undef FUSED_OPS_INSTANTIATE_RELU_GROUP_NORM

}  // namespace gpu
}  // namespace fused_ops
