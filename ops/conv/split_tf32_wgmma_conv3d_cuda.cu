// The library's instances of the wgmma split-TF32 convolution (split_tf32_wgmma_conv3d.cuh) and
// weight gradient (split_tf32_wgmma_wgrad.cuh), and their host side: which devices and shapes
// they take, the weights' split, the launches.
//
// Compiled for sm_90a in every build (CMakeLists.txt adds that target to this file); on other
// devices, or where the device would run another image of this file, split_tf32_conv3d_cuda.cu
// keeps CUTLASS's sm80 kernel.
#include "conv/split_tf32_wgmma_conv3d.cuh"
#include "conv/split_tf32_wgmma_wgrad.cuh"
#include "conv/wgmma_plane_conv3d.cuh"

#include "common/cuda/device_info.cuh"
#include "common/cuda/launch_utils.cuh"
#include "common/layout_kernels.h"
#include "norm/channels_last_kernels.h"

#include <algorithm>
#include <climits>

namespace fused_ops {
namespace gpu {
namespace {

// Tiles: 128 positions x 128 channels in 3 stages of 48 KB where C_out > 64; 128 x 64 in 4
// stages of 32 KB else (the input gradient of the headline's 64 -> 128 transposed
// convolution). benchmarks/split_tf32_wgmma_check.cu times them and others.
using WideTile = WgmmaConvTile<128, 3>;
using NarrowTile = WgmmaConvTile<64, 4>;
// Plain TF32 products (tf32_products): 256 positions x 128 (or 64) channels in 4 (5) stages of
// 48 (40) KB, the activations by im2col copies; the 64-channel tiles in clusters of 2 blocks
// sharing the weight tiles. At the headline on an H100 (2026-11-27, the check program): 0.866
// ms in clusters of 2 where cuDNN's TF32 NDHWC convolution takes 0.81-0.85 (0.90 alone; 128 x
// 128 tiles: 1.03 ms alone, 0.93 in clusters of 4), its input gradient's shape (64 channels)
// 1.127 ms where cuDNN's takes 1.15. On an H200 (2026-11-28) the 128-channel tiles alone were
// the faster: 0.773-0.779 ms against 0.795-0.798 in clusters of 2 (cuDNN's: 0.753), with the
// moments 0.798 against 0.820; the pipelined forward at the headline 1.109 ms against 1.127.
using Tf32WideTile = WgmmaConvTile<128, 4, false, true, 1, 2>;
using Tf32NarrowTile = WgmmaConvTile<64, 5, false, true, 2, 2>;

bool narrow(const conv::Conv3dShape& s) { return s.C_out <= 64; }

template <typename Tile>
int tile_smem_bytes() {
  return Tile::kSmemBytes + Tile::kStaticSmemBytes;
}

int64_t taps(const conv::Conv3dShape& s) { return s.kD * s.kH * s.kW; }
int64_t c_in_pad(const conv::Conv3dShape& s) {
  return (s.C_in + kWgmmaConvBK - 1) / kWgmmaConvBK * kWgmmaConvBK;
}
int64_t c_out_pad(const conv::Conv3dShape& s) {
  return (s.C_out + kWgmmaConvMaxBN - 1) / kWgmmaConvMaxBN * kWgmmaConvMaxBN;
}
// The B tiles' floats (WgmmaConvParams::w_tiles) for tiles of `bn` (64 or 128) channels and
// `parts` parts: at most the workspace's 2 * taps * c_out_pad * c_in_pad.
size_t weight_tile_elements(const conv::Conv3dShape& s, int64_t bn, int64_t parts) {
  return static_cast<size_t>(taps(s) * c_in_pad(s) * ((s.C_out + bn - 1) / bn * bn) * parts);
}

// This file's instance of sm90a_image_probe_kernel (Sm90aImageQuery).
struct WgmmaConvFile {};

// w (C_out, taps, C_in) -> p.w_tiles: the B tile of each K block and C_out tile (see
// WgmmaConvParams), its rows as the kernel's 128-byte-swizzled shared memory holds them. With
// of_transposed, w is the transposed convolution's (C_in, C_out, taps) weight, read with its
// taps flipped: the same values.
// Split products (b_parts 2): TF32 high parts, then the TF32-rounded remainders; plain TF32
// (b_parts 1): w rounded. The channels of each block of 32 in the K order of products whose A
// comes from registers (wgmma_conv_channel_of_k) where p.b_k_permuted, else in their own order
// (both operands from shared memory).
__global__ void split_tf32_weights_kernel(const float* __restrict__ w, bool of_transposed,
                                          WgmmaConvParams p) {
  const int64_t taps = p.kD * p.kH * p.kW;
  const int64_t n_tiles = (p.C_out + p.b_bn - 1) / p.b_bn;
  const int64_t tile_floats = p.b_parts * p.b_bn * kWgmmaConvBK;
  const int64_t total = taps * p.c_chunks * n_tiles * tile_floats;
  float* const w_tiles = const_cast<float*>(p.w_tiles);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t in_tile = i % tile_floats;
    const int64_t tile = i / tile_floats;  // (tap * c_chunks + c_chunk) * n_tiles + n_tile
    const int position = static_cast<int>(in_tile % kWgmmaConvBK);
    const int64_t row = (in_tile / kWgmmaConvBK) % p.b_bn;
    const int64_t part = in_tile / (kWgmmaConvBK * p.b_bn);
    // The swizzle: 16-byte chunk position / 4 of row `row` holds chunk (position / 4) ^ (row % 8).
    const int k = (((position >> 2) ^ static_cast<int>(row & 7)) << 2) | (position & 3);
    const int64_t c = (tile / n_tiles) % p.c_chunks * kWgmmaConvBK +
                      (p.b_k_permuted ? wgmma_conv_detail::wgmma_conv_channel_of_k(k) : k);
    const int64_t k_out = tile % n_tiles * p.b_bn + row;
    const int64_t tap = tile / (n_tiles * p.c_chunks);
    float value = 0.f;
    if (k_out < p.C_out && c < p.C_in) {
      uint32_t hi, lo;
      const float v = of_transposed ? w[(c * p.C_out + k_out) * taps + (taps - 1 - tap)]
                                    : w[(k_out * taps + tap) * p.C_in + c];
      wgmma_conv_detail::split_tf32_rounded(v, hi, lo);
      value = __uint_as_float(part == 0 ? hi : lo);
    }
    w_tiles[i] = value;
  }
}

// Per (sample n, channel c): the moments of relu(y) over the sample's rows, from the conv
// kernel's per-(part, segment) (mean, M2) pairs (tile_moments; part b holds rows
// [b * part_rows, (b + 1) * part_rows) of the flattened M (the tile's kOutRows), and is the
// sample's segment 1 where it begins in the sample before), for samples first_sample, ...: a
// block per (sample, 32 channels): lane c reads channel c's pairs (coalesced), warp w the
// sample's parts w, w + 32, ..., kBatch of them in flight, in one read: in double, around a
// shift K (the mean of the sample's first part), the sums S0 = sum of counts, S1 = sum of
// count * (mean_b - K), S2 = sum of M2_b + count * (mean_b - K)^2, each per warp, then over the
// warps in order (a fixed order); mean = K + S1 / S0, M2 = S2 - S1^2 / S0. The subtraction
// loses log2(1 + (mean - K)^2 / variance) of double's 53 bits: with K within 1000 standard
// deviations of the mean the result keeps 1e-10 relative, far below the float32 parts' own
// rounding. One read, no division per pair: at the headline on an H200 (2026-11-28,
// benchmarks/h200-2026-11-28-free-moments/) the pipelined forward's two launches of it (8
// samples each) took 20 us in all; as two passes (the mean, then M2 around it) of 4 pairs in
// flight one launch for the 16 samples took 15 us, and Chan et al.'s update per pair (two
// double divisions each: the FP64 pipe's limit) in one pass 40 us in all.
constexpr int kMomentsWarps = 32;
__global__ void __launch_bounds__(kMomentsWarps * 32)
    relu_moments_of_tiles_kernel(const float2* __restrict__ tile_moments, int64_t part_rows,
                                 int64_t spatial, int64_t channels, int64_t channel_chunks,
                                 int64_t first_sample, norm::Moments* __restrict__ moments) {
  __shared__ double3 warp_sums[kMomentsWarps][32];  // 24 KB
  const int64_t n = first_sample + blockIdx.x / channel_chunks;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int64_t c = min(blockIdx.x % channel_chunks * 32 + lane, channels - 1);  // (duplicates)
  const int64_t first_row = n * spatial, end_row = first_row + spatial;
  const auto pair_of = [&](int64_t part) {
    const int segment = part * part_rows < first_row ? 1 : 0;
    return tile_moments[(part * 2 + segment) * channels + c];
  };
  const double shift = pair_of(first_row / part_rows).x;
  constexpr int kBatch = 8;
  double s0 = 0.0, s1 = 0.0, s2 = 0.0;
  for (int64_t base = first_row / part_rows + warp; base * part_rows < end_row;
       base += kBatch * kMomentsWarps) {
    float2 mean_m2[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t part = base + j * kMomentsWarps;
      mean_m2[j] = part * part_rows < end_row ? pair_of(part) : make_float2(0.f, 0.f);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t part = base + j * kMomentsWarps;
      const int64_t lo = max(part * part_rows, first_row),
                    hi = min((part + 1) * part_rows, end_row);
      if (hi > lo) {
        const double count = static_cast<double>(hi - lo);
        const double d = static_cast<double>(mean_m2[j].x) - shift;
        s0 += count;
        s1 += count * d;
        s2 += static_cast<double>(mean_m2[j].y) + count * d * d;
      }
    }
  }
  warp_sums[warp][lane] = make_double3(s0, s1, s2);
  __syncthreads();
  if (warp == 0 && blockIdx.x % channel_chunks * 32 + lane < channels) {
    double t0 = 0.0, t1 = 0.0, t2 = 0.0;
    for (int w = 0; w < kMomentsWarps; ++w) {
      const double3 sums = warp_sums[w][lane];
      t0 += sums.x;
      t1 += sums.y;
      t2 += sums.z;
    }
    const double m2 = t2 - t1 * t1 / t0;  // (>= 0 but for rounding; NaN kept)
    moments[n * channels + c] = norm::Moments{shift + t1 / t0, m2 < 0.0 ? 0.0 : m2};
  }
}

size_t split_weight_bytes(const conv::Conv3dShape& s) {
  return static_cast<size_t>(2 * taps(s) * c_out_pad(s) * c_in_pad(s)) *
         sizeof(float);  // (a multiple of 16)
}

// The staged parts' rows (the tiles' kOutRows), which tile_moments holds a pair per.
int64_t moment_part_rows(bool tf32_products) {
  static_assert(WideTile::kOutRows == NarrowTile::kOutRows, "one part size");
  static_assert(Tf32WideTile::kOutRows == Tf32NarrowTile::kOutRows, "one part size");
  return tf32_products ? Tf32WideTile::kOutRows : WideTile::kOutRows;
}

size_t tile_moments_bytes(const conv::Conv3dShape& s, bool tf32_products) {
  const int64_t rows = moment_part_rows(tf32_products);
  const int64_t parts = (s.N * s.Do * s.Ho * s.Wo + rows - 1) / rows;
  return static_cast<size_t>(parts * 2 * s.C_out) * sizeof(float2);
}

// relu_moments_of_tiles_kernel for samples [n_begin, n_end) into moments.
cudaError_t relu_moments_of_tiles(const WgmmaConvParams& p, bool tf32_products, int64_t n_begin,
                                  int64_t n_end, norm::Moments* moments, cudaStream_t stream) {
  const int64_t channel_chunks = (p.C_out + 31) / 32;
  const int64_t blocks = (n_end - n_begin) * channel_chunks;
  if (blocks <= 0) {
    return cudaSuccess;
  }
  if (blocks > INT_MAX) {
    return cudaErrorInvalidConfiguration;
  }
  relu_moments_of_tiles_kernel<<<static_cast<unsigned>(blocks), kMomentsWarps * 32, 0, stream>>>(
      p.tile_moments, moment_part_rows(tf32_products), p.spatial, p.C_out, channel_chunks, n_begin,
      moments);
  return cudaGetLastError();
}

}  // namespace

cudaError_t make_norm_grad_run_map(const float* tensor, int64_t N, int64_t C, int64_t positions,
                                   int channels, CUtensorMap* map) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr || positions % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(positions), static_cast<cuuint64_t>(C),
                              static_cast<cuuint64_t>(N)};
  const auto strides = dense_float_strides(dims);
  const cuuint32_t box[3] = {kNormGradRunPositions, static_cast<cuuint32_t>(channels), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float*>(tensor),
                            dims, strides.data(), box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

bool wgmma_conv_available() {
  static Sm90aImageQuery query(
      reinterpret_cast<const void*>(sm90a_image_probe_kernel<WgmmaConvFile>),
      "FUSED_OPS_SPLIT_TF32_WGMMA");
  return query();
}

bool wgmma_conv_supported(const conv::Conv3dShape& s) {
  // The split-TF32 family's shapes (one conv group, C_in and C_out multiples of 4 for the
  // 16-byte copies and stores, element counts within int32), and kernels of at most
  // 32 taps along D, H and W together (the rows' tap masks).
  const size_t smem = current_device_info().shared_memory;
  return conv::split_tf32_conv3d_shape_supported(s) && s.kD + s.kH + s.kW <= kWgmmaConvMaxTapBits &&
         static_cast<size_t>(narrow(s) ? tile_smem_bytes<NarrowTile>()
                                       : tile_smem_bytes<WideTile>()) <= smem &&
         wgmma_conv_available();
}

bool wgmma_conv_relu_moments_supported(const conv::Conv3dShape& s) {
  static_assert(WideTile::kBM == NarrowTile::kBM, "one row tile");
  return s.Do * s.Ho * s.Wo >= WideTile::kBM && wgmma_conv_supported(s);
}

bool wgmma_conv_channels_first_supported(const conv::Conv3dShape& s) {
  return (s.Do * s.Ho * s.Wo) % 4 == 0 && wgmma_conv_supported(s) && encode_tiled() != nullptr;
}

bool wgmma_conv_tf32_supported(const conv::Conv3dShape& s) {
  // (The moments' parts straddle at most two samples where a sample has 128 rows or more.)
  if (!wgmma_conv_relu_moments_supported(s)) {
    return false;
  }
  const conv::Conv3dChannelsLastParams shape_only{s, nullptr, nullptr, nullptr, nullptr};
  const size_t smem = current_device_info().shared_memory;
  return x_im2col_map_supported(wgmma_conv_params(shape_only, nullptr)) &&
         static_cast<size_t>(narrow(s) ? tile_smem_bytes<Tf32NarrowTile>()
                                       : tile_smem_bytes<Tf32WideTile>()) <= smem;
}

size_t wgmma_conv_workspace_bytes(const conv::Conv3dChannelsLastParams& p) {
  return split_weight_bytes(p.conv) +
         (p.relu_channel_moments != nullptr ? tile_moments_bytes(p.conv, p.tf32_products) : 0);
}

WgmmaConvParams wgmma_conv_params(const conv::Conv3dChannelsLastParams& cp, void* workspace) {
  const conv::Conv3dShape& s = cp.conv;
  WgmmaConvParams p{};
  p.N = s.N, p.D = s.D, p.H = s.H, p.W = s.W, p.C_in = s.C_in, p.C_out = s.C_out;
  p.kD = s.kD, p.kH = s.kH, p.kW = s.kW, p.Do = s.Do, p.Ho = s.Ho, p.Wo = s.Wo;
  for (int i = 0; i < 3; ++i) {
    p.stride[i] = s.stride[i], p.padding[i] = s.padding[i], p.dilation[i] = s.dilation[i];
  }
  p.M = s.N * s.Do * s.Ho * s.Wo;
  p.row_begin = 0, p.row_end = p.M;  // (and no side work)
  p.c_chunks = c_in_pad(s) / kWgmmaConvBK;
  p.x = cp.x;
  p.w_tiles = static_cast<const float*>(workspace);
  p.b_bn = narrow(s) ? 64 : 128;
  p.b_parts = cp.tf32_products ? 1 : 2;  // plain TF32: one part, in the channels' own order
  p.b_k_permuted = !cp.tf32_products;
  p.bias = cp.bias;
  p.x_from_norm = cp.x_from_norm;
  p.y = cp.y;
  p.y_channels_first = cp.y_channels_first;
  p.spatial = s.Do * s.Ho * s.Wo;
  if (cp.relu_channel_moments != nullptr) {
    p.tile_moments =
        reinterpret_cast<float2*>(static_cast<char*>(workspace) + split_weight_bytes(s));
  }
  return p;
}

cudaError_t split_tf32_weights(const conv::Conv3dChannelsLastParams& cp, const WgmmaConvParams& p,
                               cudaStream_t stream) {
  const int64_t elements = static_cast<int64_t>(weight_tile_elements(cp.conv, p.b_bn, p.b_parts));
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((elements + threads - 1) / threads, 4096));
  split_tf32_weights_kernel<<<blocks, threads, 0, stream>>>(cp.weight, cp.weight_of_transposed, p);
  return cudaGetLastError();
}

