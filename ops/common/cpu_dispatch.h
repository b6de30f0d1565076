// Calls a generic CPU kernel with the C++ type of a ScalarKind (float, double, c10::Half,
// c10::BFloat16): dispatch_cpu_scalar(kind, [&](auto tag) { using T = decltype(tag); ... }).
#pragma once

#include "common/kernel_types.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <utility>

namespace fused_ops {

template <typename F>
decltype(auto) dispatch_cpu_scalar(ScalarKind kind, F&& f) {
  return dispatch_scalar_kind<float, double, c10::Half, c10::BFloat16>(kind, std::forward<F>(f));
}

}  // namespace fused_ops
