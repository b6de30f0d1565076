#include "conv/conv_transpose3d_relu_group_norm.h"

#include "common/checks.h"
#include "conv/conv_stage.h"
#include "norm/relu_group_norm.h"

namespace fused_ops {
namespace conv {
namespace {

constexpr const char* kName = "fused::conv_transpose3d_relu_group_norm";
constexpr const char* kBackwardName = "fused::conv_transpose3d_relu_group_norm (backward)";

// (output, conv_output, mean, rstd), conv_output in `layout` (conv_stage.h).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward_with_conv_output_in(
    ConvOutputLayout layout, const at::Tensor& input, const at::Tensor& weight,
    const c10::optional<at::Tensor>& conv_bias, at::IntArrayRef stride, at::IntArrayRef padding,
    at::IntArrayRef output_padding, int64_t groups, at::IntArrayRef dilation, int64_t num_groups,
    const c10::optional<at::Tensor>& gn_weight, const c10::optional<at::Tensor>& gn_bias,
    double eps) {
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, output_padding, dilation,
                                                 groups, /*transposed=*/true);
  const ConvGroupNormShapes shapes = check_conv_group_norm_args(
      kName, input, weight, conv_bias, params, num_groups, gn_weight, gn_bias, eps);
  if (layout == ConvOutputLayout::kAsComputed && !input.is_meta() && input.numel() > 0 &&
      tf32_conv_relu_group_norm_chosen(input, weight, params)) {
    // Opted into: both stages interleaved on our TF32 wgmma kernel (conv_stage.cpp).
    return run_tf32_conv_relu_group_norm(input, weight, conv_bias, params,
                                         concrete(shapes.group_norm), gn_weight, gn_bias, eps);
  }
  // The conv bias of the inference forward's cuDNN convolution (the forward rewrite: TF32, or
  // float16 / bfloat16): ATen adds it to the convolution's output in a pass of its own, which
  // the channels-last GroupNorm does as it reads that output instead (relu(y + b), y + b in
  // float32: as ATen's add rounds it for float32; for the half types without its rounding to
  // them). Measured at the headline shape with a conv bias, float32, on an H100 (2026-11-27,
  // benchmarks/h100-2026-11-27-tf32-sweep): 1.565 -> 1.301 ms. (Our own convolutions add it in
  // their epilogue; the training forward saves the output with it.)
  const bool has_conv_bias = conv_bias.has_value() && conv_bias->defined();
  const bool fold_conv_bias =
      layout == ConvOutputLayout::kAsComputed && has_conv_bias && input.is_cuda() &&
      input.numel() > 0 &&
      select_conv_path(input, weight, params, ConvConsumer::kReluGroupNorm) ==
          ConvPath::kTransposedAsForward;
  // The GroupNorm's statistics, where the convolution computes them (conv_emits_relu_moments:
  // the inference forward on the split-TF32 wgmma kernel): its output is then read once.
  at::Tensor relu_channel_moments;
  const at::Tensor conv_output =
      input.is_meta() ? empty_conv_output(input, shapes.conv_output)
                      : run_conv3d(input, weight, fold_conv_bias ? c10::nullopt : conv_bias, params,
                                   ConvConsumer::kReluGroupNorm, layout, &relu_channel_moments);
  at::Tensor input_bias;
  if (fold_conv_bias) {
    const at::Tensor b = conv_bias->contiguous();
    if (norm::relu_group_norm_takes_input_bias(conv_output) && !relu_channel_moments.defined()) {
      input_bias = b;
    } else {
      conv_output.add_(b.reshape({1, b.numel(), 1, 1, 1}));  // (as ATen would have)
    }
  }
  auto [output, mean, rstd] = norm::relu_group_norm_forward_prechecked(
      conv_output, shapes.group_norm, gn_weight, gn_bias, eps, relu_channel_moments, input_bias);
  return {output, conv_output, mean, rstd};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> conv_transpose3d_relu_group_norm_forward(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
    at::IntArrayRef dilation, int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    const c10::optional<at::Tensor>& gn_bias, double eps) {
  return forward_with_conv_output_in(ConvOutputLayout::kInputLayout, input, weight, conv_bias,
                                     stride, padding, output_padding, groups, dilation, num_groups,
                                     gn_weight, gn_bias, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
conv_transpose3d_relu_group_norm_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                          const at::Tensor& weight, const at::Tensor& conv_output,
                                          const at::Tensor& mean, const at::Tensor& rstd,
                                          at::IntArrayRef stride, at::IntArrayRef padding,
                                          at::IntArrayRef output_padding, int64_t groups,
                                          at::IntArrayRef dilation, int64_t num_groups,
                                          const c10::optional<at::Tensor>& gn_weight,
                                          bool has_conv_bias, std::array<bool, 5> output_mask) {
  const Conv3dParams params = make_conv3d_params(kBackwardName, stride, padding, output_padding,
                                                 dilation, groups, /*transposed=*/true);
  // The whole batch: chunks (conv_stage.h) were measured for Conv3dGroupNormMean only (oneDNN's
  // transposed convolution of one sample at a time was 3x slower per sample than of two).
  const bool grad_conv_output_channels_last =
      conv3d_backward_reads_channels_last(input, weight, params);
  return conv_group_norm_backward(
      kBackwardName, input, weight, conv_output, has_conv_bias, params, output_mask,
      /*batch_chunks=*/1, [&](std::array<bool, 3> mask, const BatchSlice& slice) {
        return norm::relu_group_norm_backward_in_layout(
            slice.of(grad_output), slice.of(conv_output), slice.of(mean), slice.of(rstd),
            num_groups, gn_weight, mask, grad_conv_output_channels_last);
      });
}

std::string conv_transpose3d_relu_group_norm_path(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
    at::IntArrayRef dilation, int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    const c10::optional<at::Tensor>& gn_bias, double eps) {
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, output_padding, dilation,
                                                 groups, /*transposed=*/true);
  const ConvGroupNormShapes shapes = check_conv_group_norm_args(
      kName, input, weight, conv_bias, params, num_groups, gn_weight, gn_bias, eps);
  // A call that autograd records runs the internal forward (conv output in the input's layout,
  // saved); otherwise the conv output stays as computed (conv_transpose3d_relu_group_norm).
  const bool conv_output_channels_last =
      !autograd_records(input, weight, conv_bias, gn_weight, gn_bias) &&
      conv_output_is_channels_last(input, weight, params, ConvConsumer::kReluGroupNorm);
  const at::Tensor conv_output = at::empty_symint(
      shapes.conv_output, input.options().device(at::kMeta).memory_format(
                              conv_output_channels_last ? at::MemoryFormat::ChannelsLast3d
                                                        : input.suggest_memory_format()));
  // "+relu_moments": the convolution computes the GroupNorm's statistics too (run_conv3d).
  const bool conv_moments =
      conv_output_channels_last &&
      conv_emits_relu_moments(input, weight, params, ConvConsumer::kReluGroupNorm);
  return std::string(conv_path_name(
             select_conv_path(input, weight, params, ConvConsumer::kReluGroupNorm))) +
         (conv_moments ? "+relu_moments" : "") + " -> " +
         norm::relu_group_norm_kernel_name(conv_output, input.device());
}

at::Tensor conv_transpose3d_relu_group_norm(const at::Tensor& input, const at::Tensor& weight,
                                            const c10::optional<at::Tensor>& conv_bias,
                                            at::IntArrayRef stride, at::IntArrayRef padding,
                                            at::IntArrayRef output_padding, int64_t groups,
                                            at::IntArrayRef dilation, int64_t num_groups,
                                            const c10::optional<at::Tensor>& gn_weight,
                                            const c10::optional<at::Tensor>& gn_bias, double eps) {
  // Below autograd: this kernel runs when no gradient is needed, so the conv output is not
  // saved and may stay in the layout its convolution computed (NDHWC for the float32 CUDA
  // rewrites), which the GroupNorm reads in place.
  return std::get<0>(forward_with_conv_output_in(ConvOutputLayout::kAsComputed, input, weight,
                                                 conv_bias, stride, padding, output_padding, groups,
                                                 dilation, num_groups, gn_weight, gn_bias, eps));
}

}  // namespace conv
}  // namespace fused_ops
