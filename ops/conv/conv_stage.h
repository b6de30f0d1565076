// The convolution stage of the fused conv operators: ATen's (cuDNN on CUDA, oneDNN or ATen's
// own kernels on the CPU) or, for float32 transposed convolutions with TF32 off, our split-TF32
// tensor-core kernels (split_tf32_conv3d.cuh), with the precision and layout policy of
// conv_stage.cpp: each fused operator stays at least as accurate as the modules it replaces,
// under the same precision flags.
#pragma once

#include "common/checks.h"
#include "conv/conv_kernels.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
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

// Debug query: the kernel that runs kTransposedAsForwardSplitTf32's convolutions on `input`'s
// device: "wgmma" (Hopper's warpgroup instructions) or "mma_sync" (CUTLASS's sm80 kernel);
// "" where that path cannot run (the CPU, a build without CUTLASS, compute capability < 8.0).
std::string split_tf32_conv_kernel(const at::Tensor& input);

// The Conv3dShape (conv_kernels.h: the kernels' plain description) of the forward convolution
// `forward` (not transposed) of `input` (N, C_in, D, H, W) into `c_out` channels with the
// kernel sizes of `weight` (its last three); output sizes by the usual formula.
Conv3dShape forward_conv3d_shape(const at::Tensor& input, int64_t c_out, const at::Tensor& weight,
                                 const Conv3dParams& forward);

// The path run_conv3d takes for these arguments (which passed check_conv3d_args) under the
// current precision flags.
ConvPath select_conv_path(const at::Tensor& input, const at::Tensor& weight,
                          const Conv3dParams& params, ConvConsumer consumer);

// The memory format of run_conv3d's result.
enum class ConvOutputLayout {
  kInputLayout,  // the one the input suggests (what the Meta kernels promise)
  // whichever the path computes fastest: channels_last_3d for the float32 CUDA rewrites of
  // transposed convolutions (NDHWC kernels), else the input's; for a caller that reads any
  // layout and does not return or save the result (conv_output_is_channels_last says which)
  kAsComputed,
};

// Runs the (transposed or forward) 3-d convolution described by `params`, for `consumer`.
// Arguments must already have passed check_conv3d_args. The result has the value of
// torch.nn.functional.conv3d / conv_transpose3d, in the memory format `layout` says; its
// rounding follows the policy of conv_stage.cpp. With relu_channel_moments (kReluGroupNorm
// and kAsComputed: an inference forward whose GroupNorm reads the output in place), where the
// path computes them with the convolution (conv_emits_relu_moments), *relu_channel_moments is set
// to the moments of relu(output) per (n, c), float64 (N, C_out, 2): mean and M2 over the
// positions; else it is left undefined.
at::Tensor run_conv3d(const at::Tensor& input, const at::Tensor& weight,
                      const c10::optional<at::Tensor>& bias, const Conv3dParams& params,
                      ConvConsumer consumer,
                      ConvOutputLayout layout = ConvOutputLayout::kInputLayout,
                      at::Tensor* relu_channel_moments = nullptr);

// Whether run_conv3d, asked for relu_channel_moments, computes them for these arguments: the
// split-TF32 path on the wgmma kernel (sm_90) with at least 128 output positions per sample.
bool conv_emits_relu_moments(const at::Tensor& input, const at::Tensor& weight,
                             const Conv3dParams& params, ConvConsumer consumer);

// Whether conv_transpose3d_relu_group_norm's inference forward with these arguments (which
// passed check_conv_group_norm_args; float32 with TF32 allowed) runs as
// run_tf32_conv_relu_group_norm: on Hopper, an NCDHW input of the shapes its kernel takes and
// where it is the faster (or forced by FUSED_OPS_TF32_WGMMA; see conv_stage.cpp).
bool tf32_conv_relu_group_norm_chosen(const at::Tensor& input, const at::Tensor& weight,
                                      const Conv3dParams& params);

// That forward, pipelined on our wgmma kernel with TF32 products
// (Tf32ConvReluGroupNormParams): (output NCDHW, conv output NDHWC, mean, rstd), as
// run_conv3d (kAsComputed, kReluGroupNorm) followed by the channels-last relu_group_norm
// computes them.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> run_tf32_conv_relu_group_norm(
    const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
    const Conv3dParams& params, const GroupNormShape& group_norm,
    const c10::optional<at::Tensor>& gn_weight, const c10::optional<at::Tensor>& gn_bias,
    double eps);

// Whether run_conv3d with ConvOutputLayout::kAsComputed returns channels_last_3d for these
// arguments.
bool conv_output_is_channels_last(const at::Tensor& input, const at::Tensor& weight,
                                  const Conv3dParams& params, ConvConsumer consumer);

