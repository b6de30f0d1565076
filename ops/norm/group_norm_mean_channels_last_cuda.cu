// group_norm_mean forward on a channels-last tensor: out[n] = mean of group_norm(x)[n], with
// x stored as (N, spatial, C), channels innermost (what cuDNN's NDHWC convolutions write).
//
// The statistics GroupNorm + mean needs are per-(n, c) moments. In this layout a sample is
// one flat array of spatial * C elements in which the channel of element i is i % C, so:
//
// Pass 1, channels_last_partial_moments_kernel: grid = N * chunks blocks, one per
//   (sample, chunk); a chunk is a contiguous run of `vectors_per_block` 16-byte vectors
//   (V = 16 / sizeof(scalar_t) elements each). Thread t reads vectors t, t + B, ...,
//   t + 7B of its chunk (coalesced 16-byte loads, all eight issued before the first use).
//   B and vectors_per_block are multiples of period = C / V, so every vector a thread reads
//   holds the same V channels, (t % period) * V ... + V - 1: each thread keeps V running
//   (sum, sum of squares) pairs in double of d = x - shift[c], shift[c] the channel's value
//   at the sample's first position (shifted sums: no E[x^2] - mean^2 cancellation, as in
//   every other kernel), with no per-element index arithmetic. The block then sums, per
//   channel, the pairs of the B / period threads that hold it, in a fixed order, through
//   shared memory, and writes one pair per (sample, chunk, channel) to the workspace.
// Pass 2, channels_last_finalize_kernel: one block per sample sums its chunks' pairs in
//   order into per-channel moments, combines each group's channels (group_norm_math.h:
//   Chan et al.) into mean and rstd, and writes out[n] = (1/C) sum_c (w_c rstd_g (m_c -
//   mean_g) + b_c).
//
// No atomics: results are bitwise reproducible. The normalised tensor is never written.
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "norm/group_norm_math.h"
#include "norm/group_norm_mean_channels_last.h"

#include <algorithm>

