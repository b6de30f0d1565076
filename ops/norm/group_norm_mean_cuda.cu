// CUDA kernels of fused::group_norm_mean: out[n] = mean over (c, *) of group_norm(x)[n].
//
// The input is viewed as (N, C, HxW) with G groups of Cg = C / G channels; row (n, c) is the
// contiguous run of HxW elements starting at (n * C + c) * HxW, and group (n, g) the rows
// n * C + g * Cg ... + Cg - 1 (M = Cg * HxW elements from (n * G + g) * M). The normalised
// tensor is never written: with channel means m[n, c] and group statistics (mean, rstd),
//   out[n] = (1 / C) * sum_c (w[c] * rstd[n, g] * (m[n, c] - mean[n, g]) + b[c]).
// The generic kernels and their tiling are described in row_kernels.cuh; sizes below are for
// the headline case, a float conv output (128, 24, 22, 30, 30) with G = 8: HxW = 19,800,
// Cg = 3, 3,072 rows.
//
// Forward (input read once; no floating-point atomics):
//   1. segment_pair_sums_kernel<ShiftedMomentsOp> over the rows: each row is cut into equal
//      chunks of ~2048 16-byte vectors (4,950 vectors: 3 chunks of 1,650), one 256-thread
//      block per (row, chunk): grid 3,072 * 3 = 9,216 blocks. A thread sums d = x - x[first
//      element of its group] and d^2 in double (4 independent 128-bit loads in flight); the
//      block reduces in a fixed order and thread 0 writes the chunk's pair. Rows shorter than
//      1024 vectors get 2^k <= 32 threads each, several rows per block.
//   2. Per-row sums of the chunk pairs, in chunk order: done by the lanes of step 3 when each
//      has at most 64 pairs to add (here: lanes 0..2 add 3 pairs each), else first by
//      sum_chunk_partials_kernel (one warp per row).
//   3. group_norm_mean_group_stats_kernel: one warp per (n, g) (1,024 warps, 128 blocks)
//      adds its rows' sums (fixed order), writes mean, rstd and the channel means, and the
//      group's term sum_{c in g} (w[c] * rstd * (m[n, c] - mean) + b[c]) to the workspace.
//   4. group_norm_mean_output_kernel: one warp per sample (128 warps) adds its G terms in a
//      fixed order: out[n] = total / C.
//   Every sum has a fixed order that depends only on the shape (the chunking, and the choice
//   in step 2, are functions of (C, G, HxW, dtype), not of the device or of the alignment), so
//   results are deterministic.
//
// Backward (input read once, grad_input written once): grad_output is constant over a
// sample, dy_n = g[n] / (C * HxW), so the GroupNorm sums need no pass over x:
// ds[n, c] = dy_n * HxW * m[n, c], db[n, c] = dy_n * HxW.
//   1. group_norm_mean_backward_coefficients_kernel, one warp per (n, g): with
//      ds_w = sum_c ds * w[c], db_w = sum_c db * w[c],
//        c2 = (db_w * mean - ds_w) * rstd^3 / M,  c3 = -c2 * mean - db_w * rstd / M,
//      and per row alpha = c2, beta = rstd * w[c] * dy_n + c3 (group_norm_math.h).
//   2. row_map_kernel<AffineOp>: dx = alpha * x + beta (19,800 elements = 5 tiles of 990
//      vectors per row: grid 15,360 blocks).
//   3. affine_param_grads_kernel (row_kernels.cuh), one warp per channel, over n in a fixed order:
//      dweight[c] = sum_n dy_n * HxW * (m[n, c] - mean[n, g]) * rstd[n, g],
//      dbias[c] = sum_n dy_n * HxW.
//
// Workspace (float headline): forward 144 KB of chunk pairs + 48 KB for row sums (unused
// here) + 8 KB of group terms; backward 24 KB of (alpha, beta).
#include "common/cuda/cuda_kernel.cuh"
#include "norm/channels_last_kernels.h"
#include "norm/group_norm_math.h"
#include "norm/norm_kernels.h"
#include "norm/row_kernels.cuh"

