// The library's instances of the plane-box wgmma convolution (wgmma_plane_conv3d.cuh) and their
// host side: which convolutions they take, the tensor maps, the launch. Compiled for sm_90a in
// every build, as split_tf32_wgmma_conv3d_cuda.cu (CMakeLists.txt), whose wgmma_conv_launch
// calls it.
#include "conv/wgmma_plane_conv3d.cuh"

#include "common/cuda/device_info.cuh"
#include "common/cuda/launch_utils.cuh"

#include <algorithm>
#include <cstdint>

namespace fused_ops {
namespace gpu {
namespace {

// A convolution's plane boxes and tiles for `Tile`.
template <typename Tile>
WgmmaPlaneConvParams plane_params(const WgmmaConvParams& p) {
  WgmmaPlaneConvParams pp{};
  pp.conv = p;
  pp.box_w = static_cast<int>(32 + (p.kW - 1) * p.dilation[2]);
  pp.box_h = static_cast<int>(Tile::kRowsH + (p.kH - 1) * p.dilation[1]);
  pp.h_tiles = static_cast<int>((p.Ho + Tile::kRowsH - 1) / Tile::kRowsH);
  pp.w_tiles = static_cast<int>((p.Wo + 31) / 32);
  pp.row_tiles = p.N * p.Do * pp.h_tiles * pp.w_tiles;
  return pp;
}

template <typename Tile>
bool tile_takes(const WgmmaConvParams& p) {
  const WgmmaPlaneConvParams pp = plane_params<Tile>(p);
  return pp.box_w <= 256 && pp.box_h <= 256 && pp.box_w * pp.box_h <= Tile::kMaxBoxLines &&
         static_cast<size_t>(Tile::kSmemBytes + Tile::kStaticSmemBytes) <=
             current_device_info().shared_memory;
}

// x's (NDHWC: C_in, W, H, D, N innermost first) tiled map, boxes of (32 channels, box_w, box_h,
// 1, 1), 128-byte swizzled, zeros outside x.
cudaError_t make_x_plane_map(const WgmmaPlaneConvParams& pp, CUtensorMap* map) {
  const WgmmaConvParams& p = pp.conv;
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(p.C_in), static_cast<cuuint64_t>(p.W),
                              static_cast<cuuint64_t>(p.H), static_cast<cuuint64_t>(p.D),
                              static_cast<cuuint64_t>(p.N)};
  const auto strides = dense_float_strides(dims);
  const cuuint32_t box[5] = {kWgmmaConvBK, static_cast<cuuint32_t>(pp.box_w),
                             static_cast<cuuint32_t>(pp.box_h), 1, 1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r = encode_tiled()(
      map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, const_cast<float*>(p.x), dims, strides.data(), box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// y's (NCDHW: Wo, Ho, Do, C_out, N innermost first) tiled map, boxes of (32 positions, 1, 1, 64
// channels, 1), 128-byte swizzled as the consumers stage them.
cudaError_t make_y_plane_map(const WgmmaConvParams& p, CUtensorMap* map) {
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(p.Wo), static_cast<cuuint64_t>(p.Ho),
                              static_cast<cuuint64_t>(p.Do), static_cast<cuuint64_t>(p.C_out),
                              static_cast<cuuint64_t>(p.N)};
  const auto strides = dense_float_strides(dims);
  const cuuint32_t box[5] = {32, 1, 1, 64, 1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r =
      encode_tiled()(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, p.y, dims, strides.data(), box,
                     element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <typename Tile>
cudaError_t launch_plane(const WgmmaConvParams& p, cudaStream_t stream) {
  if (p.b_bn != Tile::kBN || p.b_parts != Tile::kBParts || !p.b_k_permuted) {
    return cudaErrorInvalidValue;  // weights split for another kernel
  }
  const WgmmaPlaneConvParams pp = plane_params<Tile>(p);
  CUtensorMap x_map{}, y_map{}, g_map{}, conv_map{};
  FUSED_OPS_RETURN_IF_CUDA_ERROR(make_y_plane_map(p, &y_map));
  if constexpr (Tile::kRowStages > 0) {
    const int64_t positions = p.D * p.H * p.W;
    FUSED_OPS_RETURN_IF_CUDA_ERROR(make_norm_grad_run_map(p.x_from_norm.grad_output, p.N, p.C_in,
                                                          positions, kWgmmaConvBK, &g_map));
    FUSED_OPS_RETURN_IF_CUDA_ERROR(make_norm_grad_run_map(p.x_from_norm.conv_output, p.N, p.C_in,
                                                          positions, kWgmmaConvBK, &conv_map));
    x_map = y_map;  // (not read)
  } else {
    FUSED_OPS_RETURN_IF_CUDA_ERROR(make_x_plane_map(pp, &x_map));
    g_map = conv_map = y_map;  // (not read)
  }
  const auto kernel = wgmma_plane_conv3d_kernel<Tile>;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  // Persistent: a block per SM at most (one fits), each walking tiles b, b + grid, ...
  const int64_t groups = pp.row_tiles * ((p.C_out + Tile::kBN - 1) / Tile::kBN);
  const int sms = current_device_info().multiprocessors;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(groups, sms));
  kernel<<<grid, kWgmmaConvBlockThreads, Tile::kSmemBytes, stream>>>(pp, x_map, y_map, g_map,
                                                                     conv_map);
  return cudaGetLastError();
}

}  // namespace

bool wgmma_plane_conv3d_supported(const WgmmaConvParams& p, bool tf32_products) {
  for (int i = 0; i < 3; ++i) {
    if (p.stride[i] != 1) {
      return false;
    }
  }
  const bool from_norm = p.x_from_norm.defined();
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (!p.y_channels_first || p.tile_moments != nullptr || p.row_begin != 0 || p.row_end != p.M ||
      p.C_in % 4 != 0 || p.Wo % 4 != 0 || p.M <= 0 || p.N > INT32_MAX || p.C_out > INT32_MAX ||
      !(from_norm || aligned(p.x)) || !aligned(p.y) || encode_tiled() == nullptr ||
      current_device_info().multiprocessors == 0) {
    return false;
  }
  if (from_norm) {
    // The runs: positions a multiple of 4 (the maps' strides) and within the int32 coordinates
    // (with the taps' reach around them), the widest run within kNormGradRunPositions from its
    // aligned start (norm_grad_run_start: up to 3 positions before it).
    const int64_t positions = p.D * p.H * p.W;
    const conv::ReluGroupNormGradOperand& o = p.x_from_norm;
    if (positions % 4 != 0 || positions > (int64_t{1} << 30) ||
        32 + (p.kW - 1) * p.dilation[2] > kNormGradRunPositions - 3 || !aligned(o.grad_output) ||
        !aligned(o.conv_output) || !aligned(o.coefficients)) {
      return false;
    }
    return tf32_products ? tile_takes<PlaneTf32NormTile>(p) : tile_takes<PlaneSplitNormTile>(p);
  }
  return tf32_products ? tile_takes<PlaneTf32Tile>(p) : tile_takes<PlaneSplitTile>(p);
}

cudaError_t wgmma_plane_conv3d_launch(const WgmmaConvParams& p, bool tf32_products,
                                      cudaStream_t stream) {
  if (!wgmma_plane_conv3d_supported(p, tf32_products)) {
    return cudaErrorInvalidValue;
  }
  if (p.x_from_norm.defined()) {
    return tf32_products ? launch_plane<PlaneTf32NormTile>(p, stream)
                         : launch_plane<PlaneSplitNormTile>(p, stream);
  }
  return tf32_products ? launch_plane<PlaneTf32Tile>(p, stream)
                       : launch_plane<PlaneSplitTile>(p, stream);
}

}  // namespace gpu
}  // namespace fused_ops
