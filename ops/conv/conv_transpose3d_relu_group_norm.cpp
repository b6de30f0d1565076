#include "conv/conv_transpose3d_relu_group_norm.h"

#include "common/checks.h"
#include "conv/conv_stage.h"
#include "norm/norm_kernels.h"
#include "norm/relu_group_norm.h"

namespace fused_ops {
namespace conv {
namespace {

constexpr const char* kName = "fused::conv_transpose3d_relu_group_norm";
constexpr const char* kBackwardName = "fused::conv_transpose3d_relu_group_norm (backward)";

// Whether the training forward (which saves the conv output in the input's layout) of these
// arguments reads the conv output as its convolution computes it, NDHWC, and has the
// channels-last GroupNorm's normalise pass write the NCDHW copy that is saved, instead of a
// transpose of its own (cuDNN's: 0.22 ms of the step at the headline on an H100, 2026-11-27,
// benchmarks/h100-2026-11-27-saved-copy): CUDA, an NCDHW input, a convolution that computes
// NDHWC, a channel count the channels-last GroupNorm takes.
bool saves_copy_in_normalise(const at::Tensor& input, const at::Tensor& weight,
                             const Conv3dParams& params) {
  if (!input.is_cuda() || input.numel() == 0 ||
      input.suggest_memory_format() != at::MemoryFormat::Contiguous) {
    return false;
  }
#ifdef FUSED_OPS_WITH_CUDA
  return norm::channels_last_norm_cuda_supported(weight.size(1) * params.groups,
                                                 static_cast<int64_t>(input.element_size())) &&
         conv_output_is_channels_last(input, weight, params, ConvConsumer::kReluGroupNorm);
#else
  return false;
#endif
}

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
  const bool cuda = input.is_cuda() && input.numel() > 0;
  const bool copy_in_normalise =
      layout == ConvOutputLayout::kInputLayout && saves_copy_in_normalise(input, weight, params);
  const ConvOutputLayout computed_layout =
      copy_in_normalise ? ConvOutputLayout::kAsComputed : layout;
  // The conv bias of cuDNN's convolution (the forward rewrite: TF32, or float16 / bfloat16):
  // ATen adds it to the convolution's output in a pass of its own, which the channels-last
  // GroupNorm does as it reads that output instead (relu(y + b), y + b in float32: as ATen's
  // add rounds it for float32; for the half types without its rounding to them). Measured at the
  // headline shape with a conv bias, float32, on an H100 (2026-11-27,
  // benchmarks/h100-2026-11-27-tf32-sweep): 1.565 -> 1.301 ms. (Our own convolutions add it in
  // their epilogue.)
  const bool has_conv_bias = conv_bias.has_value() && conv_bias->defined();
  const bool fold_conv_bias =
      computed_layout == ConvOutputLayout::kAsComputed && has_conv_bias && cuda &&
      select_conv_path(input, weight, params, ConvConsumer::kReluGroupNorm) ==
          ConvPath::kTransposedAsForward;
  // The GroupNorm's statistics, where the convolution computes them (conv_emits_relu_moments:
  // the forward on the split-TF32 wgmma kernel): its output is then read once. In training too:
  // the backward takes the saved mean and rstd as the moments of the saved output, and with the
  // epilogue's (float32 per tile, within a few 1e-6 relative) the headline's TF32-off gradients
  // have the errors against float64 they have with the GroupNorm's own, to three digits (H100,
  // 2026-11-27, benchmarks/h100-2026-11-27-wgrad-k-order/notes.txt; eager's own errors vary
  // from run to run with cuDNN's choice of kernels, and with them the ratio: 0.9-1.9).
  at::Tensor relu_channel_moments;
  at::Tensor conv_output =
      input.is_meta()
          ? empty_conv_output(input, shapes.conv_output)
          : run_conv3d(input, weight, fold_conv_bias ? c10::nullopt : conv_bias, params,
                       ConvConsumer::kReluGroupNorm, computed_layout, &relu_channel_moments);
  const bool channels_last_norm =
      !input.is_meta() && norm::relu_group_norm_runs_channels_last_cuda(conv_output);
  at::Tensor input_bias;
  if (fold_conv_bias) {
    const at::Tensor b = conv_bias->contiguous();
    if (channels_last_norm && !relu_channel_moments.defined()) {
      input_bias = b;
    } else {
      conv_output.add_(b.reshape({1, b.numel(), 1, 1, 1}));  // (as ATen would have)
    }
  }
  at::Tensor saved_conv_output;
  if (copy_in_normalise) {
    if (channels_last_norm) {
      saved_conv_output = at::empty(
          conv_output.sizes(), conv_output.options().memory_format(at::MemoryFormat::Contiguous));
    } else {
      conv_output = conv_output.contiguous();  // (not expected: its channels were checked above)
    }
  }
  auto [output, mean, rstd] = norm::relu_group_norm_forward_prechecked(
      conv_output, shapes.group_norm, gn_weight, gn_bias, eps, relu_channel_moments, input_bias,
      saved_conv_output);
  if (saved_conv_output.defined()) {
    return {output, saved_conv_output, mean, rstd};
  }
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
  // Where our wgmma kernels take both convolutions with the GroupNorm backward's input gradient
  // computed as they load it (conv3d_backward_takes_norm_operand), that gradient is never
  // written: the GroupNorm backward gives its per-(n, c) coefficients (and the conv bias's
  // gradient, its channel sums, from its sums pass), the convolutions read grad_output and the
  // saved conv output.
  if ((output_mask[0] || output_mask[1]) && !input.is_meta() && input.numel() > 0 &&
      conv3d_backward_takes_norm_operand(input, weight, params)) {
    check_conv_group_norm_backward_args(kBackwardName, input, weight, conv_output, params);
    const bool grad_conv_bias_asked = has_conv_bias && output_mask[2];
    at::Tensor grad_conv_bias;
    auto [coefficients, grad_gn_weight, grad_gn_bias] = norm::relu_group_norm_backward_coefficients(
        grad_output, conv_output, mean, rstd, num_groups, gn_weight,
        {output_mask[3], output_mask[4]}, grad_conv_bias_asked ? &grad_conv_bias : nullptr);
    auto [grad_input, grad_weight] =
        conv3d_backward_from_norm_operand(grad_output, conv_output, coefficients, input, weight,
                                          params, {output_mask[0], output_mask[1]});
    return {grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias};
  }
  // The whole batch: chunks (conv_stage.h) were measured for Conv3dGroupNormMean only (oneDNN's
  // transposed convolution of one sample at a time was 3x slower per sample than of two).
  const bool grad_conv_output_channels_last =
      conv3d_backward_reads_channels_last(input, weight, params);
  // The conv output's gradient rounded to TF32 (to nearest) where the convolutions' backward
  // reads it with TF32 products: our wgmma kernels would otherwise drop its low bits (round
  // toward zero), which put the headline's input gradient at 1.58x eager's error against
  // float64; cuDNN's weight gradient of the rewrite (where ours does not take the shape) was at
  // 3x on a small shape (H100, 2026-11-28).
  const bool grad_conv_output_tf32_rounded = conv3d_backward_is_tf32(input, weight, params);
  // The conv bias's gradient, the conv output gradient's sum per channel, from the GroupNorm
  // backward where it writes that gradient NDHWC (conv3d_backward's contract): its kernel sums
  // the values before it rounds them (float32 per tile, the tiles in double), so no pass reads
  // the gradient again for it.
  const bool conv_bias_grad_from_norm =
      has_conv_bias && output_mask[2] && grad_conv_output_channels_last;
  at::Tensor grad_conv_bias;
  auto grads = conv_group_norm_backward(
      kBackwardName, input, weight, conv_output, has_conv_bias && !conv_bias_grad_from_norm, params,
      output_mask,
      /*batch_chunks=*/1, [&](std::array<bool, 3> mask, const BatchSlice& slice) {
        return norm::relu_group_norm_backward_in_layout(
            slice.of(grad_output), slice.of(conv_output), slice.of(mean), slice.of(rstd),
            num_groups, gn_weight, mask, grad_conv_output_channels_last,
            grad_conv_output_tf32_rounded, conv_bias_grad_from_norm ? &grad_conv_bias : nullptr);
      });
  if (conv_bias_grad_from_norm) {
    std::get<2>(grads) = grad_conv_bias;
  }
  return grads;
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
  // A call that autograd records runs the internal forward (conv output saved in the input's
  // layout: the GroupNorm reads it as computed where saves_copy_in_normalise); otherwise the
  // conv output stays as computed (conv_transpose3d_relu_group_norm).
  const bool records = autograd_records(input, weight, conv_bias, gn_weight, gn_bias);
  const bool conv_output_channels_last =
      (!records || saves_copy_in_normalise(input, weight, params)) &&
      conv_output_is_channels_last(input, weight, params, ConvConsumer::kReluGroupNorm);
  const ConvPath path = select_conv_path(input, weight, params, ConvConsumer::kReluGroupNorm);
  const at::Tensor conv_output = at::empty_symint(
      shapes.conv_output, input.options().device(at::kMeta).memory_format(
                              conv_output_channels_last ? at::MemoryFormat::ChannelsLast3d
                                                        : input.suggest_memory_format()));
  // "+relu_moments": the convolution computes the GroupNorm's statistics too (run_conv3d; the
  // opted-into TF32 one, run_tf32_conv_relu_group_norm, only in an inference forward).
  const bool conv_moments =
      conv_output_channels_last &&
      conv_emits_relu_moments(input, weight, params, ConvConsumer::kReluGroupNorm) &&
      !(records && path == ConvPath::kTransposedAsForward);
  return std::string(conv_path_name(path)) + (conv_moments ? "+relu_moments" : "") + " -> " +
         norm::relu_group_norm_kernel_name(conv_output, input.device());
}

std::string conv_transpose3d_relu_group_norm_backward_path(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
    at::IntArrayRef dilation, int64_t num_groups, const c10::optional<at::Tensor>& gn_weight,
    const c10::optional<at::Tensor>& gn_bias, double eps) {
  const Conv3dParams params = make_conv3d_params(kName, stride, padding, output_padding, dilation,
                                                 groups, /*transposed=*/true);
  check_conv_group_norm_args(kName, input, weight, conv_bias, params, num_groups, gn_weight,
                             gn_bias, eps);
  return transposed_conv3d_backward_path(input, weight, params);
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
