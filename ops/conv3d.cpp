// A stride-1 transposed convolution equals a forward convolution of the same input with the
// kernel's taps flipped, its in/out channel axes swapped (per conv group), and padding
// (k - 1) * dilation - padding on every side. cuDNN's forward kernels are several times
// faster than its transposed (data-gradient) kernels on the headline shape. Measured on an
// H100 (cuDNN 9.19), ConvTranspose3d 64->128, k=3 on (16, 64, 32^3): 1.18 ms as a forward
// convolution vs 2.81 ms as written with TF32, 6.4 ms vs 18.4 ms in full float32.
// But in full float32 the forward algorithms cuDNN picks for it are less accurate: max error
// 2.1e-6 of the largest output against float64, vs 3.0e-7 as written, which is more than
// "full float32, within atol=rtol=1e-5 of eager" allows after GroupNorm. So the rewrite is
// used where TF32 (or half / bfloat16) rounding dominates anyway: on CUDA, for float with
// torch.backends.cudnn.allow_tf32 on, or half / bfloat16 inputs; with stride 1, no
// output_padding, and padding <= (k - 1) * dilation (the forward padding must not be
// negative). It computes the same function; only the rounding differs.
//
// Forward convolutions in channels_last_3d (NDHWC) layout: cuDNN's NDHWC kernels use the
// tensor cores where its NCDHW ones do not for few input channels. Measured on the H100,
// Conv3d 3->24, k=3 on (128, 3, 24, 32, 32): 0.40 ms NDHWC vs 0.65 ms NCDHW with TF32, but
// 1.08 ms vs 0.64 ms in full float32. So NDHWC is used under the same condition (TF32
// allowed, or half / bfloat16) when the caller reads NDHWC output directly.
#include "conv3d.h"

#include <ATen/ops/conv3d.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/flip.h>
#include <ATen/Context.h>

namespace fused_ops {
namespace {

// Whether cuDNN may round this convolution's products below float32 precision anyway: TF32
// allowed for float, or half / bfloat16 data.
bool reduced_precision_conv(const at::Tensor& input) {
  switch (input.scalar_type()) {
    case at::kHalf:
    case at::kBFloat16:
      return true;
    case at::kFloat:
      return at::globalContext().allowTF32CuDNN();
    default:
      return false;
  }
}

}  // namespace

bool transposed_conv_runs_as_forward(const at::Tensor& input, const at::Tensor& weight,
                                     const Conv3dParams& p) {
  if (!p.transposed || !input.is_cuda() || !reduced_precision_conv(input)) {
    return false;
  }
  for (int i = 0; i < 3; ++i) {
    const int64_t reach = (weight.size(i + 2) - 1) * p.dilation[i];
    if (p.stride[i] != 1 || p.output_padding[i] != 0 || p.padding[i] > reach) {
      return false;
    }
  }
  return true;
}


at::Tensor run_conv3d(const at::Tensor& input, const at::Tensor& weight,
                      const c10::optional<at::Tensor>& bias, const Conv3dParams& p,
                      bool channels_last_ok) {
  if (channels_last_ok && !p.transposed && input.is_cuda() && reduced_precision_conv(input)) {
    constexpr auto kNDHWC = at::MemoryFormat::ChannelsLast3d;
    return at::convolution(input.contiguous(kNDHWC), weight.contiguous(kNDHWC), bias, p.stride,
                           p.padding, p.dilation, /*transposed=*/false, p.output_padding,
                           p.groups);
  }
  if (transposed_conv_runs_as_forward(input, weight, p)) {
    // (C_in, C_out/g, k...) -> (g, C_in/g, C_out/g, k...) -> (C_out, C_in/g, k...), flipped.
    const int64_t c_in = weight.size(0);
    const int64_t c_out_per_group = weight.size(1);
    auto k = weight.sizes().slice(2);
    const at::Tensor forward_weight =
        weight.reshape({p.groups, c_in / p.groups, c_out_per_group, k[0], k[1], k[2]})
            .transpose(1, 2)
            .reshape({p.groups * c_out_per_group, c_in / p.groups, k[0], k[1], k[2]})
            .flip({2, 3, 4});
    std::array<int64_t, 3> padding;
    for (int i = 0; i < 3; ++i) {
      padding[i] = (k[i] - 1) * p.dilation[i] - p.padding[i];
    }
    return at::conv3d(input, forward_weight, bias, /*stride=*/{1, 1, 1}, padding, p.dilation,
                      p.groups);
  }
  return at::convolution(input, weight, bias, p.stride, p.padding, p.dilation, p.transposed,
                         p.output_padding, p.groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv3d_backward(
    const at::Tensor& grad_conv_output, const at::Tensor& input, const at::Tensor& weight,
    bool has_bias, const Conv3dParams& p, std::array<bool, 3> output_mask) {
  if (!(output_mask[0] || output_mask[1] || (output_mask[2] && has_bias))) {
    return {};
  }
  const int64_t c_out = grad_conv_output.size(1);
  const std::array<int64_t, 1> bias_sizes{c_out};
  return at::convolution_backward(
      grad_conv_output, input, weight,
      has_bias ? at::OptionalIntArrayRef(bias_sizes) : at::OptionalIntArrayRef(c10::nullopt),
      p.stride, p.padding, p.dilation, p.transposed, p.output_padding, p.groups,
      {output_mask[0], output_mask[1], output_mask[2] && has_bias});
}

}  // namespace fused_ops