#include <type_traits>

namespace fused_ops {
namespace gpu {
namespace {

// Most chunk pairs one lane of group_norm_mean_group_stats_kernel adds up by itself.
constexpr int64_t kMaxSequentialPartials = 64;

// dx = alpha[row] * x + beta[row]; coefficients holds (alpha, beta) per row.
template <typename acc_t>
struct AffineOp {
  const acc_t* coefficients;
  struct Params {
    acc_t alpha;
    acc_t beta;
  };
  __device__ __forceinline__ Params row_params(int64_t row) const {
    return Params{coefficients[2 * row], coefficients[2 * row + 1]};
  }
  __device__ __forceinline__ acc_t operator()(const Params& p, acc_t x, acc_t /*unused*/) const {
    return p.alpha * x + p.beta;
  }
};

// Forward, step 3. row_partials: `chunks` pairs (shifted sum, shifted sum of squares) per row,
// all rows of a group shifted by the group's first element (ShiftedMomentsOp with
// segments_per_shift = Cg). Each lane adds its rows' chunks in order (the host passes
// chunks == 1 and the row sums instead when that would be long).
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads)
    group_norm_mean_group_stats_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                       const T* __restrict__ bias,
                                       const double2* __restrict__ row_partials, int64_t chunks,
                                       int64_t num_groups_total, int64_t G, int64_t Cg, int64_t HxW,
                                       double eps, S* __restrict__ mean_out,
                                       S* __restrict__ rstd_out, S* __restrict__ channel_mean_out,
                                       double* __restrict__ group_terms) {
  const int64_t ng = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (ng >= num_groups_total) {
    return;  // whole warps only
  }
  const int64_t group_size = Cg * HxW;
  // Sum of the chunk pairs of row `row`, in chunk order.
  auto row_sum = [&](int64_t row) {
    const double2* p = row_partials + row * chunks;
    double2 r = p[0];
    for (int64_t c = 1; c < chunks; ++c) {
      r.x += p[c].x;
      r.y += p[c].y;
    }
    return r;
  };
  double sum = 0.0;
  double sum_sq = 0.0;
  for (int64_t k = lane; k < Cg; k += kWarpSize) {
    const double2 p = row_sum(ng * Cg + k);
    sum += p.x;
    sum_sq += p.y;
  }
  sum = warp_allreduce_sum(sum);
  sum_sq = warp_allreduce_sum(sum_sq);

  // The shift the sums were taken around: the group's first element, widened exactly as
  // ShiftedMomentsOp widens it.
  const double shift = static_cast<double>(ScalarOps<T>::to_acc(x[ng * group_size]));
  const double count = static_cast<double>(group_size);
  const double hxw = static_cast<double>(HxW);
  const double group_offset = sum / count;  // mean - shift
  const norm::Moments m = norm::moments_from_shifted_sums(shift, sum, sum_sq, count);
  const double rstd = norm::rstd_from_m2(m.m2, count, eps);
  if (lane == 0) {
    mean_out[ng] = static_cast<S>(m.mean);
    rstd_out[ng] = static_cast<S>(rstd);
  }
  const int64_t g = ng % G;
  double term = 0.0;
  for (int64_t k = lane; k < Cg; k += kWarpSize) {
    const int64_t row = ng * Cg + k;
    const int64_t c = g * Cg + k;
    const double row_offset = row_sum(row).x / hxw;  // channel mean - shift
    channel_mean_out[row] = static_cast<S>(shift + row_offset);
    const double w = weight != nullptr ? ScalarOps<T>::to_double(weight[c]) : 1.0;
    const double b = bias != nullptr ? ScalarOps<T>::to_double(bias[c]) : 0.0;
    term += norm::group_norm_mean_channel_term(row_offset - group_offset, rstd, w, b);
  }
  term = warp_allreduce_sum(term);
  if (lane == 0) {
    group_terms[ng] = term;
  }
}

// Forward, step 4: one warp per sample.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    group_norm_mean_output_kernel(const double* __restrict__ group_terms, int64_t N, int64_t C,
                                  int64_t G, T* __restrict__ out) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (n >= N) {
    return;  // whole warps only
  }
  double total = 0.0;
  for (int64_t g = lane; g < G; g += kWarpSize) {
    total += group_terms[n * G + g];
  }
  total = warp_allreduce_sum(total);
  if (lane == 0) {
    out[n] = ScalarOps<T>::from_double(total / static_cast<double>(C));
  }
}

