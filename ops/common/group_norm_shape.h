// The sizes of a GroupNorm problem: an input of rank >= 2 viewed as (N, C, HxW) with G groups
// of C / G channels. Plain C++ (kernels take GroupNormShape), templated on the size type so
// that the checks (checks.h) produce symbolic sizes (c10::SymInt) for the Meta kernels too.
#pragma once

#include <cstdint>

namespace fused_ops {

template <typename Int>
struct GroupNormShapeT {
  Int N;
  Int C;
  int64_t G;  // number of groups
  Int HxW;    // product of the spatial sizes
  Int channels_per_group() const { return C / G; }
  Int group_size() const { return (C / G) * HxW; }  // elements per (n, g)
};
using GroupNormShape = GroupNormShapeT<int64_t>;

}  // namespace fused_ops
