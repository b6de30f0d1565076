// The convolution stage of the fused conv operators, through ATen (cuDNN on CUDA, oneDNN or
// ATen's own kernels on the CPU), with a precision policy that keeps each fused operator at
// least as accurate as the modules it replaces under the same flags.
//
// conv3d_group_norm_mean, float32: the convolution always keeps float32 products, even with
// torch.backends.cudnn.allow_tf32 on (PyTorch's default). Its output is one mean per sample
// of a GroupNorm over the conv output; with non-negative inputs (torch.rand, what users
// pass) the conv output carries a large common offset, so TF32 rounding of the products
// survives GroupNorm and the mean: measured on an H100 at (128, 3, 24, 32, 32), Conv3d 3->24
// k3, a TF32 NDHWC convolution gave 4.4e-3 relative error against float64 where eager's
// NCDHW module (whose cuDNN kernel for 3 input channels does not use TF32) gave 2.9e-6. So
// the convolution runs as ATen's with allow_tf32 = false, in the input's layout.
// Other dtypes run as eager does.
//
// conv_transpose3d_relu_group_norm: a stride-1 transposed convolution equals a forward
// convolution of the same input with the kernel's taps flipped, its in/out channel axes
// swapped (per conv group), and padding (k - 1) * dilation - padding on every side. cuDNN's
// forward kernels are several times faster than its transposed (data-gradient) kernels on
// the headline shape. Measured on an H100 (cuDNN 9.19), ConvTranspose3d 64->128, k=3 on
// (16, 64, 32^3): 1.18 ms as a forward convolution vs 2.81 ms as written with TF32, 6.4 ms
// vs 18.4 ms in full float32. But in full float32 the forward algorithms cuDNN picks for it
// are less accurate: max error 2.1e-6 of the largest output against float64, vs 3.0e-7 as
// written, which is more than "within atol=rtol=1e-5 of eager" allows after GroupNorm. So
// the rewrite is used where TF32 (or half / bfloat16) rounding dominates anyway: on CUDA,
// for float with TF32 allowed, or half / bfloat16 inputs; with stride 1, no output_padding,
// and padding <= (k - 1) * dilation (the forward padding must not be negative). It computes
// the same function; only the rounding differs. With float32, its backward runs in NDHWC too
// (transposed_as_forward_backward: cuDNN's NDHWC gradient kernels are faster than its NCDHW
// ones, whose inputs it transposes itself, once per gradient); on sm_90 both gradients run our
// wgmma kernels with TF32 products instead (the weight gradient reading x NCDHW, the input
// gradient written NCDHW by its epilogue).
//
// With TF32 off (float32 products wanted), the rewrite runs on our own split-TF32 tensor-core
// kernels (split_tf32_conv3d.cuh: float32-grade products at several times cuDNN's float32
// speed) where they apply: one conv group, C_in and C_out multiples of 4, a build with CUTLASS,
// a GPU of compute capability 8.0+. Its backward too: the input gradient as a forward
// convolution of the output gradient, the weight gradient as the rewrite's. They compute NDHWC
// (the wgmma kernel writes an NCDHW input's gradient NCDHW itself: no transpose after);
// results are returned in the layouts of the tensors they belong to, like every path's, except
// the conv output of an operator's inference forward, which only its GroupNorm reads: there
// both float32 rewrites leave it NDHWC (run_conv3d's ConvOutputLayout::kAsComputed), which the
// GroupNorm reads in place, and the TF32 one gets an NDHWC input (our transpose) so that cuDNN
// does not transpose its output back (0.22 ms at the headline on an H100, 2026-11-22).
// There, on Hopper, the TF32 rewrite of an NCDHW float32 input may run our wgmma kernel with
// plain TF32 products instead of cuDNN's (tf32_wgmma_emits_relu_moments), x rounded to TF32 by
// the transpose, its epilogue computing the GroupNorm's statistics too (at 0-3% of the
// convolution's time on the 128-channel tiles: split_tf32_wgmma_conv3d.cuh), and the operator's
// whole inference forward pipelined (run_tf32_conv_relu_group_norm;
// split_tf32_wgmma_conv3d_cuda.cu): the convolution in two launches, each transposing x for the
// next and writing the output of the samples completed before it beside its products
// (conv_side_work.cuh). By default where its convolution is long enough to repay the pipeline's
// fixed costs (wgmma_tf32_relu_group_norm_preferred: at the headline on an H200, 2026-11-28,
// 1.108 ms against cuDNN's path's 1.136 in one sweep; on smaller problems cuDNN's path was the
// faster); FUSED_OPS_TF32_WGMMA=1 or 0 forces it on or off (read per call). (Its training
// forward and backward stay cuDNN's: the saved conv output is NCDHW, which cuDNN transposes to
// itself.)
// Elsewhere eager's transposed convolution runs.
//
// On the CPU every convolution is eager's. From 2026-11-26 float32 stride-1 transposed ones ran
// as the forward convolution they equal (oneDNN's forward kernels were as fast or faster,
// 1.0-1.26x), measured as accurate on the shapes tried then; with torch.rand inputs
// (non-negative: a common offset) oneDNN's forward kernels are 2-3x less accurate than its
// transposed ones, e.g. 64 -> 128 k3 on (2, 64, 20^3): 7.0e-7 against 2.5e-7 relative error to
// float64, and the fused operator's output over twice eager's error, outside the numerics
// contract (PyTorch 2.14.1, the 2-core VM of the CPU benchmarks, 2026-11-27). So the CPU runs
// eager's again.
//
// With TF32 allowed, eager's transposed convolution is not always TF32: cuDNN picks per shape
// (benchmarks/cudnn_tf32_survey.py, H100, cuDNN 9.19, 1044 shapes: with 3x3x3 kernels every
// transposed convolution used TF32; with 2x2x2 kernels none did, with 1x1x1 about half), and
// the rewrite is TF32 for most shapes. Where eager stays float32 and the rewrite is TF32,
// the fused operator would be ~1000x less accurate than the module it replaces (seen:
// ConvTranspose3d 6->12, k2: 1.5e-4 vs 1.1e-7 relative error). So with float32 the rewrite
// runs only in the family the survey found eager TF32 throughout: 3x3x3 kernels, stride 1,
// no padding or output padding, dilation 1, one conv group (the headline's shape); every
// other float32 transposed convolution runs as eager's (same kernels, same rounding).
#include "conv/conv_stage.h"

#include "common/layout_kernels.h"
#include "common/run_kernel.h"
#include "common/tensor_utils.h"
#include "conv/conv_kernels.h"
#include "norm/norm_kernels.h"

#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_convolution.h>
#include <ATen/ops/conv3d.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cstdint>