// Whether autograd records a call of a conv operator with these tensors (grad mode on and one
// of them requiring grad): the call then runs the operator's internal forward, which saves the
// conv output, rather than its inference kernel. For the debug queries.
bool autograd_records(const at::Tensor& input, const at::Tensor& weight,
                      const c10::optional<at::Tensor>& conv_bias,
                      const c10::optional<at::Tensor>& gn_weight,
                      const c10::optional<at::Tensor>& gn_bias);

// The empty tensor run_conv3d returns for an output of `shape` (its dtype, device and memory
// format), for the Meta kernels.
at::Tensor empty_conv_output(const at::Tensor& input, c10::SymIntArrayRef shape);

// Whether conv3d_backward reads the gradient of run_conv3d's output in channels_last_3d
// without a copy (its float32 CUDA rewrites of transposed convolutions run NDHWC): the GroupNorm
// backward before it then writes that gradient so.
bool conv3d_backward_reads_channels_last(const at::Tensor& input, const at::Tensor& weight,
                                         const Conv3dParams& params);

// Whether conv3d_backward's convolutions read that gradient with TF32 products (the float32
// rewrite of a transposed convolution with TF32 allowed, CUDA; our wgmma kernels read it as it
// lies, dropping its low bits): the GroupNorm backward before it then rounds it to TF32 as it
// writes it (having summed it per channel first where the bias's gradient is asked for).
bool conv3d_backward_is_tf32(const at::Tensor& input, const at::Tensor& weight,
                             const Conv3dParams& params);

// Whether the backward of a transposed convolution that ReLU -> GroupNorm follows runs its two
// convolutions with the GroupNorm backward's input gradient computed as they load it
// (conv3d_backward_from_norm_operand), so that nothing writes the conv output's gradient: where
// the environment variable FUSED_OPS_NORM_GRAD_OPERAND is "1" (read per call; off by default:
// slower than writing it at the headline, benchmarks/h200-2026-11-28-norm-grad-operand/), for
// the float32 CUDA rewrites with our wgmma kernels (split TF32, or TF32 with TF32 allowed), one
// conv group, an NCDHW input, shapes the kernels take (split_tf32_conv3d_cuda's
// norm_grad_operand_supported).
bool conv3d_backward_takes_norm_operand(const at::Tensor& input, const at::Tensor& weight,
                                        const Conv3dParams& params);

// That backward: (grad_input, grad_weight), each undefined where output_mask is false, from the
// GroupNorm's output gradient, the saved conv output and the coefficients of
// norm::relu_group_norm_backward_coefficients (where conv3d_backward_takes_norm_operand).
std::tuple<at::Tensor, at::Tensor> conv3d_backward_from_norm_operand(
    const at::Tensor& grad_output, const at::Tensor& conv_output, const at::Tensor& coefficients,
    const at::Tensor& input, const at::Tensor& weight, const Conv3dParams& params,
    std::array<bool, 2> output_mask);

// The kernels of the backward of a transposed convolution that ReLU -> GroupNorm follows
// (conv3d_backward, or conv3d_backward_from_norm_operand where conv3d_backward_takes_norm_operand),
// every gradient asked for, for the debug query of conv_transpose3d_relu_group_norm's backward:
// "<dy> -> input_grad=<convolution>, weight_grad=<convolution>". dy, the conv output's gradient
// from the GroupNorm backward: "dy" (written in the input's layout), "dy_ndhwc" (written NDHWC),
// "dy_ndhwc_tf32" (written NDHWC, rounded to TF32: conv3d_backward_is_tf32) or "dy_from_norm"
// (never written: the convolutions compute it from the GroupNorm's coefficients as they load
// it). The convolutions: "aten" (ATen's convolution_backward, as eager's), "cudnn_ndhwc"
// (cuDNN's, NDHWC), "split_tf32" (the split-TF32 forward kernels: split_tf32_conv_kernel says
// which), "split_tf32_wgmma" / "tf32_wgmma" (our wgmma kernels, split-TF32 or TF32 products),
// "split_tf32_cutlass" (CUTLASS's sm80 wgrad).
std::string transposed_conv3d_backward_path(const at::Tensor& input, const at::Tensor& weight,
                                            const Conv3dParams& params);

// Gradients of run_conv3d's (grad_input, grad_weight, grad_bias) given the gradient of its
// output (any layout), each undefined where output_mask is false (grad_bias also when has_bias is
// false); grad_input and grad_weight in the memory formats that input and weight suggest. For Meta
// tensors, the empty gradients. Where the backward reads that gradient NDHWC
// (conv3d_backward_reads_channels_last), the caller takes the bias's gradient from the kernel
// that wrote it (the GroupNorm backward's channel sums) and passes has_bias false.
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv3d_backward(
    const at::Tensor& grad_conv_output, const at::Tensor& input, const at::Tensor& weight,
    bool has_bias, const Conv3dParams& params, std::array<bool, 3> output_mask);

