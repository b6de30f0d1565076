// Rounding a float32 to TF32 on the CUDA cores, for data that tensor cores will read as TF32
// (which would otherwise drop the low bits: a bias toward zero). nvcc-only header.
#pragma once

#include <cstdint>

namespace fused_ops {
namespace gpu {

// v rounded to the nearest TF32 value (10 mantissa bits), ties to even, as cvt.rn.tf32.f32
// (integer operations: every architecture the library is built for); infinities and NaN as they
// are.
__device__ __forceinline__ float tf32_rounded(float v) {
  uint32_t bits = __float_as_uint(v);
  if ((bits & 0x7f800000u) != 0x7f800000u) {
    bits += 0xfffu + ((bits >> 13) & 1u);
    bits &= ~0x1fffu;
  }
  return __uint_as_float(bits);
}

}  // namespace gpu
}  // namespace fused_ops
