// The operator schemas of the `fused` namespace. Argument order follows
// torch.nn.functional. The underscore operators are internal: forward passes that also
// return what backward needs, and the backward passes, from which the Autograd kernels
// (autograd.cpp) are built; and the debug queries `_<op>_path`, which take an operator's
// arguments and name the kernels a call with them runs.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

TORCH_LIBRARY(fused, m) {
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  constexpr const char* kReluGroupNormArgs =
      "(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05)";
  constexpr const char* kGroupNormMeanArgs =
      "(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05)";
  constexpr const char* kConvTransposeArgs =
      "(Tensor input, Tensor weight, Tensor? conv_bias, int[3] stride, int[3] padding, "
      "int[3] output_padding, int groups, int[3] dilation, int num_groups, Tensor? gn_weight, "
      "Tensor? gn_bias, float eps)";
  constexpr const char* kConv3dArgs =
      "(Tensor input, Tensor weight, Tensor? conv_bias, int[3] stride, int[3] padding, "
      "int[3] dilation, int groups, int num_groups, Tensor? gn_weight, Tensor? gn_bias, "
      "float eps)";
  auto def = [&](const std::string& name, const char* args, const char* returns) {
    m.def((name + args + " -> " + returns).c_str(), tags);
  };

  // Public operators.
  def("relu_group_norm", kReluGroupNormArgs, "Tensor");
  def("group_norm_mean", kGroupNormMeanArgs, "Tensor");
  def("conv_transpose3d_relu_group_norm", kConvTransposeArgs, "Tensor");
  def("conv3d_group_norm_mean", kConv3dArgs, "Tensor");

  // Internal forwards: (output, what backward needs). mean and rstd have shape
  // (N, num_groups), channel_mean (N, C); conv_output is the convolution's output.
  def("_relu_group_norm_forward", kReluGroupNormArgs, "(Tensor, Tensor, Tensor)");
  def("_group_norm_mean_forward", kGroupNormMeanArgs, "(Tensor, Tensor, Tensor, Tensor)");
  def("_conv_transpose3d_relu_group_norm_forward", kConvTransposeArgs,
      "(Tensor, Tensor, Tensor, Tensor)");
  def("_conv3d_group_norm_mean_forward", kConv3dArgs, "(Tensor, Tensor, Tensor, Tensor, Tensor)");

  // The one-pass training path of conv3d_group_norm_mean (CUDA): (output, mean, rstd,
  // channel_mean, input_sums), and the gradients from those statistics (the conv output never
  // stored). input_sums: x's sums per (sample, input channel) over each tap's positions, then
  // its total, float64 (N, C_in, kD * kH * kW + 1) for float32 input (else empty), which the
  // backward centres x with; None there sums x again.
  def("_conv3d_group_norm_mean_onepass_forward", kConv3dArgs,
      "(Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "_conv3d_group_norm_mean_onepass_backward(Tensor grad_output, Tensor input, "
      "Tensor weight, Tensor? conv_bias, Tensor mean, Tensor rstd, Tensor channel_mean, "
      "Tensor? input_sums, int[3] stride, int[3] padding, int[3] dilation, int groups, "
      "int num_groups, Tensor? gn_weight, bool[5] output_mask) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor)",
      tags);

  // Internal backwards: the gradients of the differentiable arguments, in order, each
  // undefined where output_mask is false. `input` is the forward's input (for
  // relu_group_norm, the pre-ReLU input).
  m.def(
      "_relu_group_norm_backward(Tensor grad_output, Tensor input, Tensor mean, Tensor rstd, "
      "int num_groups, Tensor? weight, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
      tags);
  m.def(
      "_group_norm_mean_backward(Tensor grad_output, Tensor input, Tensor mean, Tensor rstd, "
      "Tensor channel_mean, int num_groups, Tensor? weight, bool[3] output_mask) -> "
      "(Tensor, Tensor, Tensor)",
      tags);
  m.def(
      "_conv_transpose3d_relu_group_norm_backward(Tensor grad_output, Tensor input, "
      "Tensor weight, Tensor conv_output, Tensor mean, Tensor rstd, int[3] stride, "
      "int[3] padding, int[3] output_padding, int groups, int[3] dilation, int num_groups, "
      "Tensor? gn_weight, bool has_conv_bias, bool[5] output_mask) -> "
      "(Tensor, Tensor, Tensor, Tensor, Tensor)",
      tags);
  m.def(
      "_conv3d_group_norm_mean_backward(Tensor grad_output, Tensor input, Tensor weight, "
      "Tensor conv_output, Tensor mean, Tensor rstd, Tensor channel_mean, int[3] stride, "
      "int[3] padding, int[3] dilation, int groups, int num_groups, Tensor? gn_weight, "
      "bool has_conv_bias, bool[5] output_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
      tags);

  // Debug queries: the path a call with these arguments takes (e.g. for conv3d_group_norm_mean
  // "aten_float32 -> group_norm_mean"), under the current precision flags.
  def("_relu_group_norm_path", kReluGroupNormArgs, "str");
  def("_group_norm_mean_path", kGroupNormMeanArgs, "str");
  def("_conv_transpose3d_relu_group_norm_path", kConvTransposeArgs, "str");
  // The kernels of a training step's backward (conv_transpose3d_relu_group_norm only: the others'
  // backwards are those their forward paths name).
  def("_conv_transpose3d_relu_group_norm_backward_path", kConvTransposeArgs, "str");
  def("_conv3d_group_norm_mean_path", kConv3dArgs, "str");
  // Which kernel runs the float32-grade (split-TF32) convolution on input's device: "wgmma",
  // "mma_sync", or "" where that path cannot run.
  def("_split_tf32_conv_kernel", "(Tensor input)", "str");
  // Which instructions run the float32 products of conv3d_group_norm_mean's one-pass forward on
  // input's device: "wgmma", "mma_sync", or "".
  def("_conv3d_onepass_products_kernel", "(Tensor input)", "str");
}