cudaError_t wgmma_conv_launch(const conv::Conv3dChannelsLastParams& cp, void* workspace,
                              cudaStream_t stream) {
  WgmmaConvParams p = wgmma_conv_params(cp, workspace);
  // The plane-box kernel (wgmma_plane_conv3d.cuh) where it takes the convolution (stride 1, y
  // NCDHW: the input gradients), with plain TF32 products by default, with split ones where
  // FUSED_OPS_PLANE_CONV is "1" ("0": never). Its weights are 64-channel tiles in the permuted
  // K order whatever the products. At the headline's input gradient on an H200 (2026-11-28,
  // benchmarks/h200-2026-11-28-plane-input-grad/notes.txt) the plain TF32 products took
  // 0.924 ms against the im2col tiles' 0.972-0.976 (it reads ~6x fewer activation bytes from
  // L2), the split ones 2.040 against 2.034 (the tensor cores' rate bounds both).
  // The GroupNorm backward's operand (x_from_norm, wgmma_plane_conv3d.cuh) is built by the
  // plane kernel only.
  const bool from_norm = cp.x_from_norm.defined();
  if (from_norm && !wgmma_plane_conv3d_supported(p, cp.tf32_products)) {
    return cudaErrorInvalidValue;  // (the host asks norm_grad_operand_supported)
  }
  const bool plane = from_norm || ((cp.tf32_products ? !env_switch_off("FUSED_OPS_PLANE_CONV")
                                                     : env_switch_on("FUSED_OPS_PLANE_CONV")) &&
                                   wgmma_plane_conv3d_supported(p, cp.tf32_products));
  if (plane) {
    p.b_bn = 64;
    p.b_k_permuted = true;
  }
  const cudaError_t e = split_tf32_weights(cp, p, stream);
  if (e != cudaSuccess) {
    return e;
  }
  if (plane) {
    return wgmma_plane_conv3d_launch(p, cp.tf32_products, stream);
  }
  cudaError_t conv;
  if (cp.tf32_products) {
    conv = narrow(cp.conv) ? launch_split_tf32_wgmma_conv3d<Tf32NarrowTile>(p, stream)
                           : launch_split_tf32_wgmma_conv3d<Tf32WideTile>(p, stream);
  } else {
    conv = narrow(cp.conv) ? launch_split_tf32_wgmma_conv3d<NarrowTile>(p, stream)
                           : launch_split_tf32_wgmma_conv3d<WideTile>(p, stream);
  }
  if (conv != cudaSuccess || cp.relu_channel_moments == nullptr) {
    return conv;
  }
  return relu_moments_of_tiles(p, cp.tf32_products, 0, p.N, cp.relu_channel_moments, stream);
}

