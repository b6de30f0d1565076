// Autograd kernels of the public operators, in C++, so that a process without Python (a
// libtorch program) can train through them too.
//
// Each public operator's Autograd kernel runs the internal forward operator (which also
// returns what backward needs) below autograd, saves what backward needs, and its backward
// calls the internal backward operator; both go through the dispatcher, so that
// torch.compile traces them as opaque operators (with their Meta kernels). When no gradient
// is needed (no input requires grad, or grad mode is off) the kernel goes straight to the
// backend's public kernel and saves nothing.
//
// The backward formulas are single-differentiable (no double backward).
#include "common/api.h"
#include "conv/conv3d_group_norm_mean.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace fused_ops {
namespace {

using OptTensor = c10::optional<at::Tensor>;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool is_defined(const OptTensor& t) { return t.has_value() && t->defined(); }

OptTensor as_optional(const at::Tensor& t) { return t.defined() ? OptTensor(t) : c10::nullopt; }

// Function::apply counts only the tensor arguments that are present as inputs (an absent
// optional is no input), so needs_input_grad's index skips absent ones. Forward records
// which of its tensor arguments were present; input_grad_mask maps them back.
void save_presence(AutogradContext* ctx, std::initializer_list<bool> present) {
  int64_t bits = 0;
  int64_t i = 0;
  for (bool p : present) {
    bits |= static_cast<int64_t>(p) << i++;
  }
  ctx->saved_data["present"] = bits;
}

// Whether each of the K tensor arguments (in order) needs a gradient.
template <size_t K>
std::array<bool, K> input_grad_mask(AutogradContext* ctx) {
  const int64_t present = ctx->saved_data["present"].toInt();
  std::array<bool, K> mask{};
  size_t edge = 0;
  for (size_t i = 0; i < K; ++i) {
    if ((present >> i) & 1) {
      mask[i] = ctx->needs_input_grad(edge++);
    }
  }
  return mask;
}

// Whether autograd must record this call: grad mode is on and some input requires grad.
bool needs_grad(std::initializer_list<const at::Tensor*> tensors,
                std::initializer_list<const OptTensor*> optional_tensors) {
  if (!at::GradMode::is_enabled()) {
    return false;
  }
  for (const at::Tensor* t : tensors) {
    if (t->defined() && t->requires_grad()) return true;
  }
  for (const OptTensor* t : optional_tensors) {
    if (is_defined(*t) && (*t)->requires_grad()) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------
// relu_group_norm(input, num_groups, weight, bias, eps)
class ReluGroupNormFunction : public torch::autograd::Function<ReluGroupNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t num_groups,
                            const OptTensor& weight, const OptTensor& bias, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [output, mean, rstd] = api::_relu_group_norm_forward(input, num_groups, weight, bias, eps);
    ctx->save_for_backward({input, weight.value_or(at::Tensor()), mean, rstd});
    save_presence(ctx, {true, is_defined(weight), is_defined(bias)});
    ctx->saved_data["num_groups"] = num_groups;
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    // Differentiable inputs, in order: input, weight, bias.
    auto [grad_input, grad_weight, grad_bias] = api::_relu_group_norm_backward(
        grad_outputs[0], saved[0], saved[2], saved[3], ctx->saved_data["num_groups"].toInt(),
        as_optional(saved[1]), input_grad_mask<3>(ctx));
    return {grad_input, at::Tensor(), grad_weight, grad_bias, at::Tensor()};
  }
};

at::Tensor relu_group_norm_autograd(const at::Tensor& input, int64_t num_groups,
                                    const OptTensor& weight, const OptTensor& bias, double eps) {
  if (!needs_grad({&input}, {&weight, &bias})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return api::relu_group_norm(input, num_groups, weight, bias, eps);
  }
  return ReluGroupNormFunction::apply(input, num_groups, weight, bias, eps);
}

// ---------------------------------------------------------------------------------------
// group_norm_mean(input, num_groups, weight, bias, eps)
class GroupNormMeanFunction : public torch::autograd::Function<GroupNormMeanFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t num_groups,
                            const OptTensor& weight, const OptTensor& bias, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [output, mean, rstd, channel_mean] =
        api::_group_norm_mean_forward(input, num_groups, weight, bias, eps);
    ctx->save_for_backward({input, weight.value_or(at::Tensor()), mean, rstd, channel_mean});
    save_presence(ctx, {true, is_defined(weight), is_defined(bias)});
    ctx->saved_data["num_groups"] = num_groups;
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto [grad_input, grad_weight, grad_bias] = api::_group_norm_mean_backward(
        grad_outputs[0], saved[0], saved[2], saved[3], saved[4],
        ctx->saved_data["num_groups"].toInt(), as_optional(saved[1]), input_grad_mask<3>(ctx));
    return {grad_input, at::Tensor(), grad_weight, grad_bias, at::Tensor()};
  }
};

