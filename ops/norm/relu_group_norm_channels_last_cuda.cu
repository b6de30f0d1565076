// relu_group_norm forward on a channels-last input: y = group_norm(relu(x)) (relu(x + x_bias)
// where the caller gives x_bias: a conv bias left out of x) with x stored (N, spatial, C),
// channels innermost (what cuDNN's NDHWC convolutions and our split-TF32
// convolution write), and y written (N, C, spatial), the layout of the operator's output. In a
// conv operator this replaces a transpose of the whole conv output (0.22 ms of cuDNN's
// nhwcToNchw kernel at the ConvTranspose3d headline on an H100, 2026-11-22) by reading it as
// it lies.
//
// 1. channels_last_partial_moments_kernel and channels_last_channel_moments_kernel, kRelu
//    (channels_last_moments.cuh): per (sample, channel) moments of relu(x), from shifted sums
//    in double; or none where the caller has them (channel_moments: the split-TF32
//    convolution's epilogue computes them as it writes x, from float32 moments per 128
//    positions combined in double: within a few 1e-6 of these, relative, at the headline).
// 2. relu_channels_last_stats_kernel: one block per sample combines each group's channel
//    moments (group_norm_math.h: Chan et al.) into mean and rstd (saved), and writes each
//    channel's (center, scale, shift) (centered_affine, as the (N, C, spatial) kernels do).
// 3. relu_affine_to_channels_first_kernel: one 256-thread block per tile of 32 channels x 64
//    positions of a sample; each warp reads 8 positions' 32 channels (coalesced along c, all
//    loads issued first), computes (relu(x) - center) * scale + shift, and the tile goes
//    through padded shared memory (no bank conflicts) to be written channel by channel,
//    coalesced along the positions. With x_channels_first (a training forward, which saves the
//    conv output in the input's layout), x (+ x_bias) goes the same way into that copy.
//
// No atomics: every sum has a fixed order; results are bitwise reproducible. The statistics'
// order differs from the (N, C, spatial) kernels' (per channel, then per group), so the two
// layouts agree to rounding, not bitwise.
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "norm/channels_last_kernels.h"
#include "norm/channels_last_moments.cuh"
#include "norm/group_norm_math.h"

namespace fused_ops {
namespace gpu {
namespace {

using namespace channels_last;

template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kFinalizeThreads)
    relu_channels_last_stats_kernel(const norm::Moments* __restrict__ channel_moments, int channels,
                                    int groups, int64_t spatial,
                                    const scalar_t* __restrict__ weight,
                                    const scalar_t* __restrict__ bias, double eps,
                                    acc_t* __restrict__ mean, acc_t* __restrict__ rstd,
                                    norm::CenteredAffine<acc_t>* __restrict__ affine) {
  extern __shared__ double2 stats_smem[];
  auto* group_stats = reinterpret_cast<MeanRstd*>(stats_smem);  // [groups]
  const int64_t n = blockIdx.x;
  const double count = static_cast<double>(spatial);
  const int channels_per_group = channels / groups;
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    const norm::Moments m = norm::combine_equal_parts(
        &channel_moments[n * channels + g * channels_per_group], channels_per_group, count);
    const double rs = norm::rstd_from_m2(m.m2, count * channels_per_group, eps);
    mean[n * groups + g] = static_cast<acc_t>(m.mean);
    rstd[n * groups + g] = static_cast<acc_t>(rs);
    group_stats[g] = MeanRstd{m.mean, rs};
  }
  __syncthreads();