namespace fused_ops {
namespace gpu {
namespace {

constexpr int kVectorBytes = 16;
constexpr int kVectorsPerThread = 8;   // vectors each thread reads per chunk
constexpr int kTargetThreads = 256;    // block size is the multiple of `period` nearest this
constexpr int kFinalizeThreads = 256;  // a power of two (tree reduction)

struct MeanRstd {
  double mean;
  double rstd;
};

template <typename scalar_t>
__global__ void channels_last_partial_moments_kernel(const scalar_t* __restrict__ x,
                                                     int64_t vectors_per_sample,
                                                     int64_t chunks_per_sample,
                                                     int64_t vectors_per_block, int channels,
                                                     int period, double2* __restrict__ partial) {
  constexpr int V = kVectorBytes / sizeof(scalar_t);
  extern __shared__ double2 thread_moments[];  // [blockDim.x][V]
  const int64_t n = blockIdx.x / chunks_per_sample;
  const int64_t chunk = blockIdx.x % chunks_per_sample;
  const uint4* sample = reinterpret_cast<const uint4*>(x) + n * vectors_per_sample;
  const int64_t begin = chunk * vectors_per_block;
  const int64_t end =
      min(begin + vectors_per_block, vectors_per_sample);  // vectors_per_block = 8 B

  // All loads first, so that kVectorsPerThread of them are in flight.
  uint4 raw[kVectorsPerThread];
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const int64_t v = begin + threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    raw[k] = v < end ? __ldg(sample + v) : make_uint4(0u, 0u, 0u, 0u);
  }
  // The shifts of this thread's V channels: their values at the sample's first position,
  // which is the sample's vector t % period.
  const uint4 shift_raw = __ldg(sample + threadIdx.x % period);
  const scalar_t* shift_lanes = reinterpret_cast<const scalar_t*>(&shift_raw);
  double shift[V];
  double sum[V];
  double sum_sq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    shift[j] = ScalarOps<scalar_t>::to_double(shift_lanes[j]);
    sum[j] = 0.0;
    sum_sq[j] = 0.0;
  }
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    if (begin + threadIdx.x + static_cast<int64_t>(k) * blockDim.x < end) {
      const scalar_t* lanes = reinterpret_cast<const scalar_t*>(&raw[k]);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const double d = ScalarOps<scalar_t>::to_double(lanes[j]) - shift[j];
        sum[j] += d;
        sum_sq[j] = fma(d, d, sum_sq[j]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    thread_moments[threadIdx.x * V + j] = make_double2(sum[j], sum_sq[j]);
  }
  __syncthreads();

  // Channel c is held by the threads t with t % period == c / V, in lane c % V.
  for (int c = threadIdx.x; c < channels; c += blockDim.x) {
    const int owner = c / V;
    const int lane = c % V;
    double s = 0.0;
    double q = 0.0;
    for (int t = owner; t < static_cast<int>(blockDim.x); t += period) {
      const double2 m = thread_moments[t * V + lane];
      s += m.x;
      q += m.y;
    }
    partial[(n * chunks_per_sample + chunk) * channels + c] = make_double2(s, q);
  }
}

template <typename scalar_t, typename stat_t>
__global__ void channels_last_finalize_kernel(
    const scalar_t* __restrict__ x, const double2* __restrict__ partial, int64_t chunks_per_sample,
    int channels, int groups, int64_t spatial, const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias, double eps, scalar_t* __restrict__ out,
    stat_t* __restrict__ mean, stat_t* __restrict__ rstd, stat_t* __restrict__ channel_mean) {
  extern __shared__ double2 finalize_smem[];
  auto* channel_moments = reinterpret_cast<norm::Moments*>(finalize_smem);      // [channels]
  auto* group_stats = reinterpret_cast<MeanRstd*>(channel_moments + channels);  // [groups]
  double* reduce = reinterpret_cast<double*>(group_stats + groups);             // [blockDim.x]
  const int64_t n = blockIdx.x;
  const double count = static_cast<double>(spatial);

  for (int c = threadIdx.x; c < channels; c += blockDim.x) {
    double s = 0.0;
    double q = 0.0;
    const double2* p = partial + n * chunks_per_sample * channels + c;
    for (int64_t k = 0; k < chunks_per_sample; ++k) {
      const double2 m = p[k * channels];
      s += m.x;
      q += m.y;
    }
    const double shift = ScalarOps<scalar_t>::to_double(x[n * spatial * channels + c]);
    channel_moments[c] = norm::moments_from_shifted_sums(shift, s, q, count);
    channel_mean[n * channels + c] = static_cast<stat_t>(channel_moments[c].mean);
  }
  __syncthreads();

  const int channels_per_group = channels / groups;
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    const norm::Moments m = norm::combine_equal_parts(&channel_moments[g * channels_per_group],
                                                      channels_per_group, count);
    const double rs = norm::rstd_from_m2(m.m2, count * channels_per_group, eps);
    mean[n * groups + g] = static_cast<stat_t>(m.mean);
    rstd[n * groups + g] = static_cast<stat_t>(rs);
    group_stats[g] = MeanRstd{m.mean, rs};
  }
  __syncthreads();

