// The kernels of the GroupNorm family (relu_group_norm, group_norm_mean): their plain
// parameter structs and their per-device entry points. Plain C++ (no torch, no CUDA types):
// included by the host functions (relu_group_norm.cpp, group_norm_mean.cpp), the CPU kernels
// (*_cpu.cpp) and the CUDA kernels (*_cuda.cu).
//
// Conventions of every struct: an input of rank >= 2 viewed as (N, C, HxW) with G groups of
// C / G channels; tensors contiguous (NCHW...), except where a struct says otherwise; data
// pointers of `dtype`, statistics of float (double for double data); weight and bias of C
// entries, or null (then 1 and 0); outputs that are null are not written. Sizes are non-empty
// (the host functions return before calling a kernel on an empty input).
#pragma once

#include "common/group_norm_shape.h"
#include "common/kernel_types.h"
#include "norm/group_norm_math.h"

#include <cstdint>

namespace fused_ops {
namespace norm {

// relu_group_norm forward: y = group_norm(relu(x)); mean, rstd: (N, G) statistics of relu(x).
// With `channels_last` (CUDA kernels only, channel counts of channels_last_norm_cuda_supported),
// x is stored (N, HxW, C); y is (N, C, HxW) always.
struct ReluGroupNormForwardParams {
  ScalarKind dtype;
  GroupNormShape sizes;
  double eps;
  bool channels_last;
  const void* x;
  const void* weight;
  const void* bias;
  void* y;
  void* mean;
  void* rstd;
  // Optional (channels_last CUDA only; null: computed here): per (n, c) the moments of relu(x)
  // over the HxW positions, [N][C], computed already (by the convolution that wrote x, which
  // then need not be read twice).
  const Moments* channel_moments;
  // Optional (channels_last CUDA only; null: none): a per-channel value (C entries, x's dtype)
  // added to x before the ReLU, y = group_norm(relu(x + x_bias)): the conv bias that a
  // convolution left out of the output it wrote (a pass over that output fewer).
  const void* x_bias;
  // Optional (channels_last CUDA only; null: not written): x (x + x_bias with an x_bias) written
  // (N, C, HxW) as the normalise pass reads it: the conv output a training forward saves, in
  // the layout its Meta kernel promises, without a transpose of its own.
  void* x_channels_first;
};

// relu_group_norm backward. x is the pre-ReLU input of the forward, dy the gradient of y;
// dx (shaped like x), dweight and dbias (C entries) are written when non-null (dweight only
// with a weight). With dx_channels_last (CUDA kernels only), dx is stored (N, HxW, C), for a
// convolution's backward that reads NDHWC; x and dy are (N, C, HxW) always.
struct ReluGroupNormBackwardParams {
  ScalarKind dtype;
  GroupNormShape sizes;
  const void* dy;
  const void* x;
  const void* mean;
  const void* rstd;
  const void* weight;
  void* dx;
  void* dweight;
  void* dbias;
  bool dx_channels_last;
  // With dx_channels_last and float32: dx rounded to the nearest TF32 value, for TF32
  // convolutions that read it (whose tensor cores would drop its low bits: a bias toward zero).
  bool dx_tf32_rounded;
  // Optional (with dx_channels_last, CUDA only; null: not written): per channel c, the sum over
  // (n, positions) of dx before any rounding (C entries, x's dtype): the gradient of a conv
  // bias that x includes, without a pass of its own over dx (and dx rounded to TF32 as it is
  // written even where that gradient is asked for).
  void* dx_channel_sums = nullptr;
  // Optional (CUDA, float32; instead of dx, which is then null): the per-(n, c) coefficients
  // (c1, c2, c3) of dx = x > 0 ? c1 dy + c2 x + c3 : 0 (group_norm_math.h:
  // relu_group_norm_input_grad), (N * C, 3) floats, for convolutions that apply them as they load
  // dy and x (conv_kernels.h: ReluGroupNormGradOperand), so that no pass writes dx. With
  // dx_channel_sums, those come from the rows' sums of dy where x > 0, of relu(x) and of x > 0.
  void* dx_coefficients = nullptr;
};

// group_norm_mean forward: out (N) = mean over (c, *) of group_norm(x); mean, rstd: (N, G);
// channel_mean: (N, C). With `channels_last`, x is stored (N, HxW, C) (channels innermost:
// channels_last / channels_last_3d), which the CPU kernel reads for any C and the CUDA kernels
// for the channel counts of channels_last_norm_cuda_supported.
struct GroupNormMeanForwardParams {
  ScalarKind dtype;
  GroupNormShape sizes;
  double eps;
  bool channels_last;
  const void* x;
  const void* weight;
  const void* bias;
  void* out;
  void* mean;
  void* rstd;
  void* channel_mean;
};

// group_norm_mean backward: grad_output has N entries; dx, dweight, dbias as above.
struct GroupNormMeanBackwardParams {
  ScalarKind dtype;
  GroupNormShape sizes;
  const void* grad_output;
  const void* x;
  const void* mean;
  const void* rstd;
  const void* channel_mean;
  const void* weight;
  void* dx;
  void* dweight;
  void* dbias;
};

// CPU kernels (*_cpu.cpp).
void relu_group_norm_forward_cpu(const ReluGroupNormForwardParams& p);
void relu_group_norm_backward_cpu(const ReluGroupNormBackwardParams& p);
void group_norm_mean_forward_cpu(const GroupNormMeanForwardParams& p);
void group_norm_mean_backward_cpu(const GroupNormMeanBackwardParams& p);

// CUDA kernels (*_cuda.cu); defined only in builds with CUDA.
extern const CudaKernel<ReluGroupNormForwardParams> relu_group_norm_forward_cuda;
extern const CudaKernel<ReluGroupNormBackwardParams> relu_group_norm_backward_cuda;
extern const CudaKernel<GroupNormMeanForwardParams> group_norm_mean_forward_cuda;
extern const CudaKernel<GroupNormMeanBackwardParams> group_norm_mean_backward_cuda;

// Whether the CUDA forwards read a channels-last input of C channels of `element_size`-byte
// elements in place (channels_last_moments.cuh and its users).
bool channels_last_norm_cuda_supported(int64_t channels, int64_t element_size);

}  // namespace norm
}  // namespace fused_ops
