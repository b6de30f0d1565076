// norm_cpu_vec.h compiled for AVX2 (with FMA and F16C): the RowOps that row_ops()
// (norm_cpu_vec.cpp) hands out on CPUs that have them, without the library as a whole needing
// those instructions.
//
// Everything but the vector code is included before the target switch, so that the inline
// functions this file shares with the rest of the library (c10, the standard library) are
// compiled for the baseline CPU; only the at::vec code (in its namespace AVX2) and this
// file's own loops are compiled for AVX2. This file comes last in FUSED_OPS_SOURCES, so
// that the linker keeps the other files' copy of any inline function they share. (g++ notes
// once that 32-byte vector arguments pass differently without AVX, about an ATen constructor:
// every function taking one is inline here, in namespace AVX2, and the RowOps take none.)
#include "norm/norm_cpu_vec_avx2.h"
#include "common/cpu_dispatch.h"
#include "common/host_device.h"
#include "norm/norm_cpu_utils.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <vector>

#if FUSED_OPS_NORM_CPU_AVX2

#pragma GCC target("avx2,fma,f16c")
// g++ does not define the feature macros for a target pragma in C++; the headers below (ATen's
// AVX2 vectors and the SLEEF declarations they name) test them.
#ifndef __AVX__
#define __AVX__ 1
#endif
#ifndef __AVX2__
#define __AVX2__ 1
#endif
#ifndef __FMA__
#define __FMA__ 1
#endif
#ifndef __F16C__
#define __F16C__ 1
#endif
#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2

#include "norm/norm_cpu_vec.h"

namespace fused_ops {
namespace norm {
namespace cpu {

template <typename scalar_t>
RowOps<scalar_t> avx2_row_ops() {
  return AVX2::make_row_ops<scalar_t>();
}

template RowOps<float> avx2_row_ops<float>();
template RowOps<double> avx2_row_ops<double>();
template RowOps<c10::Half> avx2_row_ops<c10::Half>();
template RowOps<c10::BFloat16> avx2_row_ops<c10::BFloat16>();

}  // namespace cpu
}  // namespace norm
}  // namespace fused_ops

#endif  // FUSED_OPS_NORM_CPU_AVX2
