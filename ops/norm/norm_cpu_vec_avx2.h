// The AVX2 build of the GroupNorm-family RowOps (norm_cpu_vec_avx2.cpp), where the compiler
// can make one: GCC on x86-64 (FUSED_OPS_NORM_CPU_AVX2). row_ops() (norm_cpu_vec.cpp) decides
// whether the CPU runs it.
#pragma once

#include "norm/norm_cpu_utils.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define FUSED_OPS_NORM_CPU_AVX2 1
#else
#define FUSED_OPS_NORM_CPU_AVX2 0
#endif

namespace fused_ops {
namespace norm {
namespace cpu {

#if FUSED_OPS_NORM_CPU_AVX2
template <typename scalar_t>
RowOps<scalar_t> avx2_row_ops();
#endif

}  // namespace cpu
}  // namespace norm
}  // namespace fused_ops