// ---- The pipelined ConvTranspose3d -> ReLU -> GroupNorm forward with TF32 products.

namespace {

// The pipeline's launches of the convolution at most: each but the last takes whole rounds of the
// resident blocks (every block the same number of tiles), and only the first launch's samples of
// x's transpose and the last launch's of the normalisation run outside the convolution
// (conv_side_work.cuh). Each launch adds the moments' and statistics' kernels (~18 us, the
// moments' latency-bound) and a pipeline fill, and the side work slows the products (the
// producer warps have few registers: one unit's loads in flight each). At the headline on an
// H100 (2026-11-27, benchmarks/h100-2026-11-27-tf32-pipeline/notes.txt) bench.py timed the
// forward at 1.25 ms in 2 launches and 1.28 in 3; per-call times of one process (host work
// included): 1 launch 1.37 ms, 2 and 3: 1.30, 4: 1.32, 6: 1.34 (medians).
constexpr int64_t kMaxPipelineLaunches = 2;

// The pipelined forward runs by default (wgmma_tf32_relu_group_norm_preferred) where its
// convolution takes at least this many rounds of the resident blocks' tiles: it saves the
// statistics' pass over y (~90 us at the headline) and hides part of the others, and pays a
// fixed cost (the launches' moments and statistics, the pipeline's fill). Measured on an H200
// (2026-11-28, benchmarks/tf32_forward_sweep.py, 64 -> 128 channels, k3: benchmarks/
// h200-2026-11-28-free-moments/call8-tf32-forward-sweep.txt), pipelined against cuDNN's path:
// faster at N 12, 16, 24 on 32^3 (14.0, 18.6, 27.9 rounds: 0.835 / 0.852, 1.108 / 1.136,
// 1.589 / 1.712 ms), slower at N 8 and 4 (9.3 and 4.7 rounds: 0.616 / 0.588, 0.351 / 0.326)
// and on (16, 64, 24^3) (8.3 rounds: 0.549 / 0.528).
constexpr int64_t kPreferredPipelineRounds = 12;

size_t align_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Its workspace: the convolution's (split weights, then the tile moments: wgmma_conv_params),
// the channel moments (N, C_out), the GroupNorm's per-(n, c) affine.
struct PipelineWorkspace {
  size_t moments_offset, affine_offset, bytes;
};
PipelineWorkspace pipeline_workspace(const conv::Conv3dShape& s) {
  const size_t conv = align_256(split_weight_bytes(s) + tile_moments_bytes(s, true));
  const size_t moments = align_256(static_cast<size_t>(s.N * s.C_out) * sizeof(norm::Moments));
  const size_t affine = static_cast<size_t>(s.N * s.C_out) * sizeof(norm::CenteredAffine<float>);
  return {conv, conv + moments, conv + moments + affine};
}

template <typename Tile>
cudaError_t run_tf32_relu_group_norm(const conv::Tf32ConvReluGroupNormParams& gp, void* workspace,
                                     cudaStream_t stream) {
  const conv::Conv3dShape& s = gp.conv.conv;
  const PipelineWorkspace layout = pipeline_workspace(s);
  char* const bytes = static_cast<char*>(workspace);
  auto* const moments = reinterpret_cast<norm::Moments*>(bytes + layout.moments_offset);
  auto* const affine = reinterpret_cast<norm::CenteredAffine<float>*>(bytes + layout.affine_offset);
  conv::Conv3dChannelsLastParams cp = gp.conv;
  cp.tf32_products = true;
  cp.relu_channel_moments = moments;
  WgmmaConvParams p = wgmma_conv_params(cp, workspace);
  FUSED_OPS_RETURN_IF_CUDA_ERROR(split_tf32_weights(cp, p, stream));
  int resident = 0;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(wgmma_conv_resident_blocks<Tile>(&resident));

  // Launches of whole rounds of the resident blocks (a multiple of the cluster: row_begin's
  // alignment), about equal, as many as the rounds allow up to kMaxPipelineLaunches; one where
  // the side work does not take the tensors (then x's transpose and the normalisation run on
  // their own, before and after it).
  const int64_t N = s.N, M = p.M, out_spatial = p.spatial, in_spatial = s.D * s.H * s.W;
  const int64_t row_tiles = ceil_div(M, Tile::kBM);
  const bool side_work = conv_side_work_supported(s.C_in, in_spatial) &&
                         conv_side_work_supported(s.C_out, out_spatial);
  const int64_t launches =
      side_work ? std::clamp<int64_t>(row_tiles / resident, 1, kMaxPipelineLaunches) : 1;
  const int64_t launch_rows =
      ceil_div(ceil_div(row_tiles, launches), resident) * resident * Tile::kBM;
  // The samples holding any of rows [0, rows).
  const auto samples_reaching = [&](int64_t rows) {
    return std::min(N, ceil_div(std::min(rows, M), out_spatial));
  };
  float* const x_ndhwc = const_cast<float*>(cp.x);

  // x's transpose for the first launch's samples; each launch's side work does the next one's.
  int64_t transposed = samples_reaching(launch_rows);
  const BatchedTransposeParams first{gp.x_ncdhw, x_ndhwc,    transposed,
                                     s.C_in,     in_spatial, /*round_to_tf32=*/true};
  FUSED_OPS_RETURN_IF_CUDA_ERROR(
      static_cast<cudaError_t>(batched_transpose_cuda.launch(first, nullptr, stream)));
  p.side = ConvSideWork{gp.x_ncdhw, x_ndhwc,     s.C_in,
                        in_spatial, 0,           0,
                        cp.y,       affine,      static_cast<float*>(gp.group_norm.y),
                        s.C_out,    out_spatial, 0,
                        0};
  int64_t normalized = 0;  // samples whose output is written (or is being: a launch's side work)
  int64_t finalized = 0;   // samples whose statistics and affine are computed
  for (int64_t row = 0; row < M; row += launch_rows) {
    const int64_t end = std::min(M, row + launch_rows);
    p.row_begin = row, p.row_end = end;
    p.side.transpose_begin = transposed;
    p.side.transpose_end = transposed = end < M ? samples_reaching(end + launch_rows) : transposed;
    p.side.normalize_begin = normalized;
    p.side.normalize_end = normalized = finalized;
    FUSED_OPS_RETURN_IF_CUDA_ERROR(launch_split_tf32_wgmma_conv3d<Tile>(p, stream));
    const int64_t complete = end / out_spatial;  // samples whose rows are all computed (N at M)
    FUSED_OPS_RETURN_IF_CUDA_ERROR(
        relu_moments_of_tiles(p, /*tf32_products=*/true, finalized, complete, moments, stream));
    FUSED_OPS_RETURN_IF_CUDA_ERROR(norm::launch_relu_group_norm_channels_last_stats(
        gp.group_norm, moments, finalized, complete, affine, stream));
    finalized = complete;
  }
  return norm::launch_relu_group_norm_channels_last_normalize(gp.group_norm, normalized, N, affine,
                                                              stream);
}

}  // namespace