  double total = 0.0;
  for (int c = threadIdx.x; c < channels; c += blockDim.x) {
    const MeanRstd gs = group_stats[c / channels_per_group];
    const double w = weight ? ScalarOps<scalar_t>::to_double(weight[c]) : 1.0;
    const double b = bias ? ScalarOps<scalar_t>::to_double(bias[c]) : 0.0;
    total += norm::group_norm_mean_channel_term(channel_moments[c].mean - gs.mean, gs.rstd, w, b);
  }
  reduce[threadIdx.x] = total;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {  // blockDim.x is a power of 2
    if (threadIdx.x < stride) {
      reduce[threadIdx.x] += reduce[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[n] = ScalarOps<scalar_t>::from_double(reduce[0] / static_cast<double>(channels));
  }
}

struct Plan {
  int vector_width;  // elements per 16-byte vector
  int period;        // C / vector_width: threads per distinct set of channels
  int threads;       // block size of pass 1, a multiple of period
  int64_t vectors_per_sample;
  int64_t vectors_per_block;
  int64_t chunks_per_sample;
};

Plan make_plan(int64_t C, int64_t spatial, int64_t element_size) {
  Plan p;
  p.vector_width = static_cast<int>(kVectorBytes / element_size);
  p.period = static_cast<int>(C / p.vector_width);
  p.threads = std::max(1, kTargetThreads / p.period) * p.period;
  p.vectors_per_sample = spatial * C / p.vector_width;
  p.vectors_per_block = static_cast<int64_t>(p.threads) * kVectorsPerThread;
  p.chunks_per_sample = (p.vectors_per_sample + p.vectors_per_block - 1) / p.vectors_per_block;
  return p;
}

int64_t element_size(ScalarKind kind) {
  switch (kind) {
    case ScalarKind::kDouble:
      return 8;
    case ScalarKind::kFloat:
      return 4;
    default:
      return 2;
  }
}

template <typename scalar_t>
cudaError_t launch(const norm::GroupNormMeanForwardParams& p, void* workspace,
                   cudaStream_t stream) {
  using stat_t = typename ScalarOps<scalar_t>::acc_t;
  const int64_t N = p.sizes.N, C = p.sizes.C, G = p.sizes.G, spatial = p.sizes.HxW;
  const auto* x = static_cast<const scalar_t*>(p.x);
  const Plan plan = make_plan(C, spatial, sizeof(scalar_t));
  double2* partial = static_cast<double2*>(workspace);
  if (!grid_fits(N * plan.chunks_per_sample) || !grid_fits(N)) {
    return cudaErrorInvalidConfiguration;
  }
  const size_t pass1_smem = static_cast<size_t>(plan.threads) * plan.vector_width * sizeof(double2);
  channels_last_partial_moments_kernel<scalar_t>
      <<<static_cast<unsigned>(N * plan.chunks_per_sample), plan.threads, pass1_smem, stream>>>(
          x, plan.vectors_per_sample, plan.chunks_per_sample, plan.vectors_per_block,
          static_cast<int>(C), plan.period, partial);
  FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  const size_t pass2_smem = static_cast<size_t>(C) * sizeof(norm::Moments) +
                            static_cast<size_t>(G) * sizeof(MeanRstd) +
                            kFinalizeThreads * sizeof(double);
  channels_last_finalize_kernel<scalar_t, stat_t>
      <<<static_cast<unsigned>(N), kFinalizeThreads, pass2_smem, stream>>>(
          x, partial, plan.chunks_per_sample, static_cast<int>(C), static_cast<int>(G), spatial,
          static_cast<const scalar_t*>(p.weight), static_cast<const scalar_t*>(p.bias), p.eps,
          static_cast<scalar_t*>(p.out), static_cast<stat_t*>(p.mean), static_cast<stat_t*>(p.rstd),
          static_cast<stat_t*>(p.channel_mean));
  return cudaGetLastError();
}

}  // namespace
}  // namespace gpu

namespace norm {

bool group_norm_mean_channels_last_cuda_supported(int64_t channels, int64_t element_size) {
  // Up to 2048 channels the shared memory of both passes stays under the default 48 KB.
  const int64_t width = gpu::kVectorBytes / element_size;
  return channels % width == 0 && channels <= 2048;
}

size_t group_norm_mean_channels_last_workspace_bytes(const GroupNormMeanForwardParams& p) {
  const gpu::Plan plan = gpu::make_plan(p.sizes.C, p.sizes.HxW, gpu::element_size(p.dtype));
  return static_cast<size_t>(p.sizes.N * plan.chunks_per_sample * p.sizes.C) * sizeof(double2);
}

cudaError_t launch_group_norm_mean_channels_last(const GroupNormMeanForwardParams& p,
                                                 void* workspace, cudaStream_t stream) {
  return gpu::dispatch_cuda_scalar(
      p.dtype, [&](auto tag) { return gpu::launch<decltype(tag)>(p, workspace, stream); });
}

}  // namespace norm
}  // namespace fused_ops
