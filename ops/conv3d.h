// The convolution stage of the fused conv operators, through ATen (cuDNN on CUDA, oneDNN or
// ATen's own kernels on the CPU). It follows torch.backends.cudnn.allow_tf32 exactly as
// torch.nn.Conv3d does, because it is the same ATen convolution.
#pragma once

#include "checks.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace fused_ops {

// Runs the (transposed or forward) 3-d convolution described by `params`. Arguments must
// already have passed check_conv3d_args. With `channels_last_ok`, the caller accepts an
// output in channels_last_3d layout (NDHWC), which run_conv3d returns where cuDNN computes it
// faster (see conv3d.cpp); otherwise the output is in the layout ATen picks.
at::Tensor run_conv3d(const at::Tensor& input, const at::Tensor& weight,
                      const c10::optional<at::Tensor>& bias, const Conv3dParams& params,
                      bool channels_last_ok = false);

// Gradients of run_conv3d's (grad_input, grad_weight, grad_bias) given the gradient of its
// output, each undefined where output_mask is false (grad_bias also when has_bias is false).
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv3d_backward(
    const at::Tensor& grad_conv_output, const at::Tensor& input, const at::Tensor& weight,
    bool has_bias, const Conv3dParams& params, std::array<bool, 3> output_mask);

// Whether run_conv3d computes this transposed convolution as a forward one (see conv3d.cpp).
bool transposed_conv_runs_as_forward(const at::Tensor& input, const at::Tensor& weight,
                                     const Conv3dParams& params);

}  // namespace fused_ops
