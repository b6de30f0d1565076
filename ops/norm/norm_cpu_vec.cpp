// The RowOps of the GroupNorm-family CPU kernels (norm_cpu_utils.h): norm_cpu_vec.h compiled
// with the library's default flags, and row_ops(), which hands out the AVX2 build of
// norm_cpu_vec_avx2.cpp instead where the CPU runs it and ATen's own kernels use AVX2 or
// AVX-512 (so that ATEN_CPU_CAPABILITY=default selects this file's build, as it does ATen's).
#define CPU_CAPABILITY DEFAULT

#include "norm/norm_cpu_vec.h"
#include "common/cpu_dispatch.h"
#include "norm/norm_cpu_utils.h"
#include "norm/norm_cpu_vec_avx2.h"

#include <ATen/Version.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <string>

namespace fused_ops {
namespace norm {
namespace cpu {
namespace {

bool use_avx2() {
#if FUSED_OPS_NORM_CPU_AVX2
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))) {
    return false;
  }
  const std::string aten = at::get_cpu_capability();
  return aten == "AVX2" || aten == "AVX512";
#else
  return false;
#endif
}

}  // namespace

template <typename scalar_t>
const RowOps<scalar_t>& row_ops() {
#if FUSED_OPS_NORM_CPU_AVX2
  static const RowOps<scalar_t> ops =
      use_avx2() ? avx2_row_ops<scalar_t>() : DEFAULT::make_row_ops<scalar_t>();
#else
  static const RowOps<scalar_t> ops = DEFAULT::make_row_ops<scalar_t>();
#endif
  return ops;
}

template const RowOps<float>& row_ops<float>();
template const RowOps<double>& row_ops<double>();
template const RowOps<c10::Half>& row_ops<c10::Half>();
template const RowOps<c10::BFloat16>& row_ops<c10::BFloat16>();

}  // namespace cpu
}  // namespace norm
}  // namespace fused_ops
