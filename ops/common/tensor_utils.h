// Host-side helpers of the operators' host functions: handing (optional) tensors to kernels,
// and allocating outputs with symbolic sizes, so that one allocation serves the real
// backends and the Meta one.
#pragma once

#include "common/checks.h"
#include "common/cpu_output_memory.h"
#include "common/kernel_types.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstdint>
#include <tuple>

namespace fused_ops {

// The contiguous tensor held by `t`, or an undefined tensor when there is none.
inline at::Tensor contiguous_or_undefined(const c10::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? t->contiguous() : at::Tensor();
}

inline const void* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr() : nullptr;
}

inline void* mutable_data_or_null(const at::Tensor& t) {
  return t.defined() ? t.mutable_data_ptr() : nullptr;
}

// Whether t's data starts on a 16-byte boundary, as vectorised (128-bit) kernels need.
inline bool data_is_16_byte_aligned(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0;
}

// The kernels' name of a (checked: floating) dtype.
inline ScalarKind scalar_kind(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ScalarKind::kFloat;
    case at::kDouble:
      return ScalarKind::kDouble;
    case at::kHalf:
      return ScalarKind::kHalf;
    case at::kBFloat16:
      return ScalarKind::kBFloat16;
    default:
      TORCH_CHECK(false, "fused_ops: unsupported dtype ", t);
  }
}

// An uninitialised (rows, cols) statistics tensor for `input`: stats_dtype(input), its device.
inline at::Tensor empty_stats(const at::Tensor& input, const c10::SymInt& rows,
                              const c10::SymInt& cols) {
  return at::empty_symint({rows, cols}, input.options().dtype(stats_dtype(input.scalar_type())));
}

// The (grad_input, grad_weight, grad_bias) a GroupNorm-family backward writes, as output_mask
// asks: grad_input shaped like the input in `grad_input_format` (contiguous: empty_output_like),
// grad_weight (only with a weight) and grad_bias zero-filled (C,) (zero is also their value
// for an empty batch).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> allocate_norm_grads(
    const at::Tensor& input, const c10::SymInt& C, bool has_weight, std::array<bool, 3> output_mask,
    at::MemoryFormat grad_input_format) {
  const auto empty_grad_input = [&] {
    return grad_input_format == at::MemoryFormat::Contiguous
               ? empty_output_like(input)
               : at::empty_symint(input.sym_sizes(),
                                  input.options().memory_format(grad_input_format));
  };
  return {output_mask[0] ? empty_grad_input() : at::Tensor(),
          output_mask[1] && has_weight ? at::zeros_symint({C}, input.options()) : at::Tensor(),
          output_mask[2] ? at::zeros_symint({C}, input.options()) : at::Tensor()};
}

}  // namespace fused_ops