bool wgmma_tf32_relu_group_norm_preferred(const conv::Conv3dShape& s) {
  if (narrow(s) || s.C_out % Tf32WideTile::kBN != 0 || !wgmma_conv_tf32_supported(s)) {
    return false;
  }
  int resident = 0;
  if (wgmma_conv_resident_blocks<Tf32WideTile>(&resident) != cudaSuccess || resident <= 0) {
    return false;
  }
  const int64_t tiles =
      ceil_div(s.N * s.Do * s.Ho * s.Wo, Tf32WideTile::kBM) * (s.C_out / Tf32WideTile::kBN);
  return tiles >= kPreferredPipelineRounds * resident;
}

size_t wgmma_tf32_relu_group_norm_workspace_bytes(const conv::Tf32ConvReluGroupNormParams& p) {
  return pipeline_workspace(p.conv.conv).bytes;
}

cudaError_t wgmma_tf32_relu_group_norm_launch(const conv::Tf32ConvReluGroupNormParams& p,
                                              void* workspace, cudaStream_t stream) {
  if (!wgmma_conv_tf32_supported(p.conv.conv) || p.group_norm.dtype != ScalarKind::kFloat ||
      !p.group_norm.channels_last || p.group_norm.x != p.conv.y) {
    return cudaErrorInvalidValue;  // (the host asks tf32_forward_chosen)
  }
  return narrow(p.conv.conv) ? run_tf32_relu_group_norm<Tf32NarrowTile>(p, workspace, stream)
                             : run_tf32_relu_group_norm<Tf32WideTile>(p, workspace, stream);
}

