// group_norm_mean forward on a channels-last tensor: out[n] = mean of group_norm(x)[n], with
// x stored as (N, spatial, C), channels innermost (what cuDNN's NDHWC convolutions write).
//
// The statistics GroupNorm + mean needs are per-(n, c) sums and sums of squares. In this
// layout a sample is one flat array of spatial * C elements in which the channel of element
// i is i % C, so:
//
// Pass 1, channels_last_partial_moments_kernel: grid = N * chunks blocks, one per
//   (sample, chunk); a chunk is a contiguous run of `vectors_per_block` 16-byte vectors
//   (V = 16 / sizeof(scalar_t) elements each). Thread t reads vectors t, t + B, ...,
//   t + 7B of its chunk (coalesced 16-byte loads, all eight issued before the first use). B and vectors_per_block are multiples of
//   period = C / V, so every vector a thread reads holds the same V channels,
//   (t % period) * V ... + V - 1: each thread keeps V running (sum, sum of squares) pairs in
//   double, with no per-element index arithmetic. The block then sums, per channel, the
//   pairs of the B / period threads that hold it, in a fixed order, through shared memory,
//   and writes one (sum, sum of squares) pair per (sample, chunk, channel) to the workspace.
// Pass 2, channels_last_finalize_kernel: one block per sample sums its chunks' pairs in
//   order into per-channel moments, then per-group mean and rstd (var = E[x^2] - mean^2,
//   exact enough in double), and out[n] = (1/C) sum_c (w_c rstd_g (m_c - mean_g) + b_c).
//
// No atomics: results are bitwise reproducible. The normalised tensor is never written.
#include "group_norm_mean_channels_last_kernels.h"

#include "cuda_utils.cuh"

#include <algorithm>

namespace fused_ops {
namespace gpu {
namespace {

constexpr int kVectorBytes = 16;
constexpr int kVectorsPerThread = 8;   // vectors each thread reads per chunk
constexpr int kTargetThreads = 256;    // block size is the multiple of `period` nearest this
constexpr int kFinalizeThreads = 256;

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
  const int64_t end = min(begin + vectors_per_block, vectors_per_sample);  // vectors_per_block = 8 B

  double sum[V];
  double sum_sq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    sum[j] = 0.0;
    sum_sq[j] = 0.0;
  }
  // All loads first, so that kVectorsPerThread of them are in flight; vectors past the end
  // of the sample read as zeros, which add nothing to either sum.
  uint4 raw[kVectorsPerThread];
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const int64_t v = begin + threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    raw[k] = v < end ? __ldg(sample + v) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const scalar_t* lanes = reinterpret_cast<const scalar_t*>(&raw[k]);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const double d = ScalarOps<scalar_t>::to_double(lanes[j]);
      sum[j] += d;
      sum_sq[j] += d * d;
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
__global__ void channels_last_finalize_kernel(const double2* __restrict__ partial,
                                              int64_t chunks_per_sample, int channels, int groups,
                                              int64_t spatial, const scalar_t* __restrict__ weight,
                                              const scalar_t* __restrict__ bias, double eps,
                                              scalar_t* __restrict__ out, stat_t* __restrict__ mean,
                                              stat_t* __restrict__ rstd,
                                              stat_t* __restrict__ channel_mean) {
  extern __shared__ double2 finalize_smem[];
  double2* channel_moments = finalize_smem;              // [channels] (sum, sum of squares)
  double2* group_stats = finalize_smem + channels;       // [groups] (mean, rstd)
  double* reduce = reinterpret_cast<double*>(group_stats + groups);  // [blockDim.x]
  const int64_t n = blockIdx.x;
  const double inv_spatial = 1.0 / static_cast<double>(spatial);

  for (int c = threadIdx.x; c < channels; c += blockDim.x) {
    double s = 0.0;
    double q = 0.0;
    const double2* p = partial + n * chunks_per_sample * channels + c;
    for (int64_t k = 0; k < chunks_per_sample; ++k) {
      const double2 m = p[k * channels];
      s += m.x;
      q += m.y;
    }
    channel_moments[c] = make_double2(s, q);
    channel_mean[n * channels + c] = static_cast<stat_t>(s * inv_spatial);
  }
  __syncthreads();

  const int channels_per_group = channels / groups;
  const double inv_count = inv_spatial / static_cast<double>(channels_per_group);
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    double s = 0.0;
    double q = 0.0;
    for (int k = 0; k < channels_per_group; ++k) {
      const double2 m = channel_moments[g * channels_per_group + k];
      s += m.x;
      q += m.y;
    }
    const double mu = s * inv_count;
    const double var = fmax(q * inv_count - mu * mu, 0.0);
    const double rs = 1.0 / sqrt(var + eps);
    mean[n * groups + g] = static_cast<stat_t>(mu);
    rstd[n * groups + g] = static_cast<stat_t>(rs);
    group_stats[g] = make_double2(mu, rs);
  }
  __syncthreads();