at::Tensor group_norm_mean_autograd(const at::Tensor& input, int64_t num_groups,
                                    const OptTensor& weight, const OptTensor& bias, double eps) {
  if (!needs_grad({&input}, {&weight, &bias})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return api::group_norm_mean(input, num_groups, weight, bias, eps);
  }
  return GroupNormMeanFunction::apply(input, num_groups, weight, bias, eps);
}

// ---------------------------------------------------------------------------------------
// Saves the convolution's int[3] arguments and groups (shared by both conv operators).
void save_conv_args(AutogradContext* ctx, at::IntArrayRef stride, at::IntArrayRef padding,
                    at::IntArrayRef output_padding, at::IntArrayRef dilation, int64_t groups,
                    int64_t num_groups, bool has_conv_bias) {
  ctx->saved_data["stride"] = stride.vec();
  ctx->saved_data["padding"] = padding.vec();
  ctx->saved_data["output_padding"] = output_padding.vec();
  ctx->saved_data["dilation"] = dilation.vec();
  ctx->saved_data["groups"] = groups;
  ctx->saved_data["num_groups"] = num_groups;
  ctx->saved_data["has_conv_bias"] = has_conv_bias;
}

// conv_transpose3d_relu_group_norm(input, weight, conv_bias, stride, padding, output_padding,
//                                  groups, dilation, num_groups, gn_weight, gn_bias, eps)
class ConvTranspose3dReluGroupNormFunction
    : public torch::autograd::Function<ConvTranspose3dReluGroupNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const OptTensor& conv_bias, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                            at::IntArrayRef dilation, int64_t num_groups,
                            const OptTensor& gn_weight, const OptTensor& gn_bias, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [output, conv_output, mean, rstd] = api::_conv_transpose3d_relu_group_norm_forward(
        input, weight, conv_bias, stride, padding, output_padding, groups, dilation, num_groups,
        gn_weight, gn_bias, eps);
    ctx->save_for_backward(
        {input, weight, gn_weight.value_or(at::Tensor()), conv_output, mean, rstd});
    save_presence(ctx,
                  {true, true, is_defined(conv_bias), is_defined(gn_weight), is_defined(gn_bias)});
    save_conv_args(ctx, stride, padding, output_padding, dilation, groups, num_groups,
                   is_defined(conv_bias));
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto& data = ctx->saved_data;
    auto [grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias] =
        api::_conv_transpose3d_relu_group_norm_backward(
            grad_outputs[0], saved[0], saved[1], saved[3], saved[4], saved[5],
            data["stride"].toIntVector(), data["padding"].toIntVector(),
            data["output_padding"].toIntVector(), data["groups"].toInt(),
            data["dilation"].toIntVector(), data["num_groups"].toInt(), as_optional(saved[2]),
            data["has_conv_bias"].toBool(), input_grad_mask<5>(ctx));
    return {grad_input,   grad_weight,  grad_conv_bias, at::Tensor(),   at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(),   grad_gn_weight, grad_gn_bias, at::Tensor()};
  }
};

at::Tensor conv_transpose3d_relu_group_norm_autograd(
    const at::Tensor& input, const at::Tensor& weight, const OptTensor& conv_bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
    at::IntArrayRef dilation, int64_t num_groups, const OptTensor& gn_weight,
    const OptTensor& gn_bias, double eps) {
  if (!needs_grad({&input, &weight}, {&conv_bias, &gn_weight, &gn_bias})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return api::conv_transpose3d_relu_group_norm(input, weight, conv_bias, stride, padding,
                                                 output_padding, groups, dilation, num_groups,
                                                 gn_weight, gn_bias, eps);
  }
  return ConvTranspose3dReluGroupNormFunction::apply(input, weight, conv_bias, stride, padding,
                                                     output_padding, groups, dilation, num_groups,
                                                     gn_weight, gn_bias, eps);
}