// ---- Weight gradient.

namespace {

// 4 stages (5 and 6 measured slower for plain TF32). benchmarks/split_tf32_wgmma_check.cu
// times them against CUTLASS's wgrad.
using WgradSplitTile = WgmmaWgradTile<4, true>;
using WgradTf32Tile = WgmmaWgradTile<4, false>;
constexpr int kWgradSmemBytes = std::max(WgradSplitTile::kSmemBytes, WgradTf32Tile::kSmemBytes);
// With the GroupNorm backward's operand (its three run slots, 120 KB): 2 stages, published as
// soon as written (no copies in flight to lag behind).
using WgradSplitNormTile = WgmmaWgradTile<2, true, true>;
using WgradTf32NormTile = WgmmaWgradTile<2, false, true>;
constexpr int kWgradNormSmemBytes =
    std::max(WgradSplitNormTile::kSmemBytes, WgradTf32NormTile::kSmemBytes);

WgmmaWgradParams wgrad_params(const conv::Conv3dShape& s) {
  WgmmaWgradParams p{};
  p.N = static_cast<int>(s.N), p.D = static_cast<int>(s.D), p.H = static_cast<int>(s.H);
  p.W = static_cast<int>(s.W), p.C_in = static_cast<int>(s.C_in);
  p.C_out = static_cast<int>(s.C_out), p.kD = static_cast<int>(s.kD);
  p.kH = static_cast<int>(s.kH), p.kW = static_cast<int>(s.kW);
  p.Do = static_cast<int>(s.Do), p.Ho = static_cast<int>(s.Ho), p.Wo = static_cast<int>(s.Wo);
  for (int i = 0; i < 3; ++i) {
    p.padding[i] = static_cast<int>(s.padding[i]);
    p.dilation[i] = static_cast<int>(s.dilation[i]);
  }
  p.w_chunks = static_cast<int>(ceil_div(s.W, kWgradBK));
  p.blocks = static_cast<int>(s.N * s.D * s.H * p.w_chunks);
  // Split-K over the (pair, K block) units: one block per SM over the channel tiles (a block
  // may end one pair and start the next: 9 pairs do not divide 132 SMs), at least one block
  // per pair (so that a block covers at most two).
  const int64_t pairs = s.kD * s.kH;
  const int64_t units = pairs * p.blocks;
  const int64_t channel_tiles = ceil_div(s.C_out, kWgradBM) * ceil_div(s.C_in, kWgradBN);
  const int64_t want = std::min<int64_t>(
      units, std::max<int64_t>(pairs, current_device_info().multiprocessors / channel_tiles));
  p.units_per_block = static_cast<int>(ceil_div(units, want));
  p.grid_blocks = static_cast<int>(ceil_div(units, p.units_per_block));
  return p;
}

// x's (NCDHW) tensor map for the weight gradient's x tiles: a box of 32 positions along W by
// kWgradBN channels at one (n, z, y), unswizzled (a 128-byte row per channel), zeros outside x.
cudaError_t make_wgrad_x_map(const WgmmaWgradParams& p, CUtensorMap* map) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) {
    return cudaErrorNotSupported;
  }
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(p.W), static_cast<cuuint64_t>(p.H),
                              static_cast<cuuint64_t>(p.D), static_cast<cuuint64_t>(p.C_in),
                              static_cast<cuuint64_t>(p.N)};
  const auto strides = dense_float_strides(dims);
  const cuuint32_t box[5] = {kWgradBK, 1, 1, kWgradBN, 1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, const_cast<float*>(p.x), dims, strides.data(),
             box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace

__global__ void wgmma_wgrad_reduce_kernel(const WgmmaWgradParams p) {
  const int taps = p.kD * p.kH * p.kW;
  const int64_t per_tap = static_cast<int64_t>(p.C_out) * p.C_in;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < taps * per_tap;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t kc = i % per_tap;  // k * C_in + c
    const int tap = static_cast<int>(i / per_tap);
    const int pair = tap / p.kW, tap_w = tap % p.kW;
    int first = 0, last = 0;
    wgrad_pair_blocks(p, pair, first, last);
    float sum = 0.f;
    for (int block = first; block <= last; ++block) {
      sum += p.partial[(wgrad_partial_slot(block, pair) * p.kW + tap_w) * per_tap + kc];
    }
    const int64_t c = kc % p.C_in, k = kc / p.C_in;
    p.dw[(k * taps + tap) * p.C_in + c] = sum;
  }
}

