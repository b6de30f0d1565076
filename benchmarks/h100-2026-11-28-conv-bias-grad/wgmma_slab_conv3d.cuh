// Experiment, kept with its notes (notes.txt, section 4), not built by anything: `git apply
// check-program-slab.patch` (from the repository root) adds it to the check program
// (benchmarks/split_tf32_wgmma_check.cu, tools/split_tf32_wgmma_check.sh). As run on an H100 on
// 2026-11-28, plus the epilogue's part-to-rows mapping that the run found wrong (fixed here,
// not run since: the session's device time was spent).
//
// A 3-d convolution of stride 1, without padding or dilation, with plain TF32 products on
// Hopper's wgmma, whose K blocks copy each activation row once for all kW taps along W instead
// of once per tap:
//
//   y[n, z, p, q, k] = bias[k] + sum over (t, r, s, c) of
//       x[n, z + t, p + r, q + s, c] * w[k, t, r, s, c]
//
// x, y NDHWC, C_out <= 64. Why: the library's TF32 kernel (split_tf32_wgmma_conv3d.cuh, im2col
// copies) reads every activation from L2 once per tap, 27 times for 3x3x3; at the ConvTranspose3d
// headline's input gradient (128 -> 64 channels) that is 7.25 GB per call, and Nsight Compute put
// the kernel at 82% of L2's throughput, its SMs at 50%.
//
// The output is computed on x's own grid ("virtual rows": v = ((n D + d) H + h) W + w, M = N D H W
// rows, of which the Do Ho Wo of each sample with d < Do, h < Ho, w < Wo are outputs; the rest
// are computed and dropped, 20% more products at the headline's 34^3 -> 32^3). On that grid tap
// (t, r, s) reads row v + (t H + r) W + s, so the rows of a tile for all s of one (t, r) are one
// slab of kBM + kW - 1 consecutive rows: one tensor-map copy per (t, r, 32 channels) K block, the
// kW taps read from it by descriptors whose start moves a row (128 bytes) per tap. Rows past x's
// end are zeros (the copy's bounds); rows past a sample feed only dropped outputs.
//
// Tiling: 256 virtual rows x 64 channels, two consumer warpgroups of 128 rows (2 x m64), clusters
// of 2 blocks sharing the weights (multicast), kStages stages of [kW weight tiles of 64 x 32]
// [two slabs of 130 x 32] (one per consumer warpgroup), one producer thread, an epilogue
// warpgroup that stores the staged 64-row parts' output rows. Slab layouts compared (whether a
// row-shifted descriptor reads a 128-byte-swizzled tile right is what the experiment asks):
//   kSw128: the copy's 128-byte swizzle, descriptors at the shifted row, base offset 0;
//   kSw128BaseOffset: the same with the descriptor's base offset set to the shift's row phase;
//   kInterleave: no swizzle, [8 chunks of 4 channels][130 rows][16 bytes] (a 3-d tensor map),
//     core matrices of 8 consecutive rows: a shift is a 16-byte move of the start address.
#pragma once

#include "conv/split_tf32_wgmma_conv3d.cuh"