// conv3d_group_norm_mean(input, weight, conv_bias, stride, padding, dilation, groups,
//                        num_groups, gn_weight, gn_bias, eps)
class Conv3dGroupNormMeanFunction : public torch::autograd::Function<Conv3dGroupNormMeanFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const OptTensor& conv_bias, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                            int64_t num_groups, const OptTensor& gn_weight,
                            const OptTensor& gn_bias, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [output, conv_output, mean, rstd, channel_mean] =
        api::_conv3d_group_norm_mean_forward(input, weight, conv_bias, stride, padding, dilation,
                                             groups, num_groups, gn_weight, gn_bias, eps);
    ctx->save_for_backward(
        {input, weight, gn_weight.value_or(at::Tensor()), conv_output, mean, rstd, channel_mean});
    save_presence(ctx,
                  {true, true, is_defined(conv_bias), is_defined(gn_weight), is_defined(gn_bias)});
    save_conv_args(ctx, stride, padding, /*output_padding=*/{0, 0, 0}, dilation, groups, num_groups,
                   is_defined(conv_bias));
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto& data = ctx->saved_data;
    auto [grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias] =
        api::_conv3d_group_norm_mean_backward(
            grad_outputs[0], saved[0], saved[1], saved[3], saved[4], saved[5], saved[6],
            data["stride"].toIntVector(), data["padding"].toIntVector(),
            data["dilation"].toIntVector(), data["groups"].toInt(), data["num_groups"].toInt(),
            as_optional(saved[2]), data["has_conv_bias"].toBool(), input_grad_mask<5>(ctx));
    return {grad_input,   grad_weight,  grad_conv_bias, at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), grad_gn_weight, grad_gn_bias, at::Tensor()};
  }
};

// The same operator on the one-pass training path (CUDA; conv3d_group_norm_mean.h): saves the
// statistics, not the convolution's output.
class Conv3dGroupNormMeanOnePassFunction
    : public torch::autograd::Function<Conv3dGroupNormMeanOnePassFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const OptTensor& conv_bias, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                            int64_t num_groups, const OptTensor& gn_weight,
                            const OptTensor& gn_bias, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [output, mean, rstd, channel_mean, input_sums] =
        api::_conv3d_group_norm_mean_onepass_forward(input, weight, conv_bias, stride, padding,
                                                     dilation, groups, num_groups, gn_weight,
                                                     gn_bias, eps);
    ctx->save_for_backward({input, weight, conv_bias.value_or(at::Tensor()),
                            gn_weight.value_or(at::Tensor()), mean, rstd, channel_mean,
                            input_sums});
    save_presence(ctx,
                  {true, true, is_defined(conv_bias), is_defined(gn_weight), is_defined(gn_bias)});
    save_conv_args(ctx, stride, padding, /*output_padding=*/{0, 0, 0}, dilation, groups, num_groups,
                   is_defined(conv_bias));
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto& data = ctx->saved_data;
    auto [grad_input, grad_weight, grad_conv_bias, grad_gn_weight, grad_gn_bias] =
        api::_conv3d_group_norm_mean_onepass_backward(
            grad_outputs[0], saved[0], saved[1], as_optional(saved[2]), saved[4], saved[5],
            saved[6], saved[7], data["stride"].toIntVector(), data["padding"].toIntVector(),
            data["dilation"].toIntVector(), data["groups"].toInt(), data["num_groups"].toInt(),
            as_optional(saved[3]), input_grad_mask<5>(ctx));
    return {grad_input,   grad_weight,  grad_conv_bias, at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), grad_gn_weight, grad_gn_bias, at::Tensor()};
  }
};

at::Tensor conv3d_group_norm_mean_autograd(const at::Tensor& input, const at::Tensor& weight,
                                           const OptTensor& conv_bias, at::IntArrayRef stride,
                                           at::IntArrayRef padding, at::IntArrayRef dilation,
                                           int64_t groups, int64_t num_groups,
                                           const OptTensor& gn_weight, const OptTensor& gn_bias,
                                           double eps) {
  if (!needs_grad({&input, &weight}, {&conv_bias, &gn_weight, &gn_bias})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return api::conv3d_group_norm_mean(input, weight, conv_bias, stride, padding, dilation, groups,
                                       num_groups, gn_weight, gn_bias, eps);
  }
  if (conv::conv3d_group_norm_mean_trains_onepass(input, weight, conv_bias, stride, padding,
                                                  dilation, groups, num_groups, gn_weight, gn_bias,
                                                  eps)) {
    return Conv3dGroupNormMeanOnePassFunction::apply(input, weight, conv_bias, stride, padding,
                                                     dilation, groups, num_groups, gn_weight,
                                                     gn_bias, eps);
  }
  return Conv3dGroupNormMeanFunction::apply(input, weight, conv_bias, stride, padding, dilation,
                                            groups, num_groups, gn_weight, gn_bias, eps);
}

}  // namespace

TORCH_LIBRARY_IMPL(fused, Autograd, m) {
  m.impl("relu_group_norm", TORCH_FN(relu_group_norm_autograd));
  m.impl("group_norm_mean", TORCH_FN(group_norm_mean_autograd));
  m.impl("conv_transpose3d_relu_group_norm", TORCH_FN(conv_transpose3d_relu_group_norm_autograd));
  m.impl("conv3d_group_norm_mean", TORCH_FN(conv3d_group_norm_mean_autograd));
}

}  // namespace fused_ops