// Backward, step 1: one warp per (n, g).
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads) group_norm_mean_backward_coefficients_kernel(
    const T* __restrict__ grad_output, const S* __restrict__ mean, const S* __restrict__ rstd,
    const S* __restrict__ channel_mean, const T* __restrict__ weight, int64_t num_groups_total,
    int64_t C, int64_t G, int64_t Cg, int64_t HxW, S* __restrict__ coefficients) {
  const int64_t ng = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (ng >= num_groups_total) {
    return;  // whole warps only
  }
  const int64_t n = ng / G;
  const int64_t g = ng - n * G;
  const double hxw = static_cast<double>(HxW);
  const double dy = ScalarOps<T>::to_double(grad_output[n]) / (static_cast<double>(C) * hxw);
  double ds_w = 0.0;
  double db_w = 0.0;
  for (int64_t k = lane; k < Cg; k += kWarpSize) {
    const double w = weight != nullptr ? ScalarOps<T>::to_double(weight[g * Cg + k]) : 1.0;
    ds_w += w * dy * hxw * static_cast<double>(channel_mean[ng * Cg + k]);
    db_w += w * dy * hxw;
  }
  ds_w = warp_allreduce_sum(ds_w);
  db_w = warp_allreduce_sum(db_w);
  const double rs = static_cast<double>(rstd[ng]);
  const norm::BackwardCoefficients coef = norm::backward_coefficients(
      ds_w, db_w, static_cast<double>(mean[ng]), rs, static_cast<double>(Cg * HxW));
  for (int64_t k = lane; k < Cg; k += kWarpSize) {
    const double w = weight != nullptr ? ScalarOps<T>::to_double(weight[g * Cg + k]) : 1.0;
    const int64_t row = ng * Cg + k;
    coefficients[2 * row] = static_cast<S>(coef.c2);
    coefficients[2 * row + 1] = static_cast<S>(rs * w * dy + coef.c3);
  }
}

// Backward, step 3: the per-(n, c) sums of affine_param_grads_kernel. The gradient reaching
// sample n is constant, dy_n = grad_output[n] / (C * HxW), so db[n, c] = dy_n * HxW and
// ds[n, c] = db[n, c] * m[n, c] come from the channel means.
template <typename T, typename S>
struct ChannelMeanSums {
  const T* grad_output;
  const S* channel_mean;
  int64_t C;
  int64_t HxW;
  __device__ __forceinline__ double2 operator()(int64_t n, int64_t c) const {
    const double hxw = static_cast<double>(HxW);
    const double db =
        ScalarOps<T>::to_double(grad_output[n]) / (static_cast<double>(C) * hxw) * hxw;
    return make_double2(db * static_cast<double>(channel_mean[n * C + c]), db);
  }
};

// ---------------------------------------------------------------------------------------
// Workspace layouts (one function sizes and carves, so the two always agree).

template <typename T, typename S>
struct ForwardWorkspace {
  ReducePlan plan;
  double2* partials;    // N * C * chunks
  double2* row_sums;    // N * C (used when chunks > 1)
  double* group_terms;  // N * G
  size_t bytes;
};

template <typename T, typename S>
ForwardWorkspace<T, S> forward_workspace(void* base, int64_t N, int64_t C, int64_t G, int64_t HxW) {
  ForwardWorkspace<T, S> ws;
  WorkspaceCarver carver(base);
  ws.plan = make_reduce_plan(HxW, ScalarOps<T>::kVecElems);
  ws.partials = carver.take<double2>(N * C * ws.plan.chunks_per_segment);
  ws.row_sums = carver.take<double2>(ws.plan.chunks_per_segment > 1 ? N * C : 0);
  ws.group_terms = carver.take<double>(N * G);
  ws.bytes = carver.bytes();
  return ws;
}

