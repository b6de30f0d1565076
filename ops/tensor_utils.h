// Small helpers for handing optional tensors to raw-pointer kernels.
#pragma once

#include "checks.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <array>
#include <tuple>

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

// An uninitialised (rows, cols) statistics tensor for `input`: stats_dtype(input), its device.
inline at::Tensor empty_stats(const at::Tensor& input, int64_t rows, int64_t cols) {
  return at::empty({rows, cols}, input.options().dtype(stats_dtype(input.scalar_type())));
}

// The (grad_input, grad_weight, grad_bias) a GroupNorm-family backward writes, as output_mask
// asks: grad_input shaped like the (contiguous) input, grad_weight (only with a weight) and
// grad_bias zero-filled (C,) (zero is also their value for an empty batch).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> allocate_norm_grads(
    const at::Tensor& input, int64_t C, bool has_weight, std::array<bool, 3> output_mask) {
  return {output_mask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor(),
          output_mask[1] && has_weight ? at::zeros({C}, input.options()) : at::Tensor(),
          output_mask[2] ? at::zeros({C}, input.options()) : at::Tensor()};
}

}  // namespace fused_ops
