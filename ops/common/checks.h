// Argument checks and shape inference shared by every backend (CPU, CUDA, Meta).
//
// Each operator validates its arguments here, once, so that all backends accept and reject
// exactly the same inputs with the same messages, and the Meta kernels (which torch.compile
// traces through) infer exactly the shapes the real kernels produce. The checks work on
// symbolic sizes (c10::SymInt), which are concrete for real tensors: one host function per
// operator serves every backend, Meta included, with dynamic shapes too.
#pragma once

#include "common/group_norm_shape.h"

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>

#include <array>
#include <cstdint>
#include <vector>

namespace fused_ops {

using SymGroupNormShape = GroupNormShapeT<c10::SymInt>;

// The concrete sizes of a shape checked on real (non-meta) tensors.
GroupNormShape concrete(const SymGroupNormShape& shape);

// Checks a GroupNorm-family call: input of rank >= 2 and a floating dtype, C divisible by
// num_groups, weight/bias of shape (C,) with the input's dtype and device, eps >= 0, and
// non-empty spatial dimensions (as torch.nn.functional.group_norm requires).
SymGroupNormShape check_group_norm_args(const char* op, const at::Tensor& input, int64_t num_groups,
                                        const c10::optional<at::Tensor>& weight,
                                        const c10::optional<at::Tensor>& bias, double eps);

// Checks the tensors handed to a GroupNorm-family backward: grad_output (of shape
// `grad_shape`, the input's dtype and device) and the saved statistics, mean and rstd of
// shape (N, G) and, where given, channel_mean of shape (N, C), all of stats_dtype(input).
void check_group_norm_backward_args(const char* op, const at::Tensor& grad_output,
                                    c10::SymIntArrayRef grad_shape, const at::Tensor& input,
                                    const SymGroupNormShape& shape, const at::Tensor& mean,
                                    const at::Tensor& rstd,
                                    const at::Tensor* channel_mean = nullptr);

// dtype in which statistics are computed and saved: float for float/half/bfloat16 inputs,
// double for double inputs.
at::ScalarType stats_dtype(at::ScalarType input_dtype);

// Parameters of a 3-d convolution, three spatial entries each.
struct Conv3dParams {
  std::array<int64_t, 3> stride;
  std::array<int64_t, 3> padding;
  std::array<int64_t, 3> output_padding;  // zeros for a forward convolution
  std::array<int64_t, 3> dilation;
  int64_t groups;
  bool transposed;
};

// Builds Conv3dParams from an operator's int[3] arguments, checking their lengths.
Conv3dParams make_conv3d_params(const char* op, at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef output_padding, at::IntArrayRef dilation,
                                int64_t groups, bool transposed);

// Checks a Conv3d / ConvTranspose3d call as torch.nn.functional.conv3d / conv_transpose3d
// would (with the batch dimension required) and returns the convolution's output shape
// (N, C_out, D_out, H_out, W_out).
std::vector<c10::SymInt> check_conv3d_args(const char* op, const at::Tensor& input,
                                           const at::Tensor& weight,
                                           const c10::optional<at::Tensor>& bias,
                                           const Conv3dParams& params);

// The shapes a fused convolution + GroupNorm call works on: the convolution's output
// (N, C_out, D_out, H_out, W_out), and that output as a GroupNorm problem.
struct ConvGroupNormShapes {
  std::vector<c10::SymInt> conv_output;
  SymGroupNormShape group_norm;
};

// Checks a fused convolution + GroupNorm call: the convolution as check_conv3d_args does,
// then GroupNorm's num_groups, gn_weight, gn_bias and eps against the convolution's output
// channels.
ConvGroupNormShapes check_conv_group_norm_args(const char* op, const at::Tensor& input,
                                               const at::Tensor& weight,
                                               const c10::optional<at::Tensor>& conv_bias,
                                               const Conv3dParams& params, int64_t num_groups,
                                               const c10::optional<at::Tensor>& gn_weight,
                                               const c10::optional<at::Tensor>& gn_bias,
                                               double eps);

// Checks that `tensor` (when defined) is on `reference`'s device and has its dtype.
void check_same_device_and_dtype(const char* op, const char* name, const at::Tensor& tensor,
                                 const char* reference_name, const at::Tensor& reference);

}  // namespace fused_ops
