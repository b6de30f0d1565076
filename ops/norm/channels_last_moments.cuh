// The first pass of the channels-last CUDA GroupNorm forwards
// (group_norm_mean_channels_last_cuda.cu, relu_group_norm_channels_last_cuda.cu): per-(sample,
// chunk, channel) shifted moments of x stored (N, spatial, C), channels innermost (what cuDNN's
// NDHWC convolutions write).
//
// channels_last_partial_moments_kernel: grid = N * chunks blocks, one per (sample, chunk); a
// chunk is a contiguous run of `vectors_per_block` 16-byte vectors (V = 16 / sizeof(scalar_t)
// elements each). Thread t reads vectors t, t + B, ..., t + 7B of its chunk (coalesced 16-byte
// loads, all eight issued before the first use). B and vectors_per_block are multiples of
// period = C / V, so every vector a thread reads holds the same V channels,
// (t % period) * V ... + V - 1: each thread keeps V running (sum, sum of squares) pairs in
// double of d = v - shift[c], v = x (relu(x) with kRelu; x + bias[c] first where the
// caller gives a bias) and shift[c] the channel's v at the
// sample's first position (shifted sums: no E[x^2] - mean^2 cancellation, as in every other
// kernel), with no per-element index arithmetic. The block then sums, per channel, the pairs
// of the B / period threads that hold it, in a fixed order, through shared memory, and writes
// one pair per (sample, chunk, channel) to the workspace.
//
// channels_last_channel_moments_kernel: one warp per (sample, channel) adds that channel's
// chunk pairs (lanes over the chunks, then a butterfly: a fixed order) and turns them into the
// channel's moments (mean, M2). (A first version summed them in the operators' per-sample
// second pass, a thread per channel over ~600 chunks: 0.1 ms at the ConvTranspose3d headline on
// an H100, 2026-11-22, for 20 MB of pairs.)
//
// No atomics: bitwise reproducible. nvcc-only header.
#pragma once

#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "common/host_device.h"
#include "common/kernel_types.h"
#include "norm/group_norm_math.h"

#include <algorithm>
#include <cstdint>

namespace fused_ops {
namespace gpu {
namespace channels_last {

constexpr int kVectorBytes = 16;
constexpr int kVectorsPerThread = 8;   // vectors each thread reads per chunk
constexpr int kTargetThreads = 256;    // block size is the multiple of `period` nearest this
constexpr int kFinalizeThreads = 256;  // a power of two (tree reduction)

struct MeanRstd {
  double mean;
  double rstd;
};

// v = x, or relu(x) (NaN kept) with kRelu; exact in double.
template <bool kRelu>
__device__ __forceinline__ double value_of(double x) {
  return kRelu ? relu_keep_nan(x) : x;
}

// x + bias (a channel's value or 0) in x's accumulation type (relu_group_norm's x_bias: float32
// rounds it as the separate bias add it replaces; the half types skip that add's rounding to
// them), in double.
template <typename scalar_t>
__device__ __forceinline__ double biased(scalar_t x, typename ScalarOps<scalar_t>::acc_t bias) {
  return static_cast<double>(ScalarOps<scalar_t>::to_acc(x) + bias);
}

// bias: null, or a value per channel added to x first (relu_group_norm's x_bias).
template <typename scalar_t, bool kRelu>
__global__ void channels_last_partial_moments_kernel(const scalar_t* __restrict__ x,
                                                     const scalar_t* __restrict__ bias,
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
  using acc_t = typename ScalarOps<scalar_t>::acc_t;
  const uint4 shift_raw = __ldg(sample + threadIdx.x % period);
  const scalar_t* shift_lanes = reinterpret_cast<const scalar_t*>(&shift_raw);
  acc_t channel_bias[V];
  double shift[V];
  double sum[V];
  double sum_sq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    channel_bias[j] = bias != nullptr
                          ? ScalarOps<scalar_t>::to_acc(bias[threadIdx.x % period * V + j])
                          : acc_t(0);
    shift[j] = value_of<kRelu>(biased(shift_lanes[j], channel_bias[j]));
    sum[j] = 0.0;
    sum_sq[j] = 0.0;
  }
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    if (begin + threadIdx.x + static_cast<int64_t>(k) * blockDim.x < end) {
      const scalar_t* lanes = reinterpret_cast<const scalar_t*>(&raw[k]);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const double d = value_of<kRelu>(biased(lanes[j], channel_bias[j])) - shift[j];
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

template <typename scalar_t, bool kRelu>
__global__ void __launch_bounds__(kThreads)
    channels_last_channel_moments_kernel(const scalar_t* __restrict__ x,
                                         const scalar_t* __restrict__ bias,
                                         const double2* __restrict__ partial,
                                         int64_t chunks_per_sample, int64_t channels,
                                         int64_t spatial, int64_t num_items,
                                         norm::Moments* __restrict__ moments) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  if (item >= num_items) {
    return;  // whole warps only
  }
  const int64_t n = item / channels;
  const int64_t c = item % channels;
  const double2* pairs = partial + n * chunks_per_sample * channels + c;
  double s = 0.0;
  double q = 0.0;
  for (int64_t k = lane; k < chunks_per_sample; k += kWarpSize) {
    const double2 m = pairs[k * channels];
    s += m.x;
    q += m.y;
  }
  s = warp_allreduce_sum(s);
  q = warp_allreduce_sum(q);
  if (lane == 0) {
    // The shift pass 1 took: the channel's value at the sample's first position.
    using acc_t = typename ScalarOps<scalar_t>::acc_t;
    const double shift =
        value_of<kRelu>(biased(x[n * spatial * channels + c],
                               bias != nullptr ? ScalarOps<scalar_t>::to_acc(bias[c]) : acc_t(0)));
    moments[item] = norm::moments_from_shifted_sums(shift, s, q, static_cast<double>(spatial));
  }
}

struct Plan {
  int vector_width;  // elements per 16-byte vector
  int period;        // C / vector_width: threads per distinct set of channels
  int threads;       // block size of pass 1, a multiple of period
  int64_t vectors_per_sample;
  int64_t vectors_per_block;
  int64_t chunks_per_sample;

