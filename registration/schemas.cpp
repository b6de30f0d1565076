// The operator schemas of the `fused` namespace. Argument order follows
// torch.nn.functional. The underscore operators are internal: forward passes that also
// return what backward needs, and the backward passes; the Autograd kernels
// (autograd.cpp) are built from them.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

TORCH_LIBRARY(fused, m) {
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  m.def(
      "relu_group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05) -> Tensor",
      tags);
  m.def(
      "group_norm_mean(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05) -> Tensor",
      tags);
  m.def(
      "conv_transpose3d_relu_group_norm(Tensor input, Tensor weight, Tensor? conv_bias, "
      "int[3] stride, int[3] padding, int[3] output_padding, int groups, int[3] dilation, "
      "int num_groups, Tensor? gn_weight, Tensor? gn_bias, float eps) -> Tensor",
      tags);
  m.def(
      "conv3d_group_norm_mean(Tensor input, Tensor weight, Tensor? conv_bias, int[3] stride, "
      "int[3] padding, int[3] dilation, int groups, int num_groups, Tensor? gn_weight, "
      "Tensor? gn_bias, float eps) -> Tensor",
      tags);

  // (output, mean, rstd); mean and rstd of shape (N, num_groups).
  m.def(
      "_relu_group_norm_forward(Tensor input, int num_groups, Tensor? weight, Tensor? bias, "
      "float eps) -> (Tensor, Tensor, Tensor)",
      tags);
  // (grad_input, grad_weight, grad_bias); `input` is the pre-ReLU input.
  m.def(
      "_relu_group_norm_backward(Tensor grad_output, Tensor input, Tensor mean, Tensor rstd, "
      "int num_groups, Tensor? weight, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
      tags);
  // (output, mean, rstd, channel_mean); channel_mean of shape (N, C).
  m.def(
      "_group_norm_mean_forward(Tensor input, int num_groups, Tensor? weight, Tensor? bias, "
      "float eps) -> (Tensor, Tensor, Tensor, Tensor)",
      tags);
  m.def(
      "_group_norm_mean_backward(Tensor grad_output, Tensor input, Tensor mean, Tensor rstd, "
      "Tensor channel_mean, int num_groups, Tensor? weight, bool[3] output_mask) -> "
      "(Tensor, Tensor, Tensor)",
      tags);
}