  double total = 0.0;
  for (int c = threadIdx.x; c < channels; c += blockDim.x) {
    const double2 gs = group_stats[c / channels_per_group];
    const double w = weight ? ScalarOps<scalar_t>::to_double(weight[c]) : 1.0;
    const double b = bias ? ScalarOps<scalar_t>::to_double(bias[c]) : 0.0;
    total += w * gs.y * (channel_moments[c].x * inv_spatial - gs.x) + b;
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
  int vector_width;   // elements per 16-byte vector
  int period;         // C / vector_width: threads per distinct set of channels
  int threads;        // block size of pass 1, a multiple of period
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

}  // namespace

bool group_norm_mean_channels_last_supported(int64_t channels, int64_t element_size) {
  // Up to 2048 channels the shared memory of both passes stays under the default 48 KB.
  const int64_t width = kVectorBytes / element_size;
  return channels % width == 0 && channels <= 2048;
}

int64_t group_norm_mean_channels_last_workspace_bytes(int64_t N, int64_t C, int64_t spatial,
                                                      int64_t element_size) {
  const Plan p = make_plan(C, spatial, element_size);
  return N * p.chunks_per_sample * C * static_cast<int64_t>(sizeof(double2));
}

template <typename scalar_t, typename stat_t>
cudaError_t launch_group_norm_mean_forward_channels_last(
    const scalar_t* x, const scalar_t* weight, const scalar_t* bias, scalar_t* out, stat_t* mean,
    stat_t* rstd, stat_t* channel_mean, void* workspace, int64_t N, int64_t C, int64_t G,
    int64_t spatial, double eps, cudaStream_t stream) {
  const Plan p = make_plan(C, spatial, sizeof(scalar_t));
  double2* partial = static_cast<double2*>(workspace);
  const size_t pass1_smem = static_cast<size_t>(p.threads) * p.vector_width * sizeof(double2);
  channels_last_partial_moments_kernel<scalar_t>
      <<<static_cast<unsigned>(N * p.chunks_per_sample), p.threads, pass1_smem, stream>>>(
          x, p.vectors_per_sample, p.chunks_per_sample, p.vectors_per_block,
          static_cast<int>(C), p.period, partial);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    return status;
  }
  const size_t pass2_smem =
      static_cast<size_t>(C + G) * sizeof(double2) + kFinalizeThreads * sizeof(double);
  channels_last_finalize_kernel<scalar_t, stat_t>
      <<<static_cast<unsigned>(N), kFinalizeThreads, pass2_smem, stream>>>(
          partial, p.chunks_per_sample, static_cast<int>(C), static_cast<int>(G), spatial, weight,
          bias, eps, out, mean, rstd, channel_mean);
  return cudaGetLastError();
}

#define FUSED_OPS_INSTANTIATE(scalar_t, stat_t)                                              \
  template cudaError_t launch_group_norm_mean_forward_channels_last<scalar_t, stat_t>(      \
      const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*, stat_t*, stat_t*, stat_t*, \
      void*, int64_t, int64_t, int64_t, int64_t, double, cudaStream_t);
FUSED_OPS_INSTANTIATE(float, float)
FUSED_OPS_INSTANTIATE(double, double)
FUSED_OPS_INSTANTIATE(__half, float)
FUSED_OPS_INSTANTIATE(__nv_bfloat16, float)
#undef FUSED_OPS_INSTANTIATE

}  // namespace gpu
}  // namespace fused_ops
