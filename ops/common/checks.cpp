#include "common/checks.h"

#include <c10/util/Exception.h>

#include <utility>

namespace fused_ops {
namespace {

using Int = c10::SymInt;

// Sizes of `t`: concrete for real tensors, possibly symbolic for Meta ones.
c10::SymIntArrayRef sizes_of(const at::Tensor& t) { return t.sym_sizes(); }

bool is_supported_floating(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

void check_floating_input(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.defined(), op, ": expected a defined input tensor");
  TORCH_CHECK(is_supported_floating(input.scalar_type()), op,
              ": expected input of a floating dtype (float32, float64, float16 or bfloat16), got ",
              input.scalar_type());
}

// Names of the affine parameters in messages ("weight"/"bias", or "gn_weight"/"gn_bias").
struct AffineNames {
  const char* weight = "weight";
  const char* bias = "bias";
};

void check_parameter_vector(const char* op, const char* name,
                            const c10::optional<at::Tensor>& param, const Int& channels,
                            const at::Tensor& input) {
  if (!param.has_value() || !param->defined()) {
    return;
  }
  const auto sizes = sizes_of(*param);
  TORCH_CHECK(sizes.size() == 1 && sizes[0] == channels, op, ": expected ", name, " of shape (",
              channels, ",), got ", sizes);
  check_same_device_and_dtype(op, name, *param, "input", input);
}

void check_group_norm_params_impl(const char* op, const at::Tensor& input, const Int& channels,
                                  int64_t num_groups, const c10::optional<at::Tensor>& weight,
                                  const c10::optional<at::Tensor>& bias, double eps,
                                  AffineNames names) {
  TORCH_CHECK(num_groups > 0, op, ": expected num_groups > 0, got ", num_groups);
  TORCH_CHECK(channels % num_groups == 0, op, ": expected the number of channels (", channels,
              ") to be divisible by num_groups (", num_groups, ")");
  TORCH_CHECK(eps >= 0, op, ": expected eps >= 0, got ", eps);
  check_parameter_vector(op, names.weight, weight, channels, input);
  check_parameter_vector(op, names.bias, bias, channels, input);
}

SymGroupNormShape check_group_norm_args_impl(const char* op, const at::Tensor& input,
                                             int64_t num_groups,
                                             const c10::optional<at::Tensor>& weight,
                                             const c10::optional<at::Tensor>& bias, double eps) {
  check_floating_input(op, input);
  const auto sizes = sizes_of(input);
  TORCH_CHECK(sizes.size() >= 2, op,
              ": expected input of shape (N, C, *) with at least 2 dims, got ", sizes);
  check_group_norm_params_impl(op, input, sizes[1], num_groups, weight, bias, eps, AffineNames{});
  SymGroupNormShape shape{sizes[0], sizes[1], num_groups, Int(1)};
  for (size_t d = 2; d < sizes.size(); ++d) {
    shape.HxW = shape.HxW * sizes[d];
  }
  // As torch.nn.functional.group_norm: statistics over no elements are undefined.
  TORCH_CHECK(shape.N == 0 || shape.HxW > 0, op,
              ": expected non-empty spatial dimensions, got input of shape ", sizes);
  return shape;
}

void check_group_norm_backward_args_impl(const char* op, const at::Tensor& grad_output,
                                         c10::SymIntArrayRef grad_shape, const at::Tensor& input,
                                         const SymGroupNormShape& shape, const at::Tensor& mean,
                                         const at::Tensor& rstd, const at::Tensor* channel_mean) {
  TORCH_CHECK(grad_output.defined(), op, ": expected a defined grad_output");
  TORCH_CHECK(sizes_of(grad_output) == grad_shape, op, ": expected grad_output of shape ",
              grad_shape, ", got ", sizes_of(grad_output));
  check_same_device_and_dtype(op, "grad_output", grad_output, "input", input);
  const auto stats = stats_dtype(input.scalar_type());
  auto check_stat = [&](const char* name, const at::Tensor& t, const Int& cols) {
    TORCH_CHECK(t.defined(), op, ": expected a defined ", name);
    const auto sizes = sizes_of(t);
    TORCH_CHECK(sizes.size() == 2 && sizes[0] == shape.N && sizes[1] == cols, op, ": expected ",
                name, " of shape (", shape.N, ", ", cols, "), got ", sizes);
    TORCH_CHECK(t.device() == input.device(), op, ": expected ", name, " on device ",
                input.device(), ", got ", t.device());
    TORCH_CHECK(t.scalar_type() == stats, op, ": expected ", name, " of dtype ", stats, ", got ",
                t.scalar_type());
  };
  check_stat("mean", mean, Int(shape.G));
  check_stat("rstd", rstd, Int(shape.G));
  if (channel_mean != nullptr) {
    check_stat("channel_mean", *channel_mean, shape.C);
  }
}

std::vector<Int> check_conv3d_args_impl(const char* op, const at::Tensor& input,
                                        const at::Tensor& weight,
                                        const c10::optional<at::Tensor>& bias,
                                        const Conv3dParams& p) {
  check_floating_input(op, input);
  TORCH_CHECK(weight.defined(), op, ": expected a defined weight");
  const auto in_sizes = sizes_of(input);
  const auto w_sizes = sizes_of(weight);
  TORCH_CHECK(in_sizes.size() == 5, op, ": expected input of shape (N, C_in, D, H, W), got ",
              in_sizes);
  TORCH_CHECK(w_sizes.size() == 5, op, ": expected a 5-d weight, got shape ", w_sizes);
  check_same_device_and_dtype(op, "weight", weight, "input", input);
  TORCH_CHECK(p.groups > 0, op, ": expected groups > 0, got ", p.groups);
  const at::IntArrayRef stride(p.stride), padding(p.padding), dilation(p.dilation),
      output_padding(p.output_padding);
  for (int i = 0; i < 3; ++i) {
    TORCH_CHECK(p.stride[i] > 0, op, ": expected stride > 0, got ", stride);
    TORCH_CHECK(p.dilation[i] > 0, op, ": expected dilation > 0, got ", dilation);
    TORCH_CHECK(p.padding[i] >= 0, op, ": expected padding >= 0, got ", padding);
    TORCH_CHECK(p.output_padding[i] >= 0, op, ": expected output_padding >= 0, got ",
                output_padding);
    TORCH_CHECK(p.output_padding[i] < p.stride[i] || p.output_padding[i] < p.dilation[i], op,
                ": expected output_padding smaller than either stride or dilation, got "
                "output_padding ",
                output_padding, ", stride ", stride, ", dilation ", dilation);
    TORCH_CHECK(w_sizes[i + 2] > 0, op, ": expected a non-empty kernel, got weight of shape ",
                w_sizes);
    TORCH_CHECK(in_sizes[i + 2] > 0, op,
                ": expected non-empty spatial dimensions, got input of shape ", in_sizes);
  }

  const Int& c_in = in_sizes[1];
  Int c_out;
  if (p.transposed) {
    // ConvTranspose3d weight: (C_in, C_out / groups, kD, kH, kW).
    TORCH_CHECK(w_sizes[0] == c_in, op, ": expected weight of shape (C_in=", c_in,
                ", C_out/groups, kD, kH, kW), got ", w_sizes);
    TORCH_CHECK(c_in % p.groups == 0, op, ": expected C_in (", c_in,
                ") to be divisible by groups (", p.groups, ")");
    c_out = w_sizes[1] * p.groups;
  } else {
    // Conv3d weight: (C_out, C_in / groups, kD, kH, kW).
    c_out = w_sizes[0];
    TORCH_CHECK(w_sizes[1] * p.groups == c_in, op,
                ": expected weight of shape (C_out, C_in/groups, kD, kH, kW) for C_in=", c_in,
                " and groups=", p.groups, ", got ", w_sizes);
    TORCH_CHECK(c_out % p.groups == 0, op, ": expected C_out (", c_out,
                ") to be divisible by groups (", p.groups, ")");
  }
  TORCH_CHECK(c_out > 0, op, ": expected at least one output channel, got weight of shape ",
              w_sizes);
  if (bias.has_value() && bias->defined()) {
    const auto b_sizes = sizes_of(*bias);
    TORCH_CHECK(b_sizes.size() == 1 && b_sizes[0] == c_out, op, ": expected conv_bias of shape (",
                c_out, ",), got ", b_sizes);
    check_same_device_and_dtype(op, "conv_bias", *bias, "input", input);
  }

  std::vector<Int> out_shape{in_sizes[0], c_out, Int(0), Int(0), Int(0)};
  for (int i = 0; i < 3; ++i) {
    const Int& in = in_sizes[i + 2];
    const Int dilated_kernel = (w_sizes[i + 2] - 1) * p.dilation[i] + 1;
    Int out;
    if (p.transposed) {
      out = (in - 1) * p.stride[i] - 2 * p.padding[i] + dilated_kernel + p.output_padding[i];
    } else {
      TORCH_CHECK(in + 2 * p.padding[i] >= dilated_kernel, op, ": padded input size (",
                  in + 2 * p.padding[i], ") is smaller than the dilated kernel size (",
                  dilated_kernel, ") in spatial dim ", i, "; input shape ", in_sizes,
                  ", weight shape ", w_sizes);
      out = (in + 2 * p.padding[i] - dilated_kernel) / p.stride[i] + 1;
    }
    TORCH_CHECK(out > 0, op, ": the convolution's output would be empty in spatial dim ", i,
                " (size ", out, "); input shape ", in_sizes, ", weight shape ", w_sizes);
    out_shape[i + 2] = out;
  }
  return out_shape;
}

}  // namespace

GroupNormShape concrete(const SymGroupNormShape& shape) {
  return GroupNormShape{shape.N.expect_int(), shape.C.expect_int(), shape.G,
                        shape.HxW.expect_int()};
}

void check_same_device_and_dtype(const char* op, const char* name, const at::Tensor& tensor,
                                 const char* reference_name, const at::Tensor& reference) {
  if (!tensor.defined()) {
    return;
  }
  TORCH_CHECK(tensor.device() == reference.device(), op, ": expected ", name,
              " on the same device as ", reference_name, " (", reference.device(), "), got ",
              tensor.device());
  TORCH_CHECK(tensor.scalar_type() == reference.scalar_type(), op, ": expected ", name,
              " to have the same dtype as ", reference_name, " (", reference.scalar_type(),
              "), got ", tensor.scalar_type());
}

at::ScalarType stats_dtype(at::ScalarType input_dtype) {
  return input_dtype == at::kDouble ? at::kDouble : at::kFloat;
}

SymGroupNormShape check_group_norm_args(const char* op, const at::Tensor& input, int64_t num_groups,
                                        const c10::optional<at::Tensor>& weight,
                                        const c10::optional<at::Tensor>& bias, double eps) {
  return check_group_norm_args_impl(op, input, num_groups, weight, bias, eps);
}

void check_group_norm_backward_args(const char* op, const at::Tensor& grad_output,
                                    c10::SymIntArrayRef grad_shape, const at::Tensor& input,
                                    const SymGroupNormShape& shape, const at::Tensor& mean,
                                    const at::Tensor& rstd, const at::Tensor* channel_mean) {
  check_group_norm_backward_args_impl(op, grad_output, grad_shape, input, shape, mean, rstd,
                                      channel_mean);
}

Conv3dParams make_conv3d_params(const char* op, at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef output_padding, at::IntArrayRef dilation,
                                int64_t groups, bool transposed) {
  auto to_array = [op](const char* name, at::IntArrayRef v) {
    TORCH_CHECK(v.size() == 3, op, ": expected ", name, " to have 3 entries, got ", v);
    return std::array<int64_t, 3>{v[0], v[1], v[2]};
  };
  Conv3dParams p;
  p.stride = to_array("stride", stride);
  p.padding = to_array("padding", padding);
  p.output_padding =
      transposed ? to_array("output_padding", output_padding) : std::array<int64_t, 3>{0, 0, 0};
  p.dilation = to_array("dilation", dilation);
  p.groups = groups;
  p.transposed = transposed;
  return p;
}

std::vector<c10::SymInt> check_conv3d_args(const char* op, const at::Tensor& input,
                                           const at::Tensor& weight,
                                           const c10::optional<at::Tensor>& bias,
                                           const Conv3dParams& params) {
  return check_conv3d_args_impl(op, input, weight, bias, params);
}

ConvGroupNormShapes check_conv_group_norm_args(const char* op, const at::Tensor& input,
                                               const at::Tensor& weight,
                                               const c10::optional<at::Tensor>& conv_bias,
                                               const Conv3dParams& params, int64_t num_groups,
                                               const c10::optional<at::Tensor>& gn_weight,
                                               const c10::optional<at::Tensor>& gn_bias,
                                               double eps) {
  std::vector<Int> out_shape = check_conv3d_args_impl(op, input, weight, conv_bias, params);
  check_group_norm_params_impl(op, input, out_shape[1], num_groups, gn_weight, gn_bias, eps,
                               AffineNames{"gn_weight", "gn_bias"});
  const SymGroupNormShape group_norm{out_shape[0], out_shape[1], num_groups,
                                     out_shape[2] * out_shape[3] * out_shape[4]};
  return ConvGroupNormShapes{std::move(out_shape), group_norm};
}

}  // namespace fused_ops