// Samples [begin, begin + size) of a batch; size < 0: the whole batch.
struct BatchSlice {
  int64_t begin = 0;
  int64_t size = -1;
  // The slice of a tensor whose first dimension is the batch.
  at::Tensor of(const at::Tensor& t) const { return size < 0 ? t : t.narrow(0, begin, size); }
};

// Slice i of a batch of N samples cut into `chunks` chunks as even as can be.
inline BatchSlice batch_chunk(int64_t N, int64_t chunks, int64_t i) {
  const int64_t begin = N * i / chunks;
  return {begin, N * (i + 1) / chunks - begin};
}

// How many chunks of the batch a CPU pass of a fused conv operator runs its convolution by, so
// that the convolution's output (or its gradient), of shape conv_output, never exists whole
// (see conv_stage.cpp); 1 for the batch whole: on other devices, for small outputs, and for
// symbolic sizes.
int64_t cpu_batch_chunks(const at::Tensor& input, c10::SymIntArrayRef conv_output);

// The backward of a fused conv operator: checks the saved conv output against the arguments,
// gets (grad_conv_output, grad_gn_weight, grad_gn_bias) from norm_backward(mask, slice) (the
// GroupNorm part's backward over that slice of the batch, asked for the first when any
// convolution gradient is), and adds the convolution's gradients: (grad_input, grad_weight,
// grad_conv_bias, grad_gn_weight, grad_gn_bias), each undefined where output_mask is false.
// With batch_chunks > 1 (cpu_batch_chunks), both run chunk by chunk of the batch, the gradients
// of the parameters summed over the chunks in order.
// The checks of a fused conv operator's backward arguments: input and weight, and the saved conv
// output against them.
inline void check_conv_group_norm_backward_args(const char* op, const at::Tensor& input,
                                                const at::Tensor& weight,
                                                const at::Tensor& conv_output,
                                                const Conv3dParams& params) {
  const auto conv_shape = check_conv3d_args(op, input, weight, c10::nullopt, params);
  TORCH_CHECK(conv_output.sym_sizes() == c10::SymIntArrayRef(conv_shape), op,
              ": expected conv_output of shape ", c10::SymIntArrayRef(conv_shape), ", got ",
              conv_output.sym_sizes());
  check_same_device_and_dtype(op, "conv_output", conv_output, "input", input);
}

template <typename NormBackward>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> conv_group_norm_backward(
    const char* op, const at::Tensor& input, const at::Tensor& weight,
    const at::Tensor& conv_output, bool has_conv_bias, const Conv3dParams& params,
    std::array<bool, 5> output_mask, int64_t batch_chunks, const NormBackward& norm_backward) {
  check_conv_group_norm_backward_args(op, input, weight, conv_output, params);
  const bool need_conv_grad = output_mask[0] || output_mask[1] || output_mask[2];
  const std::array<bool, 3> norm_mask{need_conv_grad, output_mask[3], output_mask[4]};
  const std::array<bool, 3> conv_mask{output_mask[0], output_mask[1], output_mask[2]};
  if (batch_chunks <= 1 || !need_conv_grad) {
    auto [grad_conv_output, grad_gn_weight, grad_gn_bias] = norm_backward(norm_mask, BatchSlice{});
    auto [grad_input, grad_weight, grad_conv_bias] =
        conv3d_backward(grad_conv_output, input, weight, has_conv_bias, params, conv_mask);
    return {grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias};
  }
  at::Tensor grad_input;
  if (output_mask[0]) {
    grad_input =
        at::empty(input.sizes(), input.options().memory_format(input.suggest_memory_format()));
  }
  // grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias: sums over the chunks.
  std::array<at::Tensor, 4> sums;
  const auto add = [](at::Tensor& sum, const at::Tensor& part) {
    if (part.defined()) {
      sum = sum.defined() ? sum.add_(part) : part;  // the first part is the chunk's own tensor
    }
  };
  for (int64_t i = 0; i < batch_chunks; ++i) {
    const BatchSlice slice = batch_chunk(input.size(0), batch_chunks, i);
    auto [grad_conv_output, grad_gn_weight, grad_gn_bias] = norm_backward(norm_mask, slice);
    auto [part_input, part_weight, part_conv_bias] = conv3d_backward(
        grad_conv_output, slice.of(input), weight, has_conv_bias, params, conv_mask);
    if (grad_input.defined()) {
      slice.of(grad_input).copy_(part_input);
    }
    add(sums[0], part_weight);
    add(sums[1], part_conv_bias);
    add(sums[2], grad_gn_weight);
    add(sums[3], grad_gn_bias);
  }
  return {grad_input, sums[0], sums[1], sums[2], sums[3]};
}

}  // namespace conv
}  // namespace fused_ops