  for (int c = threadIdx.x; c < channels; c += blockDim.x) {
    const MeanRstd gs = group_stats[c / channels_per_group];
    const double w = weight != nullptr ? ScalarOps<scalar_t>::to_double(weight[c]) : 1.0;
    const double b = bias != nullptr ? ScalarOps<scalar_t>::to_double(bias[c]) : 0.0;
    affine[n * channels + c] = norm::centered_affine<acc_t>(gs.mean, gs.rstd, w, b);
  }
}

constexpr int kTileChannels = kWarpSize;                    // one per lane
constexpr int kTilePositions = 64;                          // per block
constexpr int kWarps = kThreads / kWarpSize;                // 8
constexpr int kPositionsPerWarp = kTilePositions / kWarps;  // 8 loads per thread
constexpr int kChannelsPerWarp = kTileChannels / kWarps;    // 4 rows written per warp
constexpr int kLanePositions = kTilePositions / kWarpSize;  // 2 positions per lane

template <typename scalar_t, typename acc_t, bool kCopyX>
__global__ void __launch_bounds__(kThreads)
    relu_affine_to_channels_first_kernel(const scalar_t* __restrict__ x,
                                         const scalar_t* __restrict__ x_bias,
                                         const norm::CenteredAffine<acc_t>* __restrict__ affine,
                                         scalar_t* __restrict__ y,
                                         scalar_t* __restrict__ x_channels_first, int64_t C,
                                         int64_t spatial, int64_t channel_tiles,
                                         int64_t position_tiles) {
  __shared__ acc_t tile[kTileChannels][kTilePositions + 1];
  __shared__ acc_t x_tile[kCopyX ? kTileChannels : 1][kTilePositions + 1];
  int64_t block = blockIdx.x;
  const int64_t s0 = block % position_tiles * kTilePositions;
  block /= position_tiles;
  const int64_t c0 = block % channel_tiles * kTileChannels;
  const int64_t n = block / channel_tiles;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;

  const int64_t c = c0 + lane;
  const bool channel_inside = c < C;
  acc_t xs[kPositionsPerWarp];
#pragma unroll
  for (int k = 0; k < kPositionsPerWarp; ++k) {
    const int64_t s = s0 + warp + k * kWarps;
    xs[k] = channel_inside && s < spatial
                ? ScalarOps<scalar_t>::to_acc(x[(n * spatial + s) * C + c])
                : acc_t(0);
  }
  if (channel_inside) {
    const norm::CenteredAffine<acc_t> a = affine[n * C + c];
    const acc_t b = x_bias != nullptr ? ScalarOps<scalar_t>::to_acc(x_bias[c]) : acc_t(0);
#pragma unroll
    for (int k = 0; k < kPositionsPerWarp; ++k) {
      tile[lane][warp + k * kWarps] = (relu_keep_nan(xs[k] + b) - a.center) * a.scale + a.shift;
      if constexpr (kCopyX) {
        // x + b as ATen's add rounds it (x itself without a bias: -0.0 stays -0.0).
        x_tile[lane][warp + k * kWarps] = x_bias != nullptr ? xs[k] + b : xs[k];
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kChannelsPerWarp; ++k) {
    const int r = warp + k * kWarps;
    const int64_t row = c0 + r;
    if (row < C) {
#pragma unroll
      for (int j = 0; j < kLanePositions; ++j) {
        const int64_t s = s0 + lane + j * kWarpSize;
        if (s < spatial) {
          y[(n * C + row) * spatial + s] =
              ScalarOps<scalar_t>::from_acc(tile[r][lane + j * kWarpSize]);
          if constexpr (kCopyX) {
            x_channels_first[(n * C + row) * spatial + s] =
                ScalarOps<scalar_t>::from_acc(x_tile[r][lane + j * kWarpSize]);
          }
        }
      }
    }
  }
}

// Workspace: the partial pairs, the per-(n, c) moments, then the per-(n, c) affine (each
// size a multiple of 16 bytes: every part aligned).
template <typename acc_t>
struct Workspace {
  double2* partial;
  norm::Moments* moments;
  norm::CenteredAffine<acc_t>* affine;
  size_t bytes;
};

// (Without the partial pairs and moments where the caller gives the moments.)
template <typename acc_t>
Workspace<acc_t> workspace_of(void* base, const Plan& plan, int64_t N, int64_t C,
                              bool given_moments) {
  Workspace<acc_t> ws{};
  if (given_moments) {
    ws.bytes = static_cast<size_t>(N * C) * sizeof(norm::CenteredAffine<acc_t>);
    ws.affine = static_cast<norm::CenteredAffine<acc_t>*>(base);
    return ws;
  }
  const size_t moments_offset = plan.partial_bytes(N, C);
  const size_t affine_offset = moments_offset + static_cast<size_t>(N * C) * sizeof(norm::Moments);
  ws.bytes = affine_offset + static_cast<size_t>(N * C) * sizeof(norm::CenteredAffine<acc_t>);
  if (base != nullptr) {
    char* bytes = static_cast<char*>(base);
    ws.partial = reinterpret_cast<double2*>(bytes);
    ws.moments = reinterpret_cast<norm::Moments*>(bytes + moments_offset);
    ws.affine = reinterpret_cast<norm::CenteredAffine<acc_t>*>(bytes + affine_offset);
  }
  return ws;
}

// Step 2 for samples [n_begin, n_end): mean, rstd and the affine of those samples, from their
// channel moments.
template <typename scalar_t, typename acc_t>
cudaError_t launch_stats(const norm::ReluGroupNormForwardParams& p, const norm::Moments* moments,
                         int64_t n_begin, int64_t n_end, norm::CenteredAffine<acc_t>* affine,
                         cudaStream_t stream) {
  const int64_t C = p.sizes.C, G = p.sizes.G;
  if (n_end <= n_begin) {
    return cudaSuccess;
  }
  if (!grid_fits(n_end - n_begin)) {
    return cudaErrorInvalidConfiguration;
  }
  const size_t stats_smem = static_cast<size_t>(G) * sizeof(MeanRstd);
  relu_channels_last_stats_kernel<scalar_t, acc_t>
      <<<static_cast<unsigned>(n_end - n_begin), kFinalizeThreads, stats_smem, stream>>>(
          moments + n_begin * C, static_cast<int>(C), static_cast<int>(G), p.sizes.HxW,
          static_cast<const scalar_t*>(p.weight), static_cast<const scalar_t*>(p.bias), p.eps,
          static_cast<acc_t*>(p.mean) + n_begin * G, static_cast<acc_t*>(p.rstd) + n_begin * G,
          affine + n_begin * C);
  return cudaGetLastError();
}

// Step 3 for samples [n_begin, n_end).
template <typename scalar_t, typename acc_t>
cudaError_t launch_affine_to_channels_first(const norm::ReluGroupNormForwardParams& p,
                                            int64_t n_begin, int64_t n_end,
                                            const norm::CenteredAffine<acc_t>* affine,
                                            cudaStream_t stream) {
  const int64_t C = p.sizes.C, spatial = p.sizes.HxW;
  const int64_t channel_tiles = ceil_div(C, kTileChannels);
  const int64_t position_tiles = ceil_div(spatial, kTilePositions);
  const int64_t map_blocks = (n_end - n_begin) * channel_tiles * position_tiles;
  if (map_blocks <= 0) {
    return cudaSuccess;
  }
  if (!grid_fits(map_blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  const int64_t offset = n_begin * C * spatial;
  const auto* x = static_cast<const scalar_t*>(p.x) + offset;
  const auto* x_bias = static_cast<const scalar_t*>(p.x_bias);
  auto* y = static_cast<scalar_t*>(p.y) + offset;
  if (p.x_channels_first != nullptr) {
    relu_affine_to_channels_first_kernel<scalar_t, acc_t, true>
        <<<static_cast<unsigned>(map_blocks), kThreads, 0, stream>>>(
            x, x_bias, affine + n_begin * C, y, static_cast<scalar_t*>(p.x_channels_first) + offset,
            C, spatial, channel_tiles, position_tiles);
  } else {
    relu_affine_to_channels_first_kernel<scalar_t, acc_t, false>
        <<<static_cast<unsigned>(map_blocks), kThreads, 0, stream>>>(
            x, x_bias, affine + n_begin * C, y, nullptr, C, spatial, channel_tiles, position_tiles);
  }
  return cudaGetLastError();
}

template <typename scalar_t>
cudaError_t launch(const norm::ReluGroupNormForwardParams& p, void* workspace,
                   cudaStream_t stream) {
  using acc_t = typename ScalarOps<scalar_t>::acc_t;
  const int64_t N = p.sizes.N, C = p.sizes.C, spatial = p.sizes.HxW;
  const Plan plan = make_plan(C, spatial, sizeof(scalar_t));
  const bool given_moments = p.channel_moments != nullptr;
  const Workspace<acc_t> ws = workspace_of<acc_t>(workspace, plan, N, C, given_moments);
  if (!given_moments) {
    FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_channel_moments<scalar_t, /*kRelu=*/true>(
        static_cast<const scalar_t*>(p.x), static_cast<const scalar_t*>(p.x_bias), N, C, spatial,
        plan, ws.partial, ws.moments, stream)));
  }
  FUSED_OPS_RETURN_IF_CUDA_ERROR((launch_stats<scalar_t, acc_t>(
      p, given_moments ? p.channel_moments : ws.moments, 0, N, ws.affine, stream)));
  return launch_affine_to_channels_first<scalar_t, acc_t>(p, 0, N, ws.affine, stream);
}

}  // namespace
}  // namespace gpu

namespace norm {

size_t relu_group_norm_channels_last_workspace_bytes(const ReluGroupNormForwardParams& p) {
  const gpu::channels_last::Plan plan = gpu::channels_last::make_plan(
      p.sizes.C, p.sizes.HxW, gpu::channels_last::element_size(p.dtype));
  return gpu::dispatch_cuda_scalar(p.dtype, [&](auto tag) {
    using acc_t = typename gpu::ScalarOps<decltype(tag)>::acc_t;
    return gpu::workspace_of<acc_t>(nullptr, plan, p.sizes.N, p.sizes.C,
                                    p.channel_moments != nullptr)
        .bytes;
  });
}

cudaError_t launch_relu_group_norm_channels_last(const ReluGroupNormForwardParams& p,
                                                 void* workspace, cudaStream_t stream) {
  return gpu::dispatch_cuda_scalar(
      p.dtype, [&](auto tag) { return gpu::launch<decltype(tag)>(p, workspace, stream); });
}

cudaError_t launch_relu_group_norm_channels_last_stats(const ReluGroupNormForwardParams& p,
                                                       const Moments* channel_moments,
                                                       int64_t n_begin, int64_t n_end,
                                                       CenteredAffine<float>* affine,
                                                       cudaStream_t stream) {
  if (p.dtype != ScalarKind::kFloat) {
    return cudaErrorInvalidValue;
  }
  return gpu::launch_stats<float, float>(p, channel_moments, n_begin, n_end, affine, stream);
}

cudaError_t launch_relu_group_norm_channels_last_normalize(const ReluGroupNormForwardParams& p,
                                                           int64_t n_begin, int64_t n_end,
                                                           const CenteredAffine<float>* affine,
                                                           cudaStream_t stream) {
  if (p.dtype != ScalarKind::kFloat) {
    return cudaErrorInvalidValue;
  }
  return gpu::launch_affine_to_channels_first<float, float>(p, n_begin, n_end, affine, stream);
}

}  // namespace norm
}  // namespace fused_ops
