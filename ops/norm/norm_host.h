// Host-side pieces the GroupNorm-family host functions (relu_group_norm.cpp,
// group_norm_mean.cpp) share.
#pragma once

#include "common/checks.h"
#include "common/tensor_utils.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace fused_ops {
namespace norm {

// What a backward's kernel reads (contiguous) and writes, once its arguments are checked.
struct NormBackwardTensors {
  at::Tensor grad_output, input, weight, mean, rstd;  // contiguous (weight may be undefined)
  at::Tensor grad_input, grad_weight, grad_bias;      // undefined where not asked for
  // Whether a kernel must run: a real, non-empty input and some gradient asked for.
  bool run_kernel = false;

  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads() const {
    return {grad_input, grad_weight, grad_bias};
  }
};

inline NormBackwardTensors prepare_norm_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const c10::optional<at::Tensor>& weight, const SymGroupNormShape& shape,
    std::array<bool, 3> output_mask,
    at::MemoryFormat grad_input_format = at::MemoryFormat::Contiguous) {
  NormBackwardTensors t;
  t.weight = contiguous_or_undefined(weight);
  std::tie(t.grad_input, t.grad_weight, t.grad_bias) =
      allocate_norm_grads(input, shape.C, t.weight.defined(), output_mask);
  if (t.grad_input.defined() && grad_input_format != at::MemoryFormat::Contiguous) {
    t.grad_input =
        at::empty_symint(input.sym_sizes(), input.options().memory_format(grad_input_format));
  }
  t.run_kernel = !input.is_meta() && input.numel() > 0 &&
                 (t.grad_input.defined() || t.grad_weight.defined() || t.grad_bias.defined());
  if (t.run_kernel) {
    t.grad_output = grad_output.contiguous();
    t.input = input.contiguous();
    t.mean = mean.contiguous();
    t.rstd = rstd.contiguous();
  }
  return t;
}

}  // namespace norm
}  // namespace fused_ops
