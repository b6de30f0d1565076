// The convolution stage of the fused conv operators: ATen's (cuDNN on CUDA, oneDNN or ATen's
// own kernels on the CPU) or, for float32 transposed convolutions with TF32 off, our split-TF32
// tensor-core kernels (split_tf32_conv3d.cuh), with the precision and layout policy of
// conv_stage.cpp: each fused operator stays at least as accurate as the modules it replaces,
// under the same precision flags.
#pragma once

#include "common/checks.h"
#include "conv/conv_kernels.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <array>
#include <string>
#include <tuple>

namespace fused_ops {
namespace conv {

// What reads the convolution's output; it selects the policy of conv_stage.cpp.
enum class ConvConsumer {
  kReluGroupNorm,  // conv_transpose3d_relu_group_norm
  kGroupNormMean,  // conv3d_group_norm_mean
};

// How run_conv3d computes a convolution (see conv_stage.cpp); conv_path_name names it for the
// debug queries.
enum class ConvPath {
  kAten,                 // at::convolution, as eager PyTorch runs it
  kAtenFloat32,          // ATen's convolution with float32 products whatever the TF32 flag
  kTransposedAsForward,  // a stride-1 transposed convolution run as a forward one
  // the same, float32 with TF32 off: on our split-TF32 tensor-core kernel (float32-grade)
  kTransposedAsForwardSplitTf32,
};
const char* conv_path_name(ConvPath path);

// The Conv3dShape (conv_kernels.h: the kernels' plain description) of the forward convolution
// `forward` (not transposed) of `input` (N, C_in, D, H, W) into `c_out` channels with the
// kernel sizes of `weight` (its last three); output sizes by the usual formula.
Conv3dShape forward_conv3d_shape(const at::Tensor& input, int64_t c_out, const at::Tensor& weight,
                                 const Conv3dParams& forward);

// The path run_conv3d takes for these arguments (which passed check_conv3d_args) under the
// current precision flags.
ConvPath select_conv_path(const at::Tensor& input, const at::Tensor& weight,
                          const Conv3dParams& params, ConvConsumer consumer);

// Runs the (transposed or forward) 3-d convolution described by `params`, for `consumer`.
// Arguments must already have passed check_conv3d_args. The result has the value of
// torch.nn.functional.conv3d / conv_transpose3d, in the memory format the input suggests
// (contiguous, or channels_last_3d for a channels-last input); its rounding follows the
// policy of conv_stage.cpp.
at::Tensor run_conv3d(const at::Tensor& input, const at::Tensor& weight,
                      const c10::optional<at::Tensor>& bias, const Conv3dParams& params,
                      ConvConsumer consumer);

// The empty tensor run_conv3d returns for an output of `shape` (its dtype, device and memory
// format), for the Meta kernels.
at::Tensor empty_conv_output(const at::Tensor& input, c10::SymIntArrayRef shape);

// Gradients of run_conv3d's (grad_input, grad_weight, grad_bias) given the gradient of its
// output, each undefined where output_mask is false (grad_bias also when has_bias is false);
// grad_input and grad_weight in the memory formats that input and weight suggest. For Meta
// tensors, the empty gradients.
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv3d_backward(
    const at::Tensor& grad_conv_output, const at::Tensor& input, const at::Tensor& weight,
    bool has_bias, const Conv3dParams& params, std::array<bool, 3> output_mask);

// The backward of a fused conv operator: checks the saved conv output against the arguments,
// gets (grad_conv_output, grad_gn_weight, grad_gn_bias) from norm_backward(mask) (the
// GroupNorm part's backward, asked for the first when any convolution gradient is), and adds
// the convolution's gradients: (grad_input, grad_weight, grad_conv_bias, grad_gn_weight,
// grad_gn_bias), each undefined where output_mask is false.
template <typename NormBackward>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> conv_group_norm_backward(
    const char* op, const at::Tensor& input, const at::Tensor& weight,
    const at::Tensor& conv_output, bool has_conv_bias, const Conv3dParams& params,
    std::array<bool, 5> output_mask, const NormBackward& norm_backward) {
  const auto conv_shape = check_conv3d_args(op, input, weight, c10::nullopt, params);
  TORCH_CHECK(conv_output.sym_sizes() == c10::SymIntArrayRef(conv_shape), op,
              ": expected conv_output of shape ", c10::SymIntArrayRef(conv_shape), ", got ",
              conv_output.sym_sizes());
  check_same_device_and_dtype(op, "conv_output", conv_output, "input", input);
  const bool need_conv_grad = output_mask[0] || output_mask[1] || output_mask[2];
  auto [grad_conv_output, grad_gn_weight, grad_gn_bias] =
      norm_backward(std::array<bool, 3>{need_conv_grad, output_mask[3], output_mask[4]});
  auto [grad_input, grad_weight, grad_conv_bias] =
      conv3d_backward(grad_conv_output, input, weight, has_conv_bias, params,
                      {output_mask[0], output_mask[1], output_mask[2]});
  return {grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias};
}

}  // namespace conv
}  // namespace fused_ops
