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
// the same function; only the rounding differs.
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

#include <ATen/Context.h>
#include <ATen/ops/_convolution.h>
#include <ATen/ops/conv3d.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>

namespace fused_ops {
namespace conv {
namespace {

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

at::Tensor transposed_as_forward(const at::Tensor& input, const at::Tensor& weight,
                                 const c10::optional<at::Tensor>& bias, const Conv3dParams& p) {
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

}  // namespace

const char* conv_path_name(ConvPath path) {
  switch (path) {
    case ConvPath::kAten:
      return "aten";
    case ConvPath::kAtenFloat32:
      return "aten_float32";
    case ConvPath::kTransposedAsForward:
      return "transposed_as_forward";
  }
  return "unknown";
}

ConvPath select_conv_path(const at::Tensor& input, const at::Tensor& weight, const Conv3dParams& p,
                          ConvConsumer consumer) {
  const bool is_float = input.scalar_type() == at::kFloat;
  if (consumer == ConvConsumer::kGroupNormMean) {
    return is_float && input.is_cuda() ? ConvPath::kAtenFloat32 : ConvPath::kAten;
  }
  if (p.transposed && input.is_cuda() && rewritable_as_forward(weight, p)) {
    if (is_half_type(input) ||
        (is_float && at::globalContext().allowTF32CuDNN() && eager_transposed_is_tf32(weight, p))) {
      return ConvPath::kTransposedAsForward;
    }
  }
  return ConvPath::kAten;
}

at::Tensor run_conv3d(const at::Tensor& input, const at::Tensor& weight,
                      const c10::optional<at::Tensor>& bias, const Conv3dParams& p,
                      ConvConsumer consumer) {
  at::Tensor output;
  switch (select_conv_path(input, weight, p, consumer)) {
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
      output = transposed_as_forward(input, weight, bias, p);
      break;
    case ConvPath::kAten:
      output = at::convolution(input, weight, bias, p.stride, p.padding, p.dilation, p.transposed,
                               p.output_padding, p.groups);
      break;
  }
  // The layout the Meta kernels promise (backends differ for channels-last inputs).
  return output.contiguous(input.suggest_memory_format());
}

at::Tensor empty_conv_output(const at::Tensor& input, c10::SymIntArrayRef shape) {
  return at::empty_symint(shape, input.options().memory_format(input.suggest_memory_format()));
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
  const int64_t c_out = grad_conv_output.size(1);
  const std::array<int64_t, 1> bias_sizes{c_out};
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
      grad_conv_output, input, weight,
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