namespace fused_ops {
namespace conv {
namespace {

// `t`, copied if its data is not 16-byte aligned. Vectorised kernels assume it: the split-TF32
// kernel, and cuDNN's, some of which read a misaligned channels-last tensor out of bounds
// (seen with its float32 weight-gradient kernel on an H100) instead of refusing it.
at::Tensor aligned_16(const at::Tensor& t) {
  return !t.defined() || data_is_16_byte_aligned(t) ? t : t.clone();
}

bool is_half_type(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

// A stride-1 transposed convolution that the forward rewrite can express: no output padding,
// padding <= (k - 1) * dilation (the forward padding must not be negative).
bool rewritable_as_forward(const at::Tensor& weight, const Conv3dParams& p) {
  for (int i = 0; i < 3; ++i) {
    const int64_t reach = (weight.size(i + 2) - 1) * p.dilation[i];
    if (p.stride[i] != 1 || p.output_padding[i] != 0 || p.padding[i] > reach) {
      return false;
    }
  }
  return true;
}

// The float32 transposed convolutions where eager's cuDNN kernel uses TF32 when allowed (see
// the top of this file).
bool eager_transposed_is_tf32(const at::Tensor& weight, const Conv3dParams& p) {
  for (int i = 0; i < 3; ++i) {
    if (weight.size(i + 2) != 3 || p.stride[i] != 1 || p.padding[i] != 0 ||
        p.output_padding[i] != 0 || p.dilation[i] != 1) {
      return false;
    }
  }
  return p.groups == 1;
}

// The weight of the forward convolution that computes a transposed one: (C_in, C_out/g, k...)
// -> (g, C_in/g, C_out/g, k...) -> (C_out, C_in/g, k...), taps flipped.
at::Tensor forward_weight_of_transposed(const at::Tensor& weight, int64_t groups) {
  const int64_t c_in = weight.size(0);
  const int64_t c_out_per_group = weight.size(1);
  auto k = weight.sizes().slice(2);
  return weight.reshape({groups, c_in / groups, c_out_per_group, k[0], k[1], k[2]})
      .transpose(1, 2)
      .reshape({groups * c_out_per_group, c_in / groups, k[0], k[1], k[2]})
      .flip({2, 3, 4});
}

// The inverse of forward_weight_of_transposed: a tensor shaped like the forward weight
// (C_out, C_in/g, k...) (the rewrite's weight gradient) back to the transposed convolution's
// weight layout `transposed_sizes` (C_in, C_out/g, k...), taps unflipped.
at::Tensor transposed_weight_of_forward(const at::Tensor& forward, int64_t groups,
                                        at::IntArrayRef transposed_sizes) {
  const int64_t c_in = transposed_sizes[0];
  const int64_t c_out_per_group = transposed_sizes[1];
  auto k = transposed_sizes.slice(2);
  return forward.flip({2, 3, 4})
      .reshape({groups, c_out_per_group, c_in / groups, k[0], k[1], k[2]})
      .transpose(1, 2)
      .reshape(transposed_sizes);
}

// Its padding: (k - 1) * dilation - padding per spatial dim.
std::array<int64_t, 3> forward_padding_of_transposed(const at::Tensor& weight,
                                                     const Conv3dParams& p) {
  std::array<int64_t, 3> padding;
  for (int i = 0; i < 3; ++i) {
    padding[i] = (weight.size(i + 2) - 1) * p.dilation[i] - p.padding[i];
  }
  return padding;
}

at::Tensor transposed_as_forward(const at::Tensor& input, const at::Tensor& weight,
                                 const c10::optional<at::Tensor>& bias, const Conv3dParams& p) {
  // The weight in the input's layout: cuDNN would change it to NDHWC itself for an NDHWC input.
  return at::conv3d(
      input,
      forward_weight_of_transposed(weight, p.groups).contiguous(input.suggest_memory_format()),
      bias,
      /*stride=*/{1, 1, 1}, forward_padding_of_transposed(weight, p), p.dilation, p.groups);
}

// The split-TF32 tensor-core convolution (split_tf32_conv3d.cuh) computing a rewritable
// transposed convolution with one conv group, as a forward one: its params with the shape
// set and the pointers null. (Unused in builds without CUDA.)
[[maybe_unused]] Conv3dChannelsLastParams split_tf32_params_of_transposed(const at::Tensor& input,
                                                                          const at::Tensor& weight,
                                                                          const Conv3dParams& p) {
  const Conv3dParams forward{{1, 1, 1},    forward_padding_of_transposed(weight, p),
                             {0, 0, 0},    p.dilation,
                             /*groups=*/1, /*transposed=*/false};
  Conv3dChannelsLastParams params{};
  params.conv = forward_conv3d_shape(input, weight.size(1), weight, forward);
  return params;
}

// The forward convolution that computes the input gradient of the transposed convolution whose
// forward rewrite is `forward`: dx[n, ci, i] = sum over (co, t) of
// dy[n, co, i - padding + t * dilation] * weight[ci, co, t], a convolution of dy (C_out
// channels) with the transposed convolution's own padding, taps not flipped. (Unused in builds
// without CUDA.)
[[maybe_unused]] Conv3dShape split_tf32_input_grad_shape(const Conv3dShape& forward,
                                                         const Conv3dParams& p) {
  Conv3dShape s = forward;
  s.C_in = forward.C_out;
  s.C_out = forward.C_in;
  s.D = forward.Do, s.H = forward.Ho, s.W = forward.Wo;
  s.Do = forward.D, s.Ho = forward.H, s.Wo = forward.W;
  for (int i = 0; i < 3; ++i) {
    s.padding[i] = p.padding[i];
  }
  return s;
}

bool split_tf32_runs_transposed(const at::Tensor& input, const at::Tensor& weight,
                                const Conv3dParams& p) {
#ifdef FUSED_OPS_WITH_CUTLASS
  if (p.groups != 1 || input.numel() == 0 || weight.numel() == 0) {
    return false;
  }
  const Conv3dShape forward = split_tf32_params_of_transposed(input, weight, p).conv;
  const Conv3dShape input_grad = split_tf32_input_grad_shape(forward, p);
  return split_tf32_conv3d_cuda.supported(forward) && split_tf32_conv3d_cuda.supported(input_grad);
#else
  return false;
#endif
}

// A 5-d float32 CUDA tensor in `format` (contiguous or channels_last_3d): between those two
// layouts by our tiled transpose (layout_kernels.h: about twice as fast as ATen's strided
// copy), otherwise as .contiguous(format) does it.
at::Tensor float_cuda_in_format(const at::Tensor& t, at::MemoryFormat format) {
#ifdef FUSED_OPS_WITH_CUDA
  const bool to_channels_last = format == at::MemoryFormat::ChannelsLast3d;
  const auto source =
      to_channels_last ? at::MemoryFormat::Contiguous : at::MemoryFormat::ChannelsLast3d;
  if (!t.is_contiguous(format) && t.dim() == 5 && t.is_contiguous(source) &&
      (to_channels_last || format == at::MemoryFormat::Contiguous)) {
    at::Tensor out = at::empty(t.sizes(), t.options().memory_format(format));
    const int64_t batches = t.size(0), channels = t.size(1);
    const int64_t spatial = t.size(2) * t.size(3) * t.size(4);
    const BatchedTransposeParams params{t.const_data_ptr<float>(), out.mutable_data_ptr<float>(),
                                        batches, to_channels_last ? channels : spatial,
                                        to_channels_last ? spatial : channels};
    run_cuda_kernel("fused (layout change)", t, params, batched_transpose_cuda);
    return out;
  }
#endif
  return t.contiguous(format);
}

// Whether transposed_as_forward_split_tf32 can compute the moments of relu(y) with y.
bool split_tf32_emits_relu_moments(const at::Tensor& input, const at::Tensor& weight,
                                   const Conv3dParams& p) {
#ifdef FUSED_OPS_WITH_CUTLASS
  // (and where the GroupNorm reads the output in place: the kernel that takes the moments)
  const Conv3dShape s = split_tf32_params_of_transposed(input, weight, p).conv;
  return norm::channels_last_norm_cuda_supported(s.C_out, sizeof(float)) &&
         split_tf32_conv3d_cuda.forward_relu_moments_supported(s);
#else
  return false;
#endif
}

// Whether the TF32 rewrite (kTransposedAsForward) of this float32 convolution, in a
// ReLU -> GroupNorm inference forward, runs pipelined on our wgmma kernel with TF32 products
// and the GroupNorm's statistics (run_tf32_conv_relu_group_norm): an NCDHW input (its transpose
// rounds x to TF32), the kernel's TF32 tiles on the current device and chosen for the shape
// (tf32_forward_chosen: see the top of the file), and a GroupNorm kernel that reads the output
// in place.
bool tf32_wgmma_emits_relu_moments(const at::Tensor& input, const at::Tensor& weight,
                                   const Conv3dParams& p) {
#ifdef FUSED_OPS_WITH_CUTLASS
  if (input.scalar_type() != at::kFloat || p.groups != 1 ||
      !input.is_contiguous(at::MemoryFormat::Contiguous)) {
    return false;
  }
  const Conv3dShape s = split_tf32_params_of_transposed(input, weight, p).conv;
  return norm::channels_last_norm_cuda_supported(s.C_out, sizeof(float)) &&
         split_tf32_conv3d_cuda.tf32_forward_chosen(s);
#else
  return false;
#endif
}

// With relu_channel_moments (where split_tf32_emits_relu_moments): also the moments of relu(y)
// per (n, c), float64 (N, C_out, 2), from the kernel's epilogue.
at::Tensor transposed_as_forward_split_tf32(const at::Tensor& input, const at::Tensor& weight,
                                            const c10::optional<at::Tensor>& bias,
                                            const Conv3dParams& p,
                                            at::Tensor* relu_channel_moments) {
#ifdef FUSED_OPS_WITH_CUTLASS
  auto params = split_tf32_params_of_transposed(input, weight, p);
  const Conv3dShape& s = params.conv;
  // NDHWC activations, KTRSC filter: the logical shapes stay PyTorch's (N, C, D, H, W).
  const at::Tensor x = aligned_16(float_cuda_in_format(input, at::MemoryFormat::ChannelsLast3d));
  const at::Tensor w =
      forward_weight_of_transposed(weight, p.groups).permute({0, 2, 3, 4, 1}).contiguous();
  const at::Tensor b = bias.has_value() && bias->defined() ? aligned_16(bias->contiguous())
                                                           : at::zeros({s.C_out}, input.options());
  at::Tensor y = at::empty({s.N, s.C_out, s.Do, s.Ho, s.Wo},
                           input.options().memory_format(at::MemoryFormat::ChannelsLast3d));
  params.x = x.const_data_ptr<float>();
  params.weight = w.const_data_ptr<float>();
  params.bias = b.const_data_ptr<float>();
  params.y = y.mutable_data_ptr<float>();
  if (relu_channel_moments != nullptr) {
    *relu_channel_moments = at::empty({s.N, s.C_out, 2}, input.options().dtype(at::kDouble));
    params.relu_channel_moments =
        static_cast<norm::Moments*>(relu_channel_moments->mutable_data_ptr());
  }
  run_cuda_kernel("fused::conv_transpose3d_relu_group_norm (split-TF32 convolution)", input, params,
                  split_tf32_conv3d_cuda.forward);
  return y;  // NDHWC: run_conv3d changes it to the layout its caller wants
#else
  TORCH_INTERNAL_ASSERT(false, "split-TF32 convolution selected in a build without CUTLASS");
#endif
}

#ifdef FUSED_OPS_WITH_CUTLASS
// The transposed convolution's weight gradient from its forward rewrite `forward`'s, computed by
// fill(forward_grad) into forward_grad (C_out, k..., C_in: KTRSC, as our kernels write it): ->
// the forward weight's (C_out, C_in, k...) -> (C_in, C_out, k...), in weight's layout.
template <typename Fill>
at::Tensor transposed_weight_grad_from_ktrsc(const Conv3dShape& forward, const at::Tensor& input,
                                             const at::Tensor& weight, const Conv3dParams& p,
                                             const Fill& fill) {
  at::Tensor forward_grad =
      at::empty({forward.C_out, forward.kD, forward.kH, forward.kW, forward.C_in}, input.options());
  fill(forward_grad);
  return transposed_weight_of_forward(forward_grad.permute({0, 4, 1, 2, 3}), p.groups,
                                      weight.sizes())
      .contiguous(weight.suggest_memory_format());
}

// The transposed convolution's weight gradient on Hopper's wgmma kernel (the forward rewrite
// `forward`'s), x read NCDHW (the module's layout: no transpose unless the input comes
// channels-last), dy NDHWC. (dy_from_norm defined: dy is that operand, and `dy` undefined.)
at::Tensor weight_grad_on_wgmma(const char* op, const at::Tensor& dy, const at::Tensor& input,
                                const at::Tensor& weight, const Conv3dShape& forward,
                                const Conv3dParams& p, bool split_tf32,
                                const ReluGroupNormGradOperand& dy_from_norm = {}) {
  return transposed_weight_grad_from_ktrsc(forward, input, weight, p, [&](at::Tensor& grad) {
    const at::Tensor x = aligned_16(float_cuda_in_format(input, at::MemoryFormat::Contiguous));
    run_cuda_kernel(op, input,
                    Conv3dWeightGradNcdhwInputParams{
                        forward, x.const_data_ptr<float>(),
                        dy_from_norm.defined() ? nullptr : dy.const_data_ptr<float>(),
                        grad.mutable_data_ptr<float>(), split_tf32, dy_from_norm},
                    split_tf32_conv3d_cuda.weight_grad_ncdhw_input);
  });
}

// The input gradient of a transposed convolution whose forward rewrite is `forward`: a forward
// convolution of dy (NDHWC) with the transposed convolution's own weight and padding
// (split_tf32_input_grad_shape), on our kernels (split-TF32 or plain TF32 products), in the
// layout of `input`: an NCDHW one written so by the wgmma kernel's epilogue where it runs (no
// transpose pass after: 0.10 ms at the headline on an H100), else computed NDHWC and changed.
// With dy_from_norm defined, dy is that operand (`dy` undefined): NCDHW out (the caller's
// conv3d_backward_takes_norm_operand).
at::Tensor input_grad_on_split_tf32_kernels(const char* op, const at::Tensor& dy,
                                            const at::Tensor& input, const at::Tensor& weight,
                                            const Conv3dShape& forward, const Conv3dParams& p,
                                            bool tf32_products,
                                            const ReluGroupNormGradOperand& dy_from_norm = {}) {
  constexpr auto kChannelsLast = at::MemoryFormat::ChannelsLast3d;
  Conv3dChannelsLastParams params{};
  params.conv = split_tf32_input_grad_shape(forward, p);
  params.tf32_products = tf32_products;
  params.x_from_norm = dy_from_norm;
  params.y_channels_first = input.suggest_memory_format() == at::MemoryFormat::Contiguous &&
                            split_tf32_conv3d_cuda.forward_channels_first_supported(params.conv);
  TORCH_INTERNAL_ASSERT(params.y_channels_first || !dy_from_norm.defined(),
                        "the GroupNorm backward's operand writes the input gradient NCDHW");
  // (C_in, C_out, k...) -> (C_in, k..., C_out): KTRSC with the input gradient's "K" = C_in.
  const at::Tensor w = weight.permute({0, 2, 3, 4, 1}).contiguous();
  const at::Tensor zero_bias = at::zeros({forward.C_in}, input.options());
  at::Tensor dx = at::empty(
      input.sizes(), input.options().memory_format(
                         params.y_channels_first ? at::MemoryFormat::Contiguous : kChannelsLast));
  params.x = dy_from_norm.defined() ? nullptr : dy.const_data_ptr<float>();
  params.weight = w.const_data_ptr<float>();
  params.bias = zero_bias.const_data_ptr<float>();
  params.y = dx.mutable_data_ptr<float>();
  run_cuda_kernel(op, input, params, split_tf32_conv3d_cuda.forward);
  return params.y_channels_first ? dx : float_cuda_in_format(dx, input.suggest_memory_format());
}
#endif

// Which convolutions of the backward of a float32 transposed rewrite run on our wgmma kernels:
// the TF32 backward's input and weight gradients (else cuDNN's, NDHWC), the split-TF32
// backward's weight gradient (else CUTLASS's sm80 wgrad; its input gradient always runs on the
// split-TF32 forward kernels, whichever split_tf32_conv_kernel names). One place for
// transposed_split_tf32_backward, transposed_as_forward_backward and
// transposed_conv3d_backward_path.
struct TransposedBackwardConvs {
  bool input_grad_on_wgmma = false, weight_grad_on_wgmma = false;
};
TransposedBackwardConvs split_tf32_backward_convs(const at::Tensor& input, const at::Tensor& weight,
                                                  const Conv3dParams& p) {
  TransposedBackwardConvs convs;
#ifdef FUSED_OPS_WITH_CUTLASS
  const Conv3dShape forward = split_tf32_params_of_transposed(input, weight, p).conv;
  convs.weight_grad_on_wgmma = split_tf32_conv3d_cuda.weight_grad_ncdhw_input_supported(forward);
#endif
  return convs;
}
TransposedBackwardConvs tf32_rewrite_backward_convs(const at::Tensor& input,
                                                    const at::Tensor& weight,
                                                    const Conv3dParams& p) {
  TransposedBackwardConvs convs;
#ifdef FUSED_OPS_WITH_CUTLASS
  if (p.groups == 1) {
    const Conv3dShape forward = split_tf32_params_of_transposed(input, weight, p).conv;
    convs.input_grad_on_wgmma =
        split_tf32_conv3d_cuda.forward_tf32_supported(split_tf32_input_grad_shape(forward, p));
    convs.weight_grad_on_wgmma = split_tf32_conv3d_cuda.weight_grad_ncdhw_input_supported(forward);
  }
#endif
  return convs;
}

// conv3d_backward of a transposed convolution that ran as transposed_as_forward_split_tf32: the
// input gradient is a forward convolution of dy (split_tf32_input_grad_shape) and the weight
// gradient that of the forward rewrite, both on the split-TF32 kernels (the bias's gradient:
// conv3d_backward).
std::tuple<at::Tensor, at::Tensor> transposed_split_tf32_backward(const at::Tensor& grad_y,
                                                                  const at::Tensor& input,
                                                                  const at::Tensor& weight,
                                                                  const Conv3dParams& p,
                                                                  std::array<bool, 2> output_mask) {
#ifdef FUSED_OPS_WITH_CUTLASS
  constexpr const char* kOp = "fused::conv_transpose3d_relu_group_norm (split-TF32 backward)";
  constexpr auto kChannelsLast = at::MemoryFormat::ChannelsLast3d;
  const Conv3dShape forward = split_tf32_params_of_transposed(input, weight, p).conv;
  const at::Tensor dy = aligned_16(float_cuda_in_format(grad_y, kChannelsLast));
  at::Tensor grad_input, grad_weight;
  if (output_mask[0]) {
    grad_input = input_grad_on_split_tf32_kernels(kOp, dy, input, weight, forward, p,
                                                  /*tf32_products=*/false);
  }
  if (output_mask[1]) {
    // The forward rewrite's weight gradient. On Hopper's wgmma kernel x stays NCDHW; CUTLASS's
    // sm80 wgrad takes it NDHWC.
    if (split_tf32_backward_convs(input, weight, p).weight_grad_on_wgmma) {
      grad_weight = weight_grad_on_wgmma(kOp, dy, input, weight, forward, p, /*split_tf32=*/true);
    } else {
      grad_weight =
          transposed_weight_grad_from_ktrsc(forward, input, weight, p, [&](at::Tensor& grad) {
            const at::Tensor x = aligned_16(float_cuda_in_format(input, kChannelsLast));
            run_cuda_kernel(kOp, input,
                            Conv3dWeightGradChannelsLastParams{forward, x.const_data_ptr<float>(),
                                                               dy.const_data_ptr<float>(),
                                                               grad.mutable_data_ptr<float>()},
                            split_tf32_conv3d_cuda.weight_grad);
          });
    }
  }
  return {grad_input, grad_weight};
#else
  TORCH_INTERNAL_ASSERT(false, "split-TF32 convolution selected in a build without CUTLASS");
#endif
}

// conv3d_backward of a float32 transposed convolution that ran as transposed_as_forward (TF32
// allowed), in NDHWC: the input gradient as a forward convolution of dy with the transposed
// convolution's own weight and padding (split_tf32_input_grad_shape's), the weight gradient as
// the forward rewrite's. dy comes NDHWC (the GroupNorm backward writes it so:
// conv3d_backward_reads_channels_last). Measured on an H100 (2026-11-22, cuDNN 9.19, TF32;
// benchmarks/conv_variants.py --backward), ConvTranspose3d 64->128 k3 on (16, 64, 32^3): eager's
// NCDHW backward takes 4.6 ms: the input gradient 1.24 ms on an sm80 kernel after 0.23 ms of
// transposes, the weight gradient 2.47 ms after 0.33 ms of transposes; in NDHWC cuDNN's input
// gradient takes 1.15 ms (an sm90 kernel) and the rewrite's weight gradient 1.98 ms, after one
// transpose of dy (0.23 ms) and one of x (0.10 ms). Where our wgmma kernels take the shapes
// (sm_90), they run instead, with TF32 products: the weight gradient with x read NCDHW (0.82 ms
// at the headline), the input gradient written NCDHW by its epilogue for an NCDHW input (1.12
// ms, where cuDNN's took 1.14 and its transpose back 0.10: benchmarks/h100-2026-11-28-ncdhw-
// epilogue). Their tensor cores read dy as it lies, dropping its low bits, so dy holds TF32
// values (conv3d_backward_is_tf32; cuDNN's kernels were less accurate on unrounded dy too: 3x
// eager's error in a weight gradient, 2026-11-28): the GroupNorm backward rounds it as it
// writes it (and sums it for the bias's gradient before: conv3d_backward).
std::tuple<at::Tensor, at::Tensor> transposed_as_forward_backward(const at::Tensor& grad_y,
                                                                  const at::Tensor& input,
                                                                  const at::Tensor& weight,
                                                                  const Conv3dParams& p,
                                                                  std::array<bool, 2> output_mask) {
  constexpr auto kChannelsLast = at::MemoryFormat::ChannelsLast3d;
  [[maybe_unused]] constexpr const char* kOp =  // (our kernels' error messages: CUTLASS builds)
      "fused::conv_transpose3d_relu_group_norm (TF32 backward)";
  const at::Tensor dy = aligned_16(float_cuda_in_format(grad_y, kChannelsLast));
  at::Tensor grad_input, grad_weight;
  bool wgmma_input_grad = false, wgmma_weight_grad = false;
#ifdef FUSED_OPS_WITH_CUTLASS
  const TransposedBackwardConvs convs = tf32_rewrite_backward_convs(input, weight, p);
  wgmma_input_grad = output_mask[0] && convs.input_grad_on_wgmma;
  wgmma_weight_grad = output_mask[1] && convs.weight_grad_on_wgmma;
  const Conv3dShape forward =
      p.groups == 1 ? split_tf32_params_of_transposed(input, weight, p).conv : Conv3dShape{};
  if (wgmma_input_grad) {
    grad_input = input_grad_on_split_tf32_kernels(kOp, dy, input, weight, forward, p,
                                                  /*tf32_products=*/true);
  }
  if (wgmma_weight_grad) {
    grad_weight = weight_grad_on_wgmma(kOp, dy, input, weight, forward, p, /*split_tf32=*/false);
  }
#endif
  if (output_mask[0] && !wgmma_input_grad) {
    const at::Tensor dx = at::conv3d(dy, weight.contiguous(kChannelsLast), c10::nullopt,
                                     /*stride=*/{1, 1, 1}, p.padding, p.dilation, p.groups);
    grad_input = float_cuda_in_format(dx, input.suggest_memory_format());
  }
  if (output_mask[1] && !wgmma_weight_grad) {
    const at::Tensor x = aligned_16(float_cuda_in_format(input, kChannelsLast));
    const at::Tensor forward_weight =
        forward_weight_of_transposed(weight, p.groups).contiguous(kChannelsLast);
    const at::Tensor forward_grad = std::get<1>(at::convolution_backward(
        dy, x, forward_weight, c10::nullopt, /*stride=*/{1, 1, 1},
        forward_padding_of_transposed(weight, p), p.dilation, /*transposed=*/false,
        /*output_padding=*/{0, 0, 0}, p.groups, {false, true, false}));
    grad_weight = transposed_weight_of_forward(forward_grad, p.groups, weight.sizes())
                      .contiguous(weight.suggest_memory_format());
  }
  return {grad_input, grad_weight};
}

// Whether conv3d_backward of a convolution on `path` runs transposed_as_forward_backward (the
// TF32 rewrite's, float32: its half types take eager's backward, not measured in NDHWC).
bool backward_is_tf32_rewrite(const at::Tensor& input, ConvPath path) {
  return path == ConvPath::kTransposedAsForward && input.scalar_type() == at::kFloat;
}

// conv_output_is_channels_last for the path select_conv_path chose: the float32 CUDA rewrites
// of transposed convolutions compute NDHWC.
bool computes_channels_last(const at::Tensor& input, ConvPath path) {
  return input.is_cuda() && input.scalar_type() == at::kFloat &&
         (path == ConvPath::kTransposedAsForward ||
          path == ConvPath::kTransposedAsForwardSplitTf32);
}

}  // namespace

Conv3dShape forward_conv3d_shape(const at::Tensor& input, int64_t c_out, const at::Tensor& weight,
                                 const Conv3dParams& forward) {
  TORCH_INTERNAL_ASSERT(!forward.transposed && input.dim() == 5 && weight.dim() == 5);
  Conv3dShape s{};
  s.N = input.size(0);
  s.C_in = input.size(1);
  s.D = input.size(2);
  s.H = input.size(3);
  s.W = input.size(4);
  s.C_out = c_out;
  s.kD = weight.size(2);
  s.kH = weight.size(3);
  s.kW = weight.size(4);
  const int64_t in[3] = {s.D, s.H, s.W}, k[3] = {s.kD, s.kH, s.kW};
  int64_t* out[3] = {&s.Do, &s.Ho, &s.Wo};
  for (int i = 0; i < 3; ++i) {
    s.stride[i] = forward.stride[i];
    s.padding[i] = forward.padding[i];
    s.dilation[i] = forward.dilation[i];
    *out[i] = (in[i] + 2 * forward.padding[i] - forward.dilation[i] * (k[i] - 1) - 1) /
                  forward.stride[i] +
              1;
  }
  s.groups = forward.groups;
  return s;
}

// CPU: the fused conv operators' passes that need the convolution's output (or its gradient)
// only per sample run by chunks of the batch of about kCpuChunkBytes of it each, at least
// kCpuMinChunkSamples samples: Conv3dGroupNormMean's forward without autograd (only the means
// leave it) and its backward (the gradient of the conv output feeds the convolution's
// backward). A whole large output is fresh memory for every call (glibc maps allocations of
// more than 32 MiB anew, smaller ones too at times), whose 4 KiB pages each fault on the
// first write, and it goes through DRAM; a chunk's is mapped already from the chunk before
// and read back from the last-level cache. Measured on the 2-core VM of the CPU benchmarks,
// Conv3d 3->24 k3 on (16, 3, 24, 32, 32) (a 30 MB output), 1 thread: forward 60-73 ms whole
// (15k page faults a call), 20-24 ms by chunks of 4 samples (none), eager 80-100 ms; the
// convolution's backward 115-150 ms whole, 85-120 ms by chunks. oneDNN is slower on batches
// of 1 or 2 samples (37 vs 18 ms for that forward convolution by 1 vs by 4 samples), hence
// the minimum. The chunks depend on the sizes only (results do not depend on the thread
// count); the parameters' gradients are sums of the chunks' in order (measured: closer to
// float64 than oneDNN's whole-batch sums, 4e-6-1.1e-5 vs 1.4e-5-2.2e-5 of the largest).
constexpr int64_t kCpuChunkBytes = int64_t{8} << 20;
constexpr int64_t kCpuMinChunkSamples = 4;

int64_t cpu_batch_chunks(const at::Tensor& input, c10::SymIntArrayRef conv_output) {
  const auto sizes = c10::asIntArrayRefSlowOpt(conv_output);
  if (!input.device().is_cpu() || !sizes.has_value() || sizes->empty() || (*sizes)[0] <= 0) {
    return 1;
  }
  int64_t sample_bytes = input.element_size();
  for (size_t i = 1; i < sizes->size(); ++i) {
    sample_bytes *= (*sizes)[i];
  }
  const int64_t chunk =
      std::max(kCpuMinChunkSamples, kCpuChunkBytes / std::max<int64_t>(sample_bytes, 1));
  return ((*sizes)[0] + chunk - 1) / chunk;
}

const char* conv_path_name(ConvPath path) {
  switch (path) {
    case ConvPath::kAten:
      return "aten";
    case ConvPath::kAtenFloat32:
      return "aten_float32";
    case ConvPath::kTransposedAsForward:
      return "transposed_as_forward";
    case ConvPath::kTransposedAsForwardSplitTf32:
      return "transposed_as_forward_split_tf32";
  }
  return "unknown";
}

std::string split_tf32_conv_kernel(const at::Tensor& input) {
#ifdef FUSED_OPS_WITH_CUTLASS
  if (input.is_cuda()) {
    const c10::DeviceGuard device_guard(input.device());
    return split_tf32_conv3d_cuda.forward_kernel();
  }
#endif
  return "";
}

ConvPath select_conv_path(const at::Tensor& input, const at::Tensor& weight, const Conv3dParams& p,
                          ConvConsumer consumer) {
  const bool is_float = input.scalar_type() == at::kFloat;
  if (consumer == ConvConsumer::kGroupNormMean) {
    return is_float && input.is_cuda() ? ConvPath::kAtenFloat32 : ConvPath::kAten;
  }
  if (p.transposed && input.is_cuda() && rewritable_as_forward(weight, p)) {
    if (is_float && !at::globalContext().allowTF32CuDNN() &&
        split_tf32_runs_transposed(input, weight, p)) {
      return ConvPath::kTransposedAsForwardSplitTf32;
    }
    if (is_half_type(input) ||
        (is_float && at::globalContext().allowTF32CuDNN() && eager_transposed_is_tf32(weight, p))) {
      return ConvPath::kTransposedAsForward;
    }
  }
  return ConvPath::kAten;  // (the CPU: eager's; see the top of this file)
}

bool conv_output_is_channels_last(const at::Tensor& input, const at::Tensor& weight,
                                  const Conv3dParams& p, ConvConsumer consumer) {
  return computes_channels_last(input, select_conv_path(input, weight, p, consumer));
}

bool conv_emits_relu_moments(const at::Tensor& input, const at::Tensor& weight,
                             const Conv3dParams& p, ConvConsumer consumer) {
  if (!input.is_cuda() || consumer != ConvConsumer::kReluGroupNorm) {
    return false;
  }
  const ConvPath path = select_conv_path(input, weight, p, consumer);
  const c10::DeviceGuard device_guard(input.device());  // (the kernel's checks ask the device)
  return (path == ConvPath::kTransposedAsForwardSplitTf32 &&
          split_tf32_emits_relu_moments(input, weight, p)) ||
         (path == ConvPath::kTransposedAsForward &&
          tf32_wgmma_emits_relu_moments(input, weight, p));
}

at::Tensor run_conv3d(const at::Tensor& unaligned_input, const at::Tensor& unaligned_weight,
                      const c10::optional<at::Tensor>& bias, const Conv3dParams& p,
                      ConvConsumer consumer, ConvOutputLayout layout,
                      at::Tensor* relu_channel_moments) {
  const bool cuda = unaligned_input.is_cuda();
  // The path's checks ask the current device (compute capability, SMs, shared memory): make it
  // the input's.
  c10::OptionalDeviceGuard device_guard;
  if (cuda) {
    device_guard.reset_device(unaligned_input.device());
  }
  const at::Tensor input = cuda ? aligned_16(unaligned_input) : unaligned_input;
  const at::Tensor weight = cuda ? aligned_16(unaligned_weight) : unaligned_weight;
  const ConvPath path = select_conv_path(input, weight, p, consumer);
  const bool as_computed =
      layout == ConvOutputLayout::kAsComputed && computes_channels_last(input, path);
  at::Tensor output;
  switch (path) {
    case ConvPath::kAtenFloat32: {
      // Exactly at::convolution, but with float32 products whatever the TF32 flag says.
      auto& ctx = at::globalContext();
      output = at::_convolution(input, weight, bias, p.stride, p.padding, p.dilation, p.transposed,
                                p.output_padding, p.groups, ctx.benchmarkCuDNN(),
                                ctx.deterministicCuDNN() || ctx.deterministicAlgorithms(),
                                ctx.userEnabledCuDNN(), /*allow_tf32=*/false);
      break;
    }
    case ConvPath::kTransposedAsForward:
      // (The inference forward that tf32_wgmma_emits_relu_moments takes does not come here:
      // run_tf32_conv_relu_group_norm.) NDHWC in, NDHWC out when the caller takes it so: cuDNN
      // transposes an NCDHW input itself (as fast as our transpose) and its output back (which the
      // caller saves).
      output = transposed_as_forward(
          as_computed ? aligned_16(float_cuda_in_format(input, at::MemoryFormat::ChannelsLast3d))
                      : input,
          weight, bias, p);
      break;
    case ConvPath::kTransposedAsForwardSplitTf32: {
      const bool moments = relu_channel_moments != nullptr && as_computed &&
                           consumer == ConvConsumer::kReluGroupNorm &&
                           split_tf32_emits_relu_moments(input, weight, p);
      output = transposed_as_forward_split_tf32(input, weight, bias, p,
                                                moments ? relu_channel_moments : nullptr);  // NDHWC
      break;
    }
    case ConvPath::kAten:
      output = at::convolution(input, weight, bias, p.stride, p.padding, p.dilation, p.transposed,
                               p.output_padding, p.groups);
      break;
  }
  if (as_computed) {
    return output;  // NDHWC
  }
  // The layout the Meta kernels promise (backends differ for channels-last inputs).
  const auto format = input.suggest_memory_format();
  return cuda && output.scalar_type() == at::kFloat ? float_cuda_in_format(output, format)
                                                    : output.contiguous(format);
}

bool tf32_conv_relu_group_norm_chosen(const at::Tensor& input, const at::Tensor& weight,
                                      const Conv3dParams& p) {
  if (!input.is_cuda()) {
    return false;
  }
  const c10::DeviceGuard device_guard(input.device());  // (the kernel's checks ask the device)
  return select_conv_path(input, weight, p, ConvConsumer::kReluGroupNorm) ==
             ConvPath::kTransposedAsForward &&
         tf32_wgmma_emits_relu_moments(input, weight, p);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> run_tf32_conv_relu_group_norm(
    const at::Tensor& unaligned_input, const at::Tensor& weight,
    const c10::optional<at::Tensor>& bias, const Conv3dParams& p, const GroupNormShape& group_norm,
    const c10::optional<at::Tensor>& gn_weight, const c10::optional<at::Tensor>& gn_bias,
    double eps) {
#ifdef FUSED_OPS_WITH_CUTLASS
  const c10::DeviceGuard device_guard(unaligned_input.device());
  const at::Tensor input = aligned_16(unaligned_input);  // NCDHW (tf32_wgmma_emits_relu_moments)
  Conv3dChannelsLastParams conv = split_tf32_params_of_transposed(input, weight, p);
  const Conv3dShape& s = conv.conv;
  const auto options = input.options();
  // x NDHWC (written by the launch: transposed, TF32-rounded), the transposed convolution's
  // weight as it is (the launch's split flips it: weight_of_transposed), y NDHWC.
  const at::Tensor x =
      at::empty(input.sizes(), options.memory_format(at::MemoryFormat::ChannelsLast3d));
  const at::Tensor w = weight.contiguous();
  conv.weight_of_transposed = true;
  const at::Tensor b = bias.has_value() && bias->defined() ? aligned_16(bias->contiguous())
                                                           : at::zeros({s.C_out}, options);
  const std::vector<int64_t> y_sizes{s.N, s.C_out, s.Do, s.Ho, s.Wo};
  at::Tensor y = at::empty(y_sizes, options.memory_format(at::MemoryFormat::ChannelsLast3d));
  at::Tensor output = at::empty(y_sizes, options);
  at::Tensor mean = at::empty({s.N, group_norm.G}, options);
  at::Tensor rstd = at::empty({s.N, group_norm.G}, options);
  const at::Tensor gw = contiguous_or_undefined(gn_weight);
  const at::Tensor gb = contiguous_or_undefined(gn_bias);
  conv.x = x.const_data_ptr<float>();
  conv.weight = w.const_data_ptr<float>();
  conv.bias = b.const_data_ptr<float>();
  conv.y = y.mutable_data_ptr<float>();
  const norm::ReluGroupNormForwardParams norm_params{ScalarKind::kFloat,
                                                     group_norm,
                                                     eps,
                                                     /*channels_last=*/true,
                                                     y.const_data_ptr(),
                                                     data_or_null(gw),
                                                     data_or_null(gb),
                                                     output.mutable_data_ptr(),
                                                     mean.mutable_data_ptr(),
                                                     rstd.mutable_data_ptr(),
                                                     /*channel_moments=*/nullptr,
                                                     /*x_bias=*/nullptr,
                                                     /*x_channels_first=*/nullptr};
  run_cuda_kernel("fused::conv_transpose3d_relu_group_norm (TF32 convolution)", input,
                  Tf32ConvReluGroupNormParams{conv, input.const_data_ptr<float>(), norm_params},
                  split_tf32_conv3d_cuda.tf32_relu_group_norm_forward);
  return {output, y, mean, rstd};
#else
  TORCH_INTERNAL_ASSERT(false, "TF32 wgmma convolution selected in a build without CUTLASS");
#endif
}

bool conv3d_backward_reads_channels_last(const at::Tensor& input, const at::Tensor& weight,
                                         const Conv3dParams& p) {
  return p.transposed &&
         conv_output_is_channels_last(input, weight, p, ConvConsumer::kReluGroupNorm);
}

bool conv3d_backward_is_tf32(const at::Tensor& input, const at::Tensor& weight,
                             const Conv3dParams& p) {
  return p.transposed &&
         backward_is_tf32_rewrite(input,
                                  select_conv_path(input, weight, p, ConvConsumer::kReluGroupNorm));
}

bool autograd_records(const at::Tensor& input, const at::Tensor& weight,
                      const c10::optional<at::Tensor>& conv_bias,
                      const c10::optional<at::Tensor>& gn_weight,
                      const c10::optional<at::Tensor>& gn_bias) {
  const auto requires_grad = [](const c10::optional<at::Tensor>& t) {
    return t.has_value() && t->defined() && t->requires_grad();
  };
  return at::GradMode::is_enabled() &&
         (input.requires_grad() || weight.requires_grad() || requires_grad(conv_bias) ||
          requires_grad(gn_weight) || requires_grad(gn_bias));
}

at::Tensor empty_conv_output(const at::Tensor& input, c10::SymIntArrayRef shape) {
  return at::empty_symint(shape, input.options().memory_format(input.suggest_memory_format()));
}

bool conv3d_backward_takes_norm_operand(const at::Tensor& input, const at::Tensor& weight,
                                        const Conv3dParams& p) {
#ifdef FUSED_OPS_WITH_CUTLASS
  if (!p.transposed || !input.is_cuda() || input.scalar_type() != at::kFloat || p.groups != 1 ||
      input.suggest_memory_format() != at::MemoryFormat::Contiguous) {
    return false;
  }
  const c10::DeviceGuard device_guard(input.device());  // (the kernels' checks ask the device)
  const ConvPath path = select_conv_path(input, weight, p, ConvConsumer::kReluGroupNorm);
  const bool split_tf32 = path == ConvPath::kTransposedAsForwardSplitTf32;
  if (!(split_tf32 || backward_is_tf32_rewrite(input, path))) {
    return false;
  }
  const Conv3dShape forward = split_tf32_params_of_transposed(input, weight, p).conv;
  return split_tf32_conv3d_cuda.norm_grad_operand_supported(split_tf32_input_grad_shape(forward, p),
                                                            forward, /*tf32_products=*/!split_tf32);
#else
  return false;
#endif
}

std::tuple<at::Tensor, at::Tensor> conv3d_backward_from_norm_operand(
    const at::Tensor& grad_output, const at::Tensor& conv_output, const at::Tensor& coefficients,
    const at::Tensor& input, const at::Tensor& weight, const Conv3dParams& p,
    std::array<bool, 2> output_mask) {
#ifdef FUSED_OPS_WITH_CUTLASS
  constexpr const char* kOp =
      "fused::conv_transpose3d_relu_group_norm (backward from the GroupNorm's coefficients)";
  const c10::DeviceGuard device_guard(input.device());
  const bool split_tf32 = select_conv_path(input, weight, p, ConvConsumer::kReluGroupNorm) ==
                          ConvPath::kTransposedAsForwardSplitTf32;
  const Conv3dShape forward = split_tf32_params_of_transposed(input, weight, p).conv;
  const at::Tensor g = aligned_16(grad_output.contiguous());
  const at::Tensor y = aligned_16(conv_output.contiguous());
  const at::Tensor k = aligned_16(coefficients.contiguous());
  const ReluGroupNormGradOperand operand{g.const_data_ptr<float>(), y.const_data_ptr<float>(),
                                         k.const_data_ptr<float>()};
  at::Tensor grad_input, grad_weight;
  if (output_mask[0]) {
    grad_input = input_grad_on_split_tf32_kernels(kOp, at::Tensor(), input, weight, forward, p,
                                                  /*tf32_products=*/!split_tf32, operand);
  }
  if (output_mask[1]) {
    grad_weight =
        weight_grad_on_wgmma(kOp, at::Tensor(), input, weight, forward, p, split_tf32, operand);
  }
  return {grad_input, grad_weight};
#else
  TORCH_INTERNAL_ASSERT(false, "the GroupNorm's operand selected in a build without CUTLASS");
#endif
}

std::string transposed_conv3d_backward_path(const at::Tensor& input, const at::Tensor& weight,
                                            const Conv3dParams& p) {
  const auto path_of = [](const char* dy, const char* input_grad, const char* weight_grad) {
    return std::string(dy) + " -> input_grad=" + input_grad + ", weight_grad=" + weight_grad;
  };
  if (!p.transposed || !input.is_cuda()) {
    return path_of("dy", "aten", "aten");
  }
  const c10::DeviceGuard device_guard(input.device());  // (the kernels' checks ask the device)
  const ConvPath path = select_conv_path(input, weight, p, ConvConsumer::kReluGroupNorm);
  const bool split_tf32 = path == ConvPath::kTransposedAsForwardSplitTf32;
  if (input.numel() > 0 && conv3d_backward_takes_norm_operand(input, weight, p)) {
    const char* kernel = split_tf32 ? "split_tf32_wgmma" : "tf32_wgmma";
    return path_of("dy_from_norm", kernel, kernel);
  }
  if (split_tf32) {
    return path_of("dy_ndhwc", "split_tf32",
                   split_tf32_backward_convs(input, weight, p).weight_grad_on_wgmma
                       ? "split_tf32_wgmma"
                       : "split_tf32_cutlass");
  }
  if (backward_is_tf32_rewrite(input, path)) {
    const TransposedBackwardConvs convs = tf32_rewrite_backward_convs(input, weight, p);
    return path_of("dy_ndhwc_tf32", convs.input_grad_on_wgmma ? "tf32_wgmma" : "cudnn_ndhwc",
                   convs.weight_grad_on_wgmma ? "tf32_wgmma" : "cudnn_ndhwc");
  }
  return path_of(conv3d_backward_reads_channels_last(input, weight, p) ? "dy_ndhwc" : "dy", "aten",
                 "aten");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv3d_backward(const at::Tensor& grad_conv_output,
                                                               const at::Tensor& input,
                                                               const at::Tensor& weight,
                                                               bool has_bias, const Conv3dParams& p,
                                                               std::array<bool, 3> output_mask) {
  if (!(output_mask[0] || output_mask[1] || (output_mask[2] && has_bias))) {
    return {};
  }
  const bool has_grad_bias = output_mask[2] && has_bias;
  if (input.is_meta()) {
    auto like = [](const at::Tensor& t) {
      return at::empty_symint(t.sym_sizes(), t.options().memory_format(t.suggest_memory_format()));
    };
    return {output_mask[0] ? like(input) : at::Tensor(),
            output_mask[1] ? like(weight) : at::Tensor(),
            has_grad_bias ? at::empty_symint({grad_conv_output.sym_size(1)}, weight.options())
                          : at::Tensor()};
  }
  c10::OptionalDeviceGuard device_guard;  // (as run_conv3d's)
  if (input.is_cuda()) {
    device_guard.reset_device(input.device());
  }
  if (p.transposed) {
    const ConvPath path = select_conv_path(input, weight, p, ConvConsumer::kReluGroupNorm);
    const bool split_tf32 = path == ConvPath::kTransposedAsForwardSplitTf32;
    if (split_tf32 || backward_is_tf32_rewrite(input, path)) {  // (CUDA only: select_conv_path)
      // These read the gradient NDHWC (conv3d_backward_reads_channels_last), which the
      // GroupNorm backward writes with its channel sums: the caller takes the bias's gradient
      // there (as conv_transpose3d_relu_group_norm_backward does), before the gradient's
      // rounding to TF32, instead of a pass over it here.
      TORCH_INTERNAL_ASSERT(!has_grad_bias,
                            "the bias's gradient of a transposed rewrite comes from its caller");
      auto [grad_input, grad_weight] =
          split_tf32 ? transposed_split_tf32_backward(grad_conv_output, input, weight, p,
                                                      {output_mask[0], output_mask[1]})
                     : transposed_as_forward_backward(grad_conv_output, input, weight, p,
                                                      {output_mask[0], output_mask[1]});
      return {grad_input, grad_weight, at::Tensor()};
    }
  }
  const int64_t c_out = grad_conv_output.size(1);
  const std::array<int64_t, 1> bias_sizes{c_out};
  const bool cuda = input.is_cuda();
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
      cuda ? aligned_16(grad_conv_output) : grad_conv_output, cuda ? aligned_16(input) : input,
      cuda ? aligned_16(weight) : weight,
      has_bias ? at::OptionalIntArrayRef(bias_sizes) : at::OptionalIntArrayRef(c10::nullopt),
      p.stride, p.padding, p.dilation, p.transposed, p.output_padding, p.groups,
      {output_mask[0], output_mask[1], has_grad_bias});
  if (grad_input.defined()) {
    grad_input = grad_input.contiguous(input.suggest_memory_format());
  }
  if (grad_weight.defined()) {
    grad_weight = grad_weight.contiguous(weight.suggest_memory_format());
  }
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace conv
}  // namespace fused_ops
