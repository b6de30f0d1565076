// Host-side pieces the GroupNorm-family host functions (relu_group_norm.cpp,
// group_norm_mean.cpp) share.
#pragma once

#include "common/checks.h"
#include "common/tensor_utils.h"
#include "norm/norm_kernels.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace fused_ops {
namespace norm {

// Whether a forward on `device` reads `input` in place as (N, HxW, C): a dense channels-last
// tensor (and not also contiguous, which the (N, C, HxW) kernels read directly), on the CPU
// where its kernel reads that layout (cpu_kernel_reads_it: group_norm_mean's, any channel
// count), or on CUDA with a channel count the channels-last kernels handle, 16-byte aligned
// (a Meta tensor, which stands for a fresh allocation in the debug queries, counts as aligned).
inline bool reads_channels_last(const at::Tensor& input, c10::Device device,
                                bool cpu_kernel_reads_it) {
  if (input.is_contiguous()) {
    return false;
  }
  const bool dense_channels_last =
      (input.dim() == 5 && input.is_contiguous(at::MemoryFormat::ChannelsLast3d)) ||
      (input.dim() == 4 && input.is_contiguous(at::MemoryFormat::ChannelsLast));
  if (!dense_channels_last) {
    return false;
  }
  if (device.is_cpu()) {
    return cpu_kernel_reads_it;
  }
#ifdef FUSED_OPS_WITH_CUDA
  return device.is_cuda() &&
         channels_last_norm_cuda_supported(input.size(1), input.element_size()) &&
         (input.is_meta() || data_is_16_byte_aligned(input));
#else
  return false;
#endif
}

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
      allocate_norm_grads(input, shape.C, t.weight.defined(), output_mask, grad_input_format);
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
