// The tensor memory accelerator's tiled copies and the mbarriers they complete on, shared by the
// kernels that use them (the wgmma convolutions, the one-pass Conv3d forward): device helpers
// (their instructions need sm_90; the callers compile them only for it), and the host side of
// the tensor maps (the driver's encoder, reached through the runtime: the library does not link
// the driver).
#pragma once

#include <cuda.h>  // CUtensorMap (the types only)
#include <cuda_runtime.h>

#include <array>
#include <cstdint>

namespace fused_ops {
namespace gpu {

// mbarriers (shared memory, 8 bytes each).
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Orders the initializing thread's mbarrier_init before later uses by the copy engine (the
// async proxy); the other threads see them after a barrier.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// An arrival that also expects `bytes` more of asynchronous copies (bulk or tensor-map ones) to
// complete on the barrier before its phase does.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// The tiled copy of the tensor memory accelerator: the box of `map` whose corner is at
// coordinates (c0 .. c4) (innermost first) into shared memory at dst, zeros outside the tensor;
// completes on `bar`.
__device__ __forceinline__ void tiled_copy_to_shared_5d(uint32_t dst, const CUtensorMap* map,
                                                        int32_t c0, int32_t c1, int32_t c2,
                                                        int32_t c3, int32_t c4, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// The tiled copy of the tensor memory accelerator into a 3-d map (tiled_copy_to_shared_5d's
// companion): the box whose corner is at (c0, c1, c2), innermost first, into shared memory at
// dst, zeros outside the tensor; completes on `bar`.
__device__ __forceinline__ void tiled_copy_to_shared_3d(uint32_t dst, const CUtensorMap* map,
                                                        int32_t c0, int32_t c1, int32_t c2,
                                                        uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// The byte strides of dims 1 .. kRank - 1 of a dense float32 tensor of `dims` (innermost first),
// as the driver's tensor-map encoders take them.
template <int kRank>
std::array<cuuint64_t, kRank - 1> dense_float_strides(const cuuint64_t (&dims)[kRank]) {
  std::array<cuuint64_t, kRank - 1> strides{};
  cuuint64_t bytes = 4;
  for (int i = 0; i + 1 < kRank; ++i) {
    bytes *= dims[i];
    strides[i] = bytes;
  }
  return strides;
}

// The driver function `name` (as of CUDA 12.0), reached through the runtime (the library does
// not link the driver); null where the driver lacks it.
inline void* driver_function(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return fn;
}

// The driver's cuTensorMapEncodeTiled (driver_function); null where the driver lacks it.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline EncodeTiled encode_tiled() {
  static const EncodeTiled encode =
      reinterpret_cast<EncodeTiled>(driver_function("cuTensorMapEncodeTiled"));
  return encode;
}

}  // namespace gpu
}  // namespace fused_ops
