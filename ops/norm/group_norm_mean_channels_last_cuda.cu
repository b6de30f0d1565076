// group_norm_mean forward on a channels-last tensor: out[n] = mean of group_norm(x)[n], with
// x stored as (N, spatial, C), channels innermost (what cuDNN's NDHWC convolutions write).
//
// The statistics GroupNorm + mean needs are per-(n, c) moments. In this layout a sample is
// one flat array of spatial * C elements in which the channel of element i is i % C, so:
//
// Pass 1, channels_last_partial_moments_kernel and channels_last_channel_moments_kernel
//   (channels_last_moments.cuh): per (sample, channel) moments, from shifted sums in double.
// Pass 2, channels_last_finalize_kernel: one block per sample combines each group's channel
//   moments (group_norm_math.h: Chan et al.) into mean and rstd, and writes
//   out[n] = (1/C) sum_c (w_c rstd_g (m_c - mean_g) + b_c).
//
// No atomics: results are bitwise reproducible. The normalised tensor is never written.
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "norm/channels_last_kernels.h"
#include "norm/channels_last_moments.cuh"
#include "norm/group_norm_math.h"

#include <algorithm>

namespace fused_ops {
namespace gpu {
namespace {

using namespace channels_last;

template <typename scalar_t, typename stat_t>
__global__ void channels_last_finalize_kernel(const norm::Moments* __restrict__ channel_moments,
                                              int channels, int groups, int64_t spatial,
                                              const scalar_t* __restrict__ weight,
                                              const scalar_t* __restrict__ bias, double eps,
                                              scalar_t* __restrict__ out, stat_t* __restrict__ mean,
                                              stat_t* __restrict__ rstd,
                                              stat_t* __restrict__ channel_mean) {
  extern __shared__ double2 finalize_smem[];
  auto* group_stats = reinterpret_cast<MeanRstd*>(finalize_smem);    // [groups]
  double* reduce = reinterpret_cast<double*>(group_stats + groups);  // [blockDim.x]
  const int64_t n = blockIdx.x;
  const double count = static_cast<double>(spatial);
  const norm::Moments* moments = channel_moments + n * channels;
  for (int c = threadIdx.x; c < channels; c += blockDim.x) {
    channel_mean[n * channels + c] = static_cast<stat_t>(moments[c].mean);
  }

  const int channels_per_group = channels / groups;
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    const norm::Moments m =
        norm::combine_equal_parts(&moments[g * channels_per_group], channels_per_group, count);
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
    total += norm::group_norm_mean_channel_term(moments[c].mean - gs.mean, gs.rstd, w, b);
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

template <typename scalar_t>
cudaError_t launch(const norm::GroupNormMeanForwardParams& p, void* workspace,
                   cudaStream_t stream) {
  using stat_t = typename ScalarOps<scalar_t>::acc_t;
  const int64_t N = p.sizes.N, C = p.sizes.C, G = p.sizes.G, spatial = p.sizes.HxW;
  const auto* x = static_cast<const scalar_t*>(p.x);
  const Plan plan = make_plan(C, spatial, sizeof(scalar_t));
  double2* partial = static_cast<double2*>(workspace);
  auto* moments =
      reinterpret_cast<norm::Moments*>(static_cast<char*>(workspace) + plan.partial_bytes(N, C));
  if (!grid_fits(N)) {
    return cudaErrorInvalidConfiguration;
  }
  FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_channel_moments<scalar_t, /*kRelu=*/false>(
      x, /*bias=*/nullptr, N, C, spatial, plan, partial, moments, stream)));
  const size_t pass2_smem =
      static_cast<size_t>(G) * sizeof(MeanRstd) + kFinalizeThreads * sizeof(double);
  channels_last_finalize_kernel<scalar_t, stat_t>
      <<<static_cast<unsigned>(N), kFinalizeThreads, pass2_smem, stream>>>(
          moments, static_cast<int>(C), static_cast<int>(G), spatial,
          static_cast<const scalar_t*>(p.weight), static_cast<const scalar_t*>(p.bias), p.eps,
          static_cast<scalar_t*>(p.out), static_cast<stat_t*>(p.mean), static_cast<stat_t*>(p.rstd),
          static_cast<stat_t*>(p.channel_mean));
  return cudaGetLastError();
}

}  // namespace
}  // namespace gpu

namespace norm {

bool channels_last_norm_cuda_supported(int64_t channels, int64_t element_size) {
  // Up to 2048 channels pass 1's shared memory (a block of up to 256 threads, each with the
  // pairs of 16 bytes' channels) stays under the default 48 KB.
  const int64_t width = gpu::channels_last::kVectorBytes / element_size;
  return channels % width == 0 && channels <= 2048;
}

size_t group_norm_mean_channels_last_workspace_bytes(const GroupNormMeanForwardParams& p) {
  const gpu::channels_last::Plan plan = gpu::channels_last::make_plan(
      p.sizes.C, p.sizes.HxW, gpu::channels_last::element_size(p.dtype));
  return plan.partial_bytes(p.sizes.N, p.sizes.C) +
         static_cast<size_t>(p.sizes.N * p.sizes.C) * sizeof(norm::Moments);
}

cudaError_t launch_group_norm_mean_channels_last(const GroupNormMeanForwardParams& p,
                                                 void* workspace, cudaStream_t stream) {
  return gpu::dispatch_cuda_scalar(
      p.dtype, [&](auto tag) { return gpu::launch<decltype(tag)>(p, workspace, stream); });
}

}  // namespace norm
}  // namespace fused_ops
