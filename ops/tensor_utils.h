// Small helpers for handing optional tensors to raw-pointer kernels.
#pragma once

#include <ATen/core/Tensor.h>

namespace fused_ops {

// The contiguous tensor held by `t`, or an undefined tensor when there is none.
inline at::Tensor contiguous_or_undefined(const c10::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? t->contiguous() : at::Tensor();
}

template <typename T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}

template <typename T>
T* mutable_data_or_null(const at::Tensor& t) {
  return t.defined() ? t.mutable_data_ptr<T>() : nullptr;
}

}  // namespace fused_ops