namespace fused_ops {
namespace gpu {

enum class SlabLayout { kSw128, kSw128BaseOffset, kInterleave };

template <SlabLayout Layout>
struct SlabTile {
  static constexpr SlabLayout kLayout = Layout;
  static constexpr int kBN = 64, kBM = 256, kStages = 3, kCluster = 2, kMaxKW = 3;
  static constexpr int kSlabRows = 128 + kMaxKW - 1;  // a warpgroup's rows and the taps' shifts
  static constexpr int kSlabCopyBytes = kSlabRows * 128;
  static constexpr int kSlabBytes = 17 * 1024;  // (1024-aligned slabs)
  static constexpr int kWBytes = kBN * 128;     // one tap's weight tile
  static constexpr int kStageBytes = kMaxKW * kWBytes + 2 * kSlabBytes;
  static constexpr int kOutRows = 64, kOutParts = kBM / kOutRows, kOutPitch = kBN + 4;
  static constexpr int kOutBytes = kOutRows * kOutPitch * 4;
  static constexpr int kSmemBytes = kStages * kStageBytes + kOutBytes + 1024;
  static constexpr int kProducerRegisters = 56, kConsumerRegisters = 200, kEpilogueRegisters = 56;
  static_assert(kSmemBytes + 2 * kStages * 8 + 3 * 8 <= 227 * 1024, "shared memory");
  static_assert(kStageBytes % 1024 == 0 && kSlabCopyBytes <= kSlabBytes, "alignment");
};

struct SlabConvParams {
  int64_t N, D, H, W, C_in, C_out, kD, kH, kW, Do, Ho, Wo;
  int64_t M;  // virtual rows: N * D * H * W
  int64_t c_chunks;
  const float* w_tiles;  // WgmmaConvParams::w_tiles for 64-channel tiles, one part (plain TF32)
  const float* bias;
  float* y;  // NDHWC (N, Do, Ho, Wo, C_out)
};

#ifdef FUSED_OPS_WGMMA_ENABLED
namespace slab_detail {
// K-major, no swizzle: core matrices of 8 rows x 16 bytes, 8-row groups `sbo` bytes apart, the
// two 16-byte halves of a k8 step `lbo` bytes apart.
__device__ __forceinline__ uint64_t k_major_interleave_desc(uint32_t smem, uint32_t lbo,
                                                            uint32_t sbo) {
  cute::GmmaDescriptor desc;
  desc.bitfield.start_address_ = static_cast<uint16_t>(smem >> 4);
  desc.bitfield.leading_byte_offset_ = static_cast<uint16_t>(lbo >> 4);
  desc.bitfield.stride_byte_offset_ = static_cast<uint16_t>(sbo >> 4);
  desc.bitfield.base_offset_ = 0;
  desc.bitfield.layout_type_ = static_cast<uint8_t>(cute::SM90::GMMA::LayoutType::INTERLEAVE);
  return desc.desc_;
}
__device__ __forceinline__ uint64_t with_base_offset(uint64_t desc, uint32_t phase) {
  cute::GmmaDescriptor d;
  d.desc_ = desc;
  d.bitfield.base_offset_ = static_cast<uint8_t>(phase & 7);
  return d.desc_;
}
__device__ __forceinline__ void tiled_copy_to_shared_2d(uint32_t dst, const CUtensorMap* map,
                                                        int32_t c0, int32_t c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tiled_copy_to_shared_3d(uint32_t dst, const CUtensorMap* map,
                                                        int32_t c0, int32_t c1, int32_t c2,
                                                        uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
}  // namespace slab_detail
#endif

template <typename Tile>
__global__ void __launch_bounds__(kWgmmaConvBlockThreads, 1)
    wgmma_slab_conv3d_kernel(const SlabConvParams p, const __grid_constant__ CUtensorMap x_map) {
#ifdef FUSED_OPS_WGMMA_ENABLED
  using namespace wgmma_conv_detail;
  using namespace slab_detail;
  constexpr int kStages = Tile::kStages, kBM = Tile::kBM, kCluster = Tile::kCluster;
  constexpr int kAcc = Tile::kBN / 2;
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full_bar[kStages], empty_bar[kStages], out_bar[3];
  const StageRing<kStages, false> ring{full_bar, empty_bar};
  const OutTileHandoff<Tile::kOutParts, 1> out_handoff{&out_bar[0], &out_bar[1]};
  const uint32_t smem_base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_base - smem_u32(smem_raw));
  float* const out_tile = reinterpret_cast<float*>(smem + kStages * Tile::kStageBytes);

  const int tid = threadIdx.x;
  const int64_t row_tiles = (p.M + kBM - 1) / kBM;
  const int64_t groups = (row_tiles + kCluster - 1) / kCluster;
  const int64_t first_group = blockIdx.x / kCluster, group_step = gridDim.x / kCluster;
  const int rank = static_cast<int>(blockIdx.x % kCluster);
  const int kW = static_cast<int>(p.kW), c_chunks = static_cast<int>(p.c_chunks);
  const int k_blocks = static_cast<int>(p.kD * p.kH) * c_chunks;
  const auto row_tile_of = [&](int64_t group) { return group * kCluster + rank; };

  if (tid == 0) {
    ring.init(/*extra_full_arrivals=*/1, /*producer_threads=*/0,
              /*consumer_arrivals=*/8 * kCluster);
    out_handoff.init();
  }
  cluster_sync_all();

  if (tid < 128) {
    // ---- Producer: thread 0 issues each K block's copies; the rest give back registers.
    cutlass::arch::warpgroup_reg_dealloc<Tile::kProducerRegisters>();
    if (tid == 0) {
      constexpr int kBTileFloats = Tile::kBN * kWgmmaConvBK;
      int kb = 0;
      for (int64_t group = first_group; group < groups; group += group_step) {
        const int64_t m0 = min(row_tile_of(group), row_tiles - 1) * kBM;  // (clamped: not stored)
        int tt = 0, tr = 0, c_chunk = 0;
        for (int j = 0; j < k_blocks; ++j, ++kb) {
          const int slot = kb % kStages;
          ring.producer_acquire(kb);
          const uint32_t full = smem_u32(&full_bar[slot]);
          const uint32_t stage = smem_base + slot * Tile::kStageBytes;
          mbarrier_arrive_expect_bytes(full, 2 * Tile::kSlabCopyBytes + kW * Tile::kWBytes);
          const int64_t row0 = m0 + (tt * p.H + tr) * p.W;
#pragma unroll
          for (int wg = 0; wg < 2; ++wg) {
            const uint32_t dst = stage + Tile::kMaxKW * Tile::kWBytes + wg * Tile::kSlabBytes;
            const int32_t row = static_cast<int32_t>(row0 + wg * 128);
            if constexpr (Tile::kLayout == SlabLayout::kInterleave) {
              tiled_copy_to_shared_3d(dst, &x_map, 0, row, c_chunk * 8, full);
            } else {
              tiled_copy_to_shared_2d(dst, &x_map, c_chunk * kWgmmaConvBK, row, full);
            }
          }
          for (int s = 0; s < kW; ++s) {
            const int64_t tap = (tt * p.kH + tr) * p.kW + s;
            const float* w_tile = p.w_tiles + (tap * c_chunks + c_chunk) * kBTileFloats;
            constexpr int kShareBytes = Tile::kWBytes / kCluster;
            bulk_copy_to_cluster(stage + s * Tile::kWBytes + rank * kShareBytes,
                                 w_tile + rank * (kBTileFloats / kCluster), kShareBytes, full,
                                 static_cast<uint16_t>((1u << kCluster) - 1));
          }
          if (++c_chunk == c_chunks) {
            c_chunk = 0;
            if (++tr == p.kH) {
              tr = 0;
              ++tt;
            }
          }
        }
      }
    }
    cluster_sync_all();
    return;
  }

  if (tid >= kWgmmaConvThreads) {
    // ---- Epilogue warpgroup: the staged part's rows that are outputs, 16 bytes a lane.
    cutlass::arch::warpgroup_reg_dealloc<Tile::kEpilogueRegisters>();
    const int etid = tid - kWgmmaConvThreads, ewarp = etid >> 5, elane = etid & 31;
    constexpr int kLanesPerRow = Tile::kBN / 4, kRowsPerStep = 4 * (32 / kLanesPerRow);
    const int row_in_step = ewarp * (32 / kLanesPerRow) + elane / kLanesPerRow;
    const int col4 = 4 * (elane % kLanesPerRow);
    const int64_t plane = p.H * p.W, sample = p.D * plane;
    int u = 0;
    for (int64_t part = first_group * Tile::kOutParts; part < groups * Tile::kOutParts; ++u) {
      const int64_t group = part / Tile::kOutParts;
      // Part h of a tile is block h / 2 of consumer warpgroup h % 2 (OutTileHandoff's turns),
      // whose rows are the warpgroup's 128 (one slab) in two blocks of 64.
      const int h = static_cast<int>(part % Tile::kOutParts);
      const int64_t m0 = row_tile_of(group) * kBM + ((h % 2) * 2 + h / 2) * Tile::kOutRows;
      part = (part + 1) % Tile::kOutParts != 0 ? part + 1 : (group + group_step) * Tile::kOutParts;
      out_handoff.epilogue_wait_full(u);
      if (col4 < p.C_out) {
        for (int r = row_in_step; r < Tile::kOutRows; r += kRowsPerStep) {
          const int64_t v = m0 + r;
          if (v >= p.M) {
            break;
          }
          const int64_t n = v / sample, in_sample = v - n * sample;
          const int64_t d = in_sample / plane, h = in_sample / p.W % p.H, w = in_sample % p.W;
          if (d < p.Do && h < p.Ho && w < p.Wo) {
            *reinterpret_cast<float4*>(p.y + (((n * p.Do + d) * p.Ho + h) * p.Wo + w) * p.C_out +
                                       col4) =
                *reinterpret_cast<const float4*>(out_tile + r * Tile::kOutPitch + col4);
          }
        }
      }
      out_handoff.epilogue_arrive_free(u);
    }
    cluster_sync_all();
    return;
  }

  // ---- Consumers.
  cutlass::arch::warpgroup_reg_alloc<Tile::kConsumerRegisters>();
  const int warp = (tid >> 5) - 4, lane = tid & 31;
  const int wg = warp >> 2;
  const int g = lane >> 2, t = lane & 3;
  int kb = 0, u = 0, free_waits = 0;
  for (int64_t group = first_group; group < groups; group += group_step, ++u) {
    float acc[2 * kAcc];
#pragma unroll
    for (int i = 0; i < 2 * kAcc; ++i) {
      acc[i] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < 2 * kAcc; ++i) {
      cute::warpgroup_fence_operand(acc[i]);
    }
    for (int j = 0; j < k_blocks; ++j, ++kb) {
      const int slot = kb % kStages;
      ring.consumer_wait(kb);
      const uint32_t stage = smem_base + slot * Tile::kStageBytes;
      const uint32_t slab = stage + Tile::kMaxKW * Tile::kWBytes + wg * Tile::kSlabBytes;
      cute::warpgroup_arrive();
#pragma unroll
      for (int s = 0; s < Tile::kMaxKW; ++s) {  // (kW == kMaxKW: slab_conv3d_supported)
        const uint64_t desc_b = k_major_sw128_desc(stage + s * Tile::kWBytes);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int row = 64 * i + s;  // the block's first row in the slab, for tap s
#pragma unroll
          for (int kk = 0; kk < kWgmmaConvBK / 8; ++kk) {
            uint64_t desc_a;
            if constexpr (Tile::kLayout == SlabLayout::kInterleave) {
              desc_a = k_major_interleave_desc(slab + 2 * kk * (Tile::kSlabRows * 16) + row * 16,
                                               Tile::kSlabRows * 16, 128);
            } else {
              desc_a = k_major_sw128_desc(slab + row * 128) + static_cast<uint64_t>(kk * 2);
              if constexpr (Tile::kLayout == SlabLayout::kSw128BaseOffset) {
                desc_a = with_base_offset(desc_a, static_cast<uint32_t>(row));
              }
            }
            wgmma_ss<64>(acc + i * kAcc, desc_a, desc_b + static_cast<uint64_t>(kk * 2),
                         std::make_index_sequence<kAcc>{});
          }
        }
      }
      cute::warpgroup_commit_batch();
      cute::warpgroup_wait<1>();
      if (j > 0) {
        ring.template consumer_release_cluster<kCluster>(kb - 1);
      }
    }
    cute::warpgroup_wait<0>();
    ring.template consumer_release_cluster<kCluster>(kb - 1);
#pragma unroll
    for (int i = 0; i < 2 * kAcc; ++i) {
      cute::warpgroup_fence_operand(acc[i]);
    }
    // y = acc + bias, staged as part 2 i + wg (block i of this warpgroup) for the epilogue.
#pragma unroll
    for (int jj = 0; jj < Tile::kBN / 8; ++jj) {
      const int col = 8 * jj + 2 * t;
      if (col < p.C_out) {
        const float2 b = *reinterpret_cast<const float2*>(p.bias + col);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float* const a = acc + i * kAcc + 4 * jj;
          a[0] += b.x, a[1] += b.y, a[2] += b.x, a[3] += b.y;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      out_handoff.consumer_wait_free(u * Tile::kOutParts + 2 * i + wg, wg, free_waits);
      const int out_row0 = (warp & 3) * 16 + g;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float* const out_row = out_tile + (out_row0 + 8 * half) * Tile::kOutPitch + 2 * t;
#pragma unroll
        for (int jj = 0; jj < Tile::kBN / 8; ++jj) {
          const float* const a = acc + i * kAcc + 4 * jj + 2 * half;
          *reinterpret_cast<float2*>(out_row + 8 * jj) = make_float2(a[0], a[1]);
        }
      }
      out_handoff.consumer_arrive_full(wg);
    }
  }
  cluster_sync_all();
#else
  __trap();
#endif
}

// Whether the experiment takes the shape: stride 1, no padding or dilation, kW 3, C_out <= 64,
// C_in a multiple of 4, 16-byte aligned x, sizes within the tensor map's int32 coordinates.
inline bool slab_conv3d_supported(const conv::Conv3dShape& s, const float* x) {
  for (int i = 0; i < 3; ++i) {
    if (s.stride[i] != 1 || s.padding[i] != 0 || s.dilation[i] != 1) {
      return false;
    }
  }
  return s.kW == SlabTile<SlabLayout::kSw128>::kMaxKW && s.C_out <= 64 && s.C_out % 4 == 0 &&
         s.C_in % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         s.N * s.D * s.H * s.W < (int64_t{1} << 31) && encode_tiled() != nullptr;
}

// x's tensor map for the slabs of `kLayout` (slab_conv3d_supported shapes).
template <SlabLayout kLayout>
cudaError_t make_slab_map(const conv::Conv3dShape& s, const float* x, CUtensorMap* map) {
  using Tile = SlabTile<kLayout>;
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) {
    return cudaErrorNotSupported;
  }
  const cuuint64_t rows = static_cast<cuuint64_t>(s.N * s.D * s.H * s.W);
  CUresult r;
  if constexpr (kLayout == SlabLayout::kInterleave) {
    const cuuint64_t dims[3] = {4, rows, static_cast<cuuint64_t>(s.C_in / 4)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(s.C_in) * 4, 16};
    const cuuint32_t box[3] = {4, Tile::kSlabRows, 8};
    const cuuint32_t element_strides[3] = {1, 1, 1};
    r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float*>(x), dims, strides, box,
               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  } else {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(s.C_in), rows};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(s.C_in) * 4};
    const cuuint32_t box[2] = {kWgmmaConvBK, Tile::kSlabRows};
    const cuuint32_t element_strides[2] = {1, 1};
    r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(x), dims, strides, box,
               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// Runs it on weights split for 64-channel tiles, one part (wgmma_conv_params with b_bn 64,
// b_parts 1: w_tiles).
template <SlabLayout kLayout>
cudaError_t launch_wgmma_slab_conv3d(const conv::Conv3dShape& s, const float* x,
                                     const float* w_tiles, const float* bias, float* y,
                                     cudaStream_t stream) {
  using Tile = SlabTile<kLayout>;
  if (!slab_conv3d_supported(s, x)) {
    return cudaErrorNotSupported;
  }
  SlabConvParams p{s.N,  s.D,  s.H,  s.W, s.C_in, s.C_out, s.kD, s.kH, s.kW,
                   s.Do, s.Ho, s.Wo, 0,   0,      w_tiles, bias, y};
  p.M = s.N * s.D * s.H * s.W;
  p.c_chunks = (s.C_in + kWgmmaConvBK - 1) / kWgmmaConvBK;
  CUtensorMap map{};
  cudaError_t e = make_slab_map<kLayout>(s, x, &map);
  if (e != cudaSuccess) {
    return e;
  }
  const auto kernel = wgmma_slab_conv3d_kernel<Tile>;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes);
  if (e != cudaSuccess) {
    return e;
  }
  int sms = 0;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  if (e != cudaSuccess) {
    return e;
  }
  ClusterLaunchConfig launch(Tile::kCluster,
                             static_cast<unsigned>(sms / Tile::kCluster * Tile::kCluster),
                             Tile::kSmemBytes, stream);
  int clusters = 0;
  e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.config);
  if (e != cudaSuccess || clusters <= 0) {
    return e != cudaSuccess ? e : cudaErrorInvalidConfiguration;
  }
  const int64_t groups = ((p.M + Tile::kBM - 1) / Tile::kBM + Tile::kCluster - 1) / Tile::kCluster;
  launch.config.gridDim =
      dim3(static_cast<unsigned>((groups < clusters ? groups : clusters) * Tile::kCluster));
  return cudaLaunchKernelEx(&launch.config, kernel, p, map);
}

}  // namespace gpu
}  // namespace fused_ops