  size_t partial_bytes(int64_t N, int64_t C) const {
    return static_cast<size_t>(N * chunks_per_sample * C) * sizeof(double2);
  }
};

// Launches both kernels: moments[n * C + c] of channel c of sample n (of x + bias where bias is
// not null), from the pass-1 pairs in `partial` (plan.partial_bytes(N, C) of workspace).
template <typename scalar_t, bool kRelu>
cudaError_t launch_channel_moments(const scalar_t* x, const scalar_t* bias, int64_t N, int64_t C,
                                   int64_t spatial, const Plan& plan, double2* partial,
                                   norm::Moments* moments, cudaStream_t stream) {
  const int64_t moment_blocks = blocks_for_warp_items(N * C);
  if (!grid_fits(N * plan.chunks_per_sample) || !grid_fits(moment_blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  const size_t smem = static_cast<size_t>(plan.threads) * plan.vector_width * sizeof(double2);
  channels_last_partial_moments_kernel<scalar_t, kRelu>
      <<<static_cast<unsigned>(N * plan.chunks_per_sample), plan.threads, smem, stream>>>(
          x, bias, plan.vectors_per_sample, plan.chunks_per_sample, plan.vectors_per_block,
          static_cast<int>(C), plan.period, partial);
  FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  channels_last_channel_moments_kernel<scalar_t, kRelu>
      <<<static_cast<unsigned>(moment_blocks), kThreads, 0, stream>>>(
          x, bias, partial, plan.chunks_per_sample, C, spatial, N * C, moments);
  return cudaGetLastError();
}

inline Plan make_plan(int64_t C, int64_t spatial, int64_t element_size) {
  Plan p;
  p.vector_width = static_cast<int>(kVectorBytes / element_size);
  p.period = static_cast<int>(C / p.vector_width);
  p.threads = std::max(1, kTargetThreads / p.period) * p.period;
  p.vectors_per_sample = spatial * C / p.vector_width;
  p.vectors_per_block = static_cast<int64_t>(p.threads) * kVectorsPerThread;
  p.chunks_per_sample = (p.vectors_per_sample + p.vectors_per_block - 1) / p.vectors_per_block;
  return p;
}

inline int64_t element_size(ScalarKind kind) {
  switch (kind) {
    case ScalarKind::kDouble:
      return 8;
    case ScalarKind::kFloat:
      return 4;
    default:
      return 2;
  }
}

}  // namespace channels_last
}  // namespace gpu
}  // namespace fused_ops