bool wgmma_wgrad_supported(const conv::Conv3dShape& s) {
  const bool stride_1 = s.stride[0] == 1 && s.stride[1] == 1 && s.stride[2] == 1;
  return stride_1 && conv::split_tf32_conv3d_shape_supported(s) && s.W % 4 == 0 &&
         s.kW <= kWgradMaxKW && kWgradBK + (s.kW - 1) * s.dilation[2] <= kWgradMaxRows &&
         static_cast<size_t>(kWgradSmemBytes) <= current_device_info().shared_memory &&
         wgmma_conv_available() && encode_tiled() != nullptr;
}

bool wgmma_wgrad_norm_operand_supported(const conv::Conv3dShape& s) {
  // The runs' maps: positions a multiple of 4 (their strides), coordinates within int32.
  const int64_t positions = s.Do * s.Ho * s.Wo;
  return positions % 4 == 0 && positions <= (int64_t{1} << 30) &&
         static_cast<size_t>(kWgradNormSmemBytes) <= current_device_info().shared_memory &&
         wgmma_wgrad_supported(s);
}

size_t wgmma_wgrad_workspace_bytes(const conv::Conv3dShape& s) {
  const WgmmaWgradParams p = wgrad_params(s);
  return static_cast<size_t>(p.grid_blocks + s.kD * s.kH) * s.kW * s.C_out * s.C_in * sizeof(float);
}