template <typename T, typename S>
struct BackwardWorkspace {
  S* coefficients;  // 2 * N * C
  size_t bytes;
};

template <typename T, typename S>
BackwardWorkspace<T, S> backward_workspace(void* base, int64_t N, int64_t C) {
  BackwardWorkspace<T, S> ws;
  WorkspaceCarver carver(base);
  ws.coefficients = carver.take<S>(2 * N * C);
  ws.bytes = carver.bytes();
  return ws;
}

// ---------------------------------------------------------------------------------------
// Launchers.

template <typename scalar_t>
cudaError_t launch_forward(const norm::GroupNormMeanForwardParams& p, void* workspace,
                           cudaStream_t stream) {
  using acc_t = typename ScalarOps<scalar_t>::acc_t;  // also the statistics' type
  constexpr int kNatural = ScalarOps<scalar_t>::kVecElems;
  const auto* x = static_cast<const scalar_t*>(p.x);
  const int64_t N = p.sizes.N, C = p.sizes.C, G = p.sizes.G, HxW = p.sizes.HxW;
  const int64_t Cg = C / G;
  const int64_t rows = N * C;
  const ForwardWorkspace<scalar_t, acc_t> ws =
      forward_workspace<scalar_t, acc_t>(workspace, N, C, G, HxW);

  // 1. Per-(row, chunk) shifted sums (all rows of a group around the group's first element).
  const bool vectorized = HxW % kNatural == 0 && is_aligned_16(x);
  FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_segment_pair_sums<scalar_t, /*kTwoInputs=*/false>(
      x, nullptr, ws.partials, rows, HxW, ws.plan, vectorized,
      ShiftedMomentsOp<scalar_t, /*kRelu=*/false>{x, Cg, HxW}, stream)));
  // 2. Per-row sums: inside step 3 when each lane has few pairs to add (the headline case:
  // 1 row of 3 chunks per lane, which saves a launch), else by a warp per row first.
  const double2* row_partials = ws.partials;
  int64_t row_chunks = ws.plan.chunks_per_segment;
  if (ceil_div(Cg, kWarpSize) * row_chunks > kMaxSequentialPartials) {
    FUSED_OPS_RETURN_IF_CUDA_ERROR(
        reduce_chunk_partials(ws.partials, row_chunks, rows, ws.row_sums, &row_partials, stream));
    row_chunks = 1;
  }

  // 3. Group statistics, channel means, per-group terms.
  const int64_t group_blocks = blocks_for_warp_items(N * G);
  const int64_t sample_blocks = blocks_for_warp_items(N);
  if (!grid_fits(group_blocks) || !grid_fits(sample_blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  group_norm_mean_group_stats_kernel<scalar_t, acc_t>
      <<<static_cast<unsigned>(group_blocks), kThreads, 0, stream>>>(
          x, static_cast<const scalar_t*>(p.weight), static_cast<const scalar_t*>(p.bias),
          row_partials, row_chunks, N * G, G, Cg, HxW, p.eps, static_cast<acc_t*>(p.mean),
          static_cast<acc_t*>(p.rstd), static_cast<acc_t*>(p.channel_mean), ws.group_terms);
  FUSED_OPS_RETURN_IF_LAUNCH_FAILED();

  // 4. out[n].
  group_norm_mean_output_kernel<scalar_t>
      <<<static_cast<unsigned>(sample_blocks), kThreads, 0, stream>>>(
          ws.group_terms, N, C, G, static_cast<scalar_t*>(p.out));
  return cudaGetLastError();
}

template <typename scalar_t>
cudaError_t launch_backward(const norm::GroupNormMeanBackwardParams& p, void* workspace,
                            cudaStream_t stream) {
  using acc_t = typename ScalarOps<scalar_t>::acc_t;  // also the statistics' type
  constexpr int kNatural = ScalarOps<scalar_t>::kVecElems;
  const auto* grad_output = static_cast<const scalar_t*>(p.grad_output);
  const auto* x = static_cast<const scalar_t*>(p.x);
  const auto* weight = static_cast<const scalar_t*>(p.weight);
  const auto* mean = static_cast<const acc_t*>(p.mean);
  const auto* rstd = static_cast<const acc_t*>(p.rstd);
  const auto* channel_mean = static_cast<const acc_t*>(p.channel_mean);
  auto* dx = static_cast<scalar_t*>(p.dx);
  // No weight, no weight gradient (the host leaves it undefined).
  auto* dweight = weight != nullptr ? static_cast<scalar_t*>(p.dweight) : nullptr;
  auto* dbias = static_cast<scalar_t*>(p.dbias);
  const int64_t N = p.sizes.N, C = p.sizes.C, G = p.sizes.G, HxW = p.sizes.HxW;
  const int64_t Cg = C / G;
  const BackwardWorkspace<scalar_t, acc_t> ws =
      backward_workspace<scalar_t, acc_t>(workspace, N, C);

  if (dx != nullptr) {
    // 1. Per-row (alpha, beta), 2. dx.
    const int64_t coefficient_blocks = blocks_for_warp_items(N * G);
    if (!grid_fits(coefficient_blocks)) {
      return cudaErrorInvalidConfiguration;
    }
    group_norm_mean_backward_coefficients_kernel<scalar_t, acc_t>
        <<<static_cast<unsigned>(coefficient_blocks), kThreads, 0, stream>>>(
            grad_output, mean, rstd, channel_mean, weight, N * G, C, G, Cg, HxW, ws.coefficients);
    FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
    const bool vectorized = HxW % kNatural == 0 && is_aligned_16(x) && is_aligned_16(dx);
    FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_row_map<scalar_t, /*kTwoInputs=*/false>(
        x, nullptr, dx, N * C, HxW, vectorized, AffineOp<acc_t>{ws.coefficients}, stream)));
  }

  // 3. dweight, dbias.
  return launch_affine_param_grads<scalar_t, acc_t>(
      ChannelMeanSums<scalar_t, acc_t>{grad_output, channel_mean, C, HxW}, mean, rstd, N, C, G,
      dweight, dbias, stream);
}

