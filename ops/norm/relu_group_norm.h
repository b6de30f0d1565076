// fused::relu_group_norm: y = group_norm(relu(x)), for x of shape (N, C, *).
//
// One host function per direction serves every backend (CPU, CUDA and Meta): argument checks
// (common/checks.h), allocation of the outputs, the empty-input exit, then the kernel of the
// input's device (norm_kernels.h: relu_group_norm_cpu.cpp, relu_group_norm_cuda.cu). Inputs
// are made contiguous (which also covers other strided inputs), except that the CUDA forward
// reads a dense channels-last input in place where its channel count allows
// (relu_group_norm_channels_last_cuda.cu); outputs are contiguous.
//
// Forward returns (output, mean, rstd); mean and rstd have shape (N, G) and dtype
// stats_dtype(input), and are the statistics of relu(x) that backward needs.
// Backward takes the pre-ReLU input (the ReLU mask is recomputed from it) and returns
// (grad_input, grad_weight, grad_bias), each undefined where output_mask is false.
#pragma once

#include "common/checks.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <string>
#include <tuple>

namespace fused_ops {
namespace norm {

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_forward(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps);

// The same for arguments that the caller (a conv operator) has checked: `shape` is the
// checked shape of `input`. `channel_moments`, if defined, holds the moments of relu(input)
// per (n, c) already (float64 (N, C, 2): mean, M2; from the split-TF32 convolution that wrote
// input), used where the channels-last CUDA kernel runs (ignored elsewhere). `input_bias`, if
// defined (C entries, input's dtype, contiguous; only where relu_group_norm_runs_channels_last_cuda
// and without channel_moments): y = group_norm(relu(input + input_bias)), a conv bias that the
// convolution left out of input (the pass over the conv output that adds it, saved).
// `input_copy`, if defined (only where relu_group_norm_runs_channels_last_cuda; contiguous, of
// input's sizes and dtype): written with input (+ input_bias) as the normalise pass reads it,
// for a training forward that saves the conv output in the (N, C, ...) layout.
std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_forward_prechecked(
    const at::Tensor& input, const SymGroupNormShape& shape,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias, double eps,
    const at::Tensor& channel_moments = at::Tensor(), const at::Tensor& input_bias = at::Tensor(),
    const at::Tensor& input_copy = at::Tensor());

// Whether the forward of `input` runs the channels-last CUDA kernel (it reads the channels-last
// input in place), which alone takes relu_group_norm_forward_prechecked's input_bias and
// input_copy.
bool relu_group_norm_runs_channels_last_cuda(const at::Tensor& input);

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 3> output_mask);

// The same, for a conv operator whose convolution backward reads NDHWC: with
// grad_input_channels_last, grad_input is channels_last_3d, written so by the kernel (CUDA and
// 5-d inputs only; elsewhere grad_input is contiguous), and with grad_input_tf32_rounded also
// rounded to TF32 (float32 only; for TF32 convolutions: ReluGroupNormBackwardParams). Where
// grad_input_channel_sums is not null (grad_input asked for), it is set to grad_input's sum
// over every dimension but 1, taken before the rounding (a conv bias's gradient; computed by
// the kernel as it writes grad_input channels-last, else by ATen's sum).
std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward_in_layout(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 3> output_mask, bool grad_input_channels_last, bool grad_input_tf32_rounded,
    at::Tensor* grad_input_channel_sums = nullptr);

// The same without grad_input, for a conv operator whose convolutions apply the input gradient's
// formula as they load their operand (conv_kernels.h: ReluGroupNormGradOperand): returns the
// per-(n, c) coefficients (c1, c2, c3) of grad_input = input > 0 ? c1 grad_output + c2 input +
// c3 : 0, float32 (N * C, 3), and the affine gradients asked for by affine_mask (weight, bias).
// Where grad_input_channel_sums is not null it is set to grad_input's sum over every dimension but
// 1, from the sums pass (grad_input is never formed). CUDA float32 only, non-empty input.
std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward_coefficients(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 2> affine_mask, at::Tensor* grad_input_channel_sums);

// The forward kernel that reads `input` on `device`: "relu_group_norm", or
// "relu_group_norm_channels_last" (a channels-last input read in place).
const char* relu_group_norm_kernel_name(const at::Tensor& input, c10::Device device);

// The path of a call with these arguments (relu_group_norm_kernel_name), for the debug query
// fused::_relu_group_norm_path.
std::string relu_group_norm_path(const at::Tensor& input, int64_t num_groups,
                                 const c10::optional<at::Tensor>& weight,
                                 const c10::optional<at::Tensor>& bias, double eps);

// The public operator: the forward's output alone.
at::Tensor relu_group_norm(const at::Tensor& input, int64_t num_groups,
                           const c10::optional<at::Tensor>& weight,
                           const c10::optional<at::Tensor>& bias, double eps);

}  // namespace norm
}  // namespace fused_ops