cudaError_t wgmma_wgrad_launch(const conv::Conv3dShape& s, const float* x_ncdhw,
                               const float* dy_ndhwc,
                               const conv::ReluGroupNormGradOperand& dy_from_norm, float* dw,
                               void* workspace, bool split, cudaStream_t stream) {
  WgmmaWgradParams p = wgrad_params(s);
  p.x = x_ncdhw;
  p.dy = dy_ndhwc;
  p.dy_from_norm = dy_from_norm;
  p.partial = static_cast<float*>(workspace);
  p.dw = dw;
  const bool from_norm = dy_from_norm.defined();
  if (from_norm && !wgmma_wgrad_norm_operand_supported(s)) {
    return cudaErrorInvalidValue;  // (the host asks norm_grad_operand_supported)
  }
  CUtensorMap x_map{}, g_map{}, conv_map{};
  cudaError_t e = make_wgrad_x_map(p, &x_map);
  if (e != cudaSuccess) {
    return e;
  }
  if (from_norm) {
    const int64_t positions = s.Do * s.Ho * s.Wo;
    FUSED_OPS_RETURN_IF_CUDA_ERROR(make_norm_grad_run_map(dy_from_norm.grad_output, s.N, s.C_out,
                                                          positions, kWgradBM, &g_map));
    FUSED_OPS_RETURN_IF_CUDA_ERROR(make_norm_grad_run_map(dy_from_norm.conv_output, s.N, s.C_out,
                                                          positions, kWgradBM, &conv_map));
  } else {
    g_map = conv_map = x_map;  // (not read)
  }
  const auto kernel =
      from_norm ? (split ? split_tf32_wgmma_wgrad_kernel<WgradSplitNormTile::kStages, true, true>
                         : split_tf32_wgmma_wgrad_kernel<WgradTf32NormTile::kStages, false, true>)
                : (split ? split_tf32_wgmma_wgrad_kernel<WgradSplitTile::kStages, true>
                         : split_tf32_wgmma_wgrad_kernel<WgradTf32Tile::kStages, false>);
  const int smem_bytes =
      from_norm ? (split ? WgradSplitNormTile::kSmemBytes : WgradTf32NormTile::kSmemBytes)
                : (split ? WgradSplitTile::kSmemBytes : WgradTf32Tile::kSmemBytes);
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (e != cudaSuccess) {
    return e;
  }
  const dim3 grid(static_cast<unsigned>(p.grid_blocks),
                  static_cast<unsigned>(ceil_div(s.C_out, kWgradBM)),
                  static_cast<unsigned>(ceil_div(s.C_in, kWgradBN)));
  kernel<<<grid, kWgmmaConvThreads, smem_bytes, stream>>>(p, x_map, g_map, conv_map);
  if ((e = cudaGetLastError()) != cudaSuccess) {
    return e;
  }
  const int64_t outputs = s.kD * s.kH * s.kW * s.C_out * s.C_in;
  wgmma_wgrad_reduce_kernel<<<
      static_cast<unsigned>(std::min<int64_t>(ceil_div(outputs, 256), 4096)), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace gpu
}  // namespace fused_ops