template <typename T>
struct ForwardFamily {
  static size_t workspace_bytes(const norm::GroupNormMeanForwardParams& p) {
    if (p.channels_last) {
      return norm::group_norm_mean_channels_last_workspace_bytes(p);
    }
    return forward_workspace<T, typename ScalarOps<T>::acc_t>(nullptr, p.sizes.N, p.sizes.C,
                                                              p.sizes.G, p.sizes.HxW)
        .bytes;
  }
  static cudaError_t launch(const norm::GroupNormMeanForwardParams& p, void* workspace,
                            cudaStream_t stream) {
    return p.channels_last ? norm::launch_group_norm_mean_channels_last(p, workspace, stream)
                           : launch_forward<T>(p, workspace, stream);
  }
};

template <typename T>
struct BackwardFamily {
  static size_t workspace_bytes(const norm::GroupNormMeanBackwardParams& p) {
    return backward_workspace<T, typename ScalarOps<T>::acc_t>(nullptr, p.sizes.N, p.sizes.C).bytes;
  }
  static cudaError_t launch(const norm::GroupNormMeanBackwardParams& p, void* workspace,
                            cudaStream_t stream) {
    return launch_backward<T>(p, workspace, stream);
  }
};

}  // namespace
}  // namespace gpu

namespace norm {

const CudaKernel<GroupNormMeanForwardParams> group_norm_mean_forward_cuda =
    gpu::make_cuda_kernel<GroupNormMeanForwardParams, gpu::ForwardFamily>();
const CudaKernel<GroupNormMeanBackwardParams> group_norm_mean_backward_cuda =
    gpu::make_cuda_kernel<GroupNormMeanBackwardParams, gpu::BackwardFamily>();

}  // namespace norm
}  // namespace fused_ops
