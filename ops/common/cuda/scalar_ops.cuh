// Scalar and vector types of the CUDA kernels (nvcc only: no ATen, no torch).
//
//   * ScalarOps<T>: conversions between the storage types (float, double, __half,
//     __nv_bfloat16) and the arithmetic types: `acc_t` (float, or double for double) for the
//     elementwise passes, double for every statistic;
//   * dispatch_cuda_scalar: calls a generic launcher with the CUDA type of a ScalarKind;
//   * AlignedVector<T, kN>: 16 bytes of T, loaded and stored with one 128-bit access, and
//     vector_to_acc, which widens one to acc_t.
#pragma once

#include "common/host_device.h"
#include "common/kernel_types.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace fused_ops {
namespace gpu {

template <typename T>
struct ScalarOps;

template <>
struct ScalarOps<float> {
  using acc_t = float;
  static constexpr int kVecElems = 4;
  static __device__ __forceinline__ float to_acc(float v) { return v; }
  static __device__ __forceinline__ double to_double(float v) { return static_cast<double>(v); }
  static __device__ __forceinline__ float from_acc(float v) { return v; }
  static __device__ __forceinline__ float from_double(double v) { return static_cast<float>(v); }
};

template <>
struct ScalarOps<double> {
  using acc_t = double;
  static constexpr int kVecElems = 2;
  static __device__ __forceinline__ double to_acc(double v) { return v; }
  static __device__ __forceinline__ double to_double(double v) { return v; }
  static __device__ __forceinline__ double from_acc(double v) { return v; }
  static __device__ __forceinline__ double from_double(double v) { return v; }
};

// Reduced types: arithmetic in float, rounding to nearest even on the way back (as
// c10::Half / c10::BFloat16 do); from double through float, as static_cast<at::Half>(double).
template <>
struct ScalarOps<__half> {
  using acc_t = float;
  static constexpr int kVecElems = 8;
  static __device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
  static __device__ __forceinline__ double to_double(__half v) {
    return static_cast<double>(__half2float(v));
  }
  static __device__ __forceinline__ __half from_acc(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ __half from_double(double v) {
    return __float2half_rn(static_cast<float>(v));
  }
};

template <>
struct ScalarOps<__nv_bfloat16> {
  using acc_t = float;
  static constexpr int kVecElems = 8;
  static __device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ double to_double(__nv_bfloat16 v) {
    return static_cast<double>(__bfloat162float(v));
  }
  static __device__ __forceinline__ __nv_bfloat16 from_acc(float v) {
    return __float2bfloat16_rn(v);
  }
  static __device__ __forceinline__ __nv_bfloat16 from_double(double v) {
    return __float2bfloat16_rn(static_cast<float>(v));
  }
};

// Calls f with a value of the CUDA type of `kind` (float, double, __half, __nv_bfloat16):
// dispatch_cuda_scalar(kind, [&](auto tag) { using T = decltype(tag); return launch<T>(...); }).
template <typename F>
decltype(auto) dispatch_cuda_scalar(ScalarKind kind, F&& f) {
  return dispatch_scalar_kind<float, double, __half, __nv_bfloat16>(kind, static_cast<F&&>(f));
}

// ---------------------------------------------------------------------------------------
// 16-byte vectors.

// kN values of T in one aligned 16-byte (or, for kN = 1, sizeof(T)-byte) access.
template <typename T, int kN>
struct alignas(sizeof(T) * kN) AlignedVector {
  T val[kN];
};

// Loads vector `index` (in units of kN elements) of `base`; base must be aligned to
// sizeof(T) * kN bytes, which the host checks before it picks the vectorised kernel.
template <typename T, int kN>
__device__ __forceinline__ AlignedVector<T, kN> load_vector(const T* __restrict__ base,
                                                            int64_t index) {
  return reinterpret_cast<const AlignedVector<T, kN>*>(base)[index];
}

template <typename T, int kN>
__device__ __forceinline__ void store_vector(T* __restrict__ base, int64_t index,
                                             const AlignedVector<T, kN>& v) {
  reinterpret_cast<AlignedVector<T, kN>*>(base)[index] = v;
}

// The kN values of `v` in ScalarOps<T>::acc_t. Reduced types convert two values per 32-bit
// word: bfloat16 -> float is a shift or a mask of the word (no byte permutes, which otherwise
// double the live registers of the 128-bit kernels), and half pairs use one conversion.
template <typename T, int kN>
__device__ __forceinline__ void vector_to_acc(const AlignedVector<T, kN>& v,
                                              typename ScalarOps<T>::acc_t (&out)[kN]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && kN % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      uint32_t word;
      memcpy(&word, &v.val[2 * i], sizeof(word));
      out[2 * i] = __uint_as_float(word << 16);              // low half: element 2i
      out[2 * i + 1] = __uint_as_float(word & 0xffff0000u);  // high half: element 2i + 1
    }
  } else if constexpr (std::is_same_v<T, __half> && kN % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      __half2 pair;
      memcpy(&pair, &v.val[2 * i], sizeof(pair));
      const float2 f = __half22float2(pair);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int e = 0; e < kN; ++e) {
      out[e] = ScalarOps<T>::to_acc(v.val[e]);
    }
  }
}

}  // namespace gpu
}  // namespace fused_ops
