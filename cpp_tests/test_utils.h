// Shared helpers of the fused-ops C++ tests: independent ATen composite references (computed
// in float64), gradient helpers and tolerance checks.
#pragma once

#include "common/api.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/generated/variable_factories.h>

#include "catch_compat.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace fused_ops_test {

using OptTensor = c10::optional<at::Tensor>;
using Sizes = std::vector<int64_t>;

inline std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

template <typename T>
std::string to_string(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// ---------------------------------------------------------------------------------------
// Tolerances: errors are measured normwise, max|actual - expected| <= atol + rtol * max|expected|.
struct Tol {
  double rtol;
  double atol;
};

// Tolerance of `dtype` against a float64 reference (CPU kernels).
inline Tol tol_for(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble:
      return {1e-10, 1e-12};
    case at::kFloat:
      return {1e-5, 1e-7};
    case at::kHalf:
      return {1e-2, 1e-4};
    case at::kBFloat16:
      return {5e-2, 1e-3};
    default:
      return {0, 0};
  }
}

// actual (any dtype/device/layout) is close to expected (float64), normwise. `scale_hint`,
// when larger than max|expected|, replaces it as the scale of the relative error: for results
// that are small differences of much larger terms (GroupNorm's input gradient over tiny
// groups), the rounding error of an exact-in-float32 computation scales with the terms.
//
// `baseline_err` (>= 0) is the error of PyTorch's own unfused composite in the same dtype
// (see check_norm_case); where given, an error up to twice it is accepted too ("no worse than
// what the fused operator replaces"): for ill-conditioned inputs (a large mean offset)
// float32 itself cannot reach the tolerance, whichever way it is computed.
inline void check_close(const at::Tensor& actual, const at::Tensor& expected, Tol tol,
                        const std::string& what, double scale_hint = 0.0,
                        double baseline_err = -1.0) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(expected.defined());
  REQUIRE(actual.sizes().vec() == expected.sizes().vec());
  if (expected.numel() == 0) {
    return;
  }
  const at::Tensor a = actual.detach().to(at::kCPU).to(at::kDouble);
  const at::Tensor e = expected.detach().to(at::kCPU).to(at::kDouble);
  REQUIRE(at::isfinite(a).all().item<bool>());
  const double err = (a - e).abs().max().item<double>();
  const double scale = e.abs().max().item<double>();
  const double bound =
      std::max(tol.atol + tol.rtol * std::max(scale, scale_hint), 2.0 * baseline_err);
  INFO("max |actual - expected| = "
       << err << ", max |expected| = " << scale << ", scale hint = " << scale_hint
       << ", error of the unfused ATen composite in this dtype = " << baseline_err
       << ", bound = " << bound << " (rtol " << tol.rtol << ", atol " << tol.atol << ")");
  if (std::getenv("FUSED_OPS_TESTS_VERBOSE") != nullptr) {
    // Headroom report: FUSED_OPS_TESTS_VERBOSE=1 fused_ops_tests ...
    const double strict = tol.atol + tol.rtol * std::max(scale, scale_hint);
    std::cout << "check_close " << what << ": error " << err << " = " << (err / bound)
              << " x bound";
    if (baseline_err >= 0) {
      std::cout << " (" << (err / strict) << " x the tolerance alone; ATen composite error "
                << baseline_err << ")";
    }
    std::cout << std::endl;
  }
  CHECK(err <= bound);
}

// ---------------------------------------------------------------------------------------
// Random tensors.
inline at::TensorOptions f64() { return at::TensorOptions().dtype(at::kDouble); }

// A float64 CPU tensor of standard normal values times `scale` plus `offset`.
inline at::Tensor randn64(Sizes sizes, double scale = 1.0, double offset = 0.0) {
  return at::randn(sizes, f64()) * scale + offset;
}

// GroupNorm-style affine parameters of C channels, randomised (never weight=1, bias=0: with
// GroupNorm's default init, group_norm_mean is exactly mean(bias) = 0 for every input).
inline at::Tensor random_gn_weight(int64_t C) { return randn64({C}, 0.5, 1.0); }
inline at::Tensor random_gn_bias(int64_t C) { return randn64({C}, 0.5, 0.3); }

// A leaf of `dtype` on `device` with the values of `t` (optionally requiring grad).
inline at::Tensor leaf(const at::Tensor& t, at::ScalarType dtype, at::Device device,
                       bool requires_grad = true) {
  at::Tensor r = t.detach().to(device, dtype).clone();
  r.set_requires_grad(requires_grad);
  return r;
}
inline OptTensor leaf(const OptTensor& t, at::ScalarType dtype, at::Device device,
                      bool requires_grad = true) {
  if (!t.has_value() || !t->defined()) {
    return c10::nullopt;
  }
  return leaf(*t, dtype, device, requires_grad);
}

// float64 leaf with the values a tensor `t` holds (the reference works on exactly the values
// the fused operator saw, e.g. after rounding to half).
inline at::Tensor leaf64(const at::Tensor& t) { return leaf(t, at::kDouble, at::kCPU); }
inline OptTensor leaf64(const OptTensor& t) { return leaf(t, at::kDouble, at::kCPU); }

// Tensors that grads are taken with respect to: `required` always, optionals when present.
inline std::vector<at::Tensor> grad_inputs(std::vector<at::Tensor> required,
                                           std::initializer_list<OptTensor> optional) {
  for (const auto& t : optional) {
    if (t.has_value() && t->defined()) {
      required.push_back(*t);
    }
  }
  return required;
}

// Gradients of sum(output * grad_output) with respect to `inputs`.
inline std::vector<at::Tensor> grads_of(const at::Tensor& output, const at::Tensor& grad_output,
                                        const std::vector<at::Tensor>& inputs) {
  return torch::autograd::grad({output}, inputs, {grad_output}, /*retain_graph=*/false,
                               /*create_graph=*/false, /*allow_unused=*/false);
}

// ---------------------------------------------------------------------------------------
// References: ATen composites, called on float64 tensors.
inline Sizes all_but_batch_dims(int64_t rank) {
  Sizes dims;
  for (int64_t d = 1; d < rank; ++d) dims.push_back(d);
  return dims;
}

// at::group_norm; with a bias but no weight, an equal weight of ones is passed instead,
// because PyTorch 2.11's group_norm backward fails in that case ("tensor does not have a
// device").
inline at::Tensor ref_group_norm(const at::Tensor& x, int64_t G, const OptTensor& w,
                                 const OptTensor& b, double eps) {
  const bool has_weight = w.has_value() && w->defined();
  const bool has_bias = b.has_value() && b->defined();
  if (has_bias && !has_weight) {
    return at::group_norm(x, G, at::ones({x.size(1)}, x.options()), b, eps);
  }
  return at::group_norm(x, G, w, b, eps);
}

inline at::Tensor ref_relu_group_norm(const at::Tensor& x, int64_t G, const OptTensor& w,
                                      const OptTensor& b, double eps) {
  return ref_group_norm(at::relu(x), G, w, b, eps);
}

inline at::Tensor ref_group_norm_mean(const at::Tensor& x, int64_t G, const OptTensor& w,
                                      const OptTensor& b, double eps) {
  return ref_group_norm(x, G, w, b, eps).mean(all_but_batch_dims(x.dim()));
}

// A 3-d convolution + GroupNorm problem (one parameter set of the conv operators).
struct ConvCase {
  std::string name;
  Sizes input;  // (N, C_in, D, H, W)
  int64_t c_out;
  std::array<int64_t, 3> kernel;
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> padding{0, 0, 0};
  std::array<int64_t, 3> output_padding{0, 0, 0};  // transposed only
  std::array<int64_t, 3> dilation{1, 1, 1};
  int64_t groups = 1;
  int64_t num_groups = 1;
  bool conv_bias = true;
  bool gn_weight = true;
  bool gn_bias = true;
  double eps = 1e-5;
};

// Random float64 parameters of a ConvCase.
struct ConvParams {
  at::Tensor input, weight;
  OptTensor conv_bias, gn_weight, gn_bias;
};

inline ConvParams random_conv_params(const ConvCase& c, bool transposed,
                                     double input_offset = 0.0) {
  ConvParams p;
  const int64_t c_in = c.input[1];
  p.input = randn64(c.input, 1.0, input_offset);
  const Sizes w_sizes =
      transposed ? Sizes{c_in, c.c_out / c.groups, c.kernel[0], c.kernel[1], c.kernel[2]}
                 : Sizes{c.c_out, c_in / c.groups, c.kernel[0], c.kernel[1], c.kernel[2]};
  const int64_t fan_in =
      (transposed ? c.c_out / c.groups : c_in / c.groups) * c.kernel[0] * c.kernel[1] * c.kernel[2];
  p.weight = randn64(w_sizes, 1.0 / std::sqrt(static_cast<double>(fan_in)));
  if (c.conv_bias) p.conv_bias = randn64({c.c_out}, 0.5);
  if (c.gn_weight) p.gn_weight = random_gn_weight(c.c_out);
  if (c.gn_bias) p.gn_bias = random_gn_bias(c.c_out);
  return p;
}

inline at::Tensor ref_conv_transpose3d_relu_group_norm(const ConvCase& c, const at::Tensor& x,
                                                       const at::Tensor& w, const OptTensor& cb,
                                                       const OptTensor& gw, const OptTensor& gb) {
  const at::Tensor y =
      at::conv_transpose3d(x, w, cb, c.stride, c.padding, c.output_padding, c.groups, c.dilation);
  return ref_group_norm(at::relu(y), c.num_groups, gw, gb, c.eps);
}

inline at::Tensor ref_conv3d_group_norm_mean(const ConvCase& c, const at::Tensor& x,
                                             const at::Tensor& w, const OptTensor& cb,
                                             const OptTensor& gw, const OptTensor& gb) {
  const at::Tensor y = at::conv3d(x, w, cb, c.stride, c.padding, c.dilation, c.groups);
  return ref_group_norm(y, c.num_groups, gw, gb, c.eps).mean({1, 2, 3, 4});
}

inline at::Tensor fused_conv_transpose3d_relu_group_norm(const ConvCase& c, const at::Tensor& x,
                                                         const at::Tensor& w, const OptTensor& cb,
                                                         const OptTensor& gw, const OptTensor& gb) {
  return fused_ops::api::conv_transpose3d_relu_group_norm(x, w, cb, c.stride, c.padding,
                                                          c.output_padding, c.groups, c.dilation,
                                                          c.num_groups, gw, gb, c.eps);
}

inline at::Tensor fused_conv3d_group_norm_mean(const ConvCase& c, const at::Tensor& x,
                                               const at::Tensor& w, const OptTensor& cb,
                                               const OptTensor& gw, const OptTensor& gb) {
  return fused_ops::api::conv3d_group_norm_mean(x, w, cb, c.stride, c.padding, c.dilation, c.groups,
                                                c.num_groups, gw, gb, c.eps);
}

// Input layouts the operators must accept.
enum class Layout { Contiguous, ChannelsLast, NonContiguous };

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::ChannelsLast:
      return "channels_last";
    case Layout::NonContiguous:
      return "non-contiguous";
  }
  return "?";
}

// A tensor with the values of `t` (same dtype/device) in layout `l`. NonContiguous: a strided
// view (every other element of a twice-as-long last dimension).
inline at::Tensor with_layout(const at::Tensor& t, Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return t.contiguous();
    case Layout::ChannelsLast:
      if (t.dim() == 5) return t.contiguous(at::MemoryFormat::ChannelsLast3d);
      if (t.dim() == 4) return t.contiguous(at::MemoryFormat::ChannelsLast);
      return t.contiguous();
    case Layout::NonContiguous: {
      Sizes big = t.sizes().vec();
      big.back() *= 2;
      at::Tensor storage = at::zeros(big, t.options());
      at::Tensor view = storage.slice(-1, 0, big.back(), 2);
      view.copy_(t);
      return view;
    }
  }
  return t;
}

// A leaf (requiring grad) of `dtype` in layout `l`, with the values of `t`.
inline at::Tensor leaf_with_layout(const at::Tensor& t, at::ScalarType dtype, at::Device device,
                                   Layout l) {
  at::Tensor r = with_layout(t.detach().to(device, dtype), l).detach();
  r.set_requires_grad(true);
  return r;
}

// ---------------------------------------------------------------------------------------
// Runners: one operator call on one parameter set, forward and backward, against the float64
// reference computed on the CPU from exactly the values the fused operator saw.

enum class NormOp { ReluGroupNorm, GroupNormMean };

inline const char* norm_op_name(NormOp op) {
  return op == NormOp::ReluGroupNorm ? "relu_group_norm" : "group_norm_mean";
}

// A GroupNorm-family problem: input shape (N, C, *), num_groups, which affine parameters.
struct NormCase {
  Sizes shape;
  int64_t num_groups;
  bool weight = true;
  bool bias = true;
  double eps = 1e-5;
};

inline std::string describe(const NormCase& c) {
  std::ostringstream os;
  os << "shape " << c10::IntArrayRef(c.shape) << ", num_groups " << c.num_groups << ", weight "
     << (c.weight ? "yes" : "none") << ", bias " << (c.bias ? "yes" : "none") << ", eps " << c.eps;
  return os.str();
}

inline at::Tensor fused_norm(NormOp op, const at::Tensor& x, int64_t G, const OptTensor& w,
                             const OptTensor& b, double eps) {
  return op == NormOp::ReluGroupNorm ? fused_ops::api::relu_group_norm(x, G, w, b, eps)
                                     : fused_ops::api::group_norm_mean(x, G, w, b, eps);
}

inline at::Tensor ref_norm(NormOp op, const at::Tensor& x, int64_t G, const OptTensor& w,
                           const OptTensor& b, double eps) {
  return op == NormOp::ReluGroupNorm ? ref_relu_group_norm(x, G, w, b, eps)
                                     : ref_group_norm_mean(x, G, w, b, eps);
}

// Runs `op` on `c` in `dtype` on `device` with the input in `layout` (values: randn * 1 +
// input_offset) and compares output and every gradient (input, weight, bias) with the float64
// reference. The incoming gradient is random and laid out as `grad_layout`.
// With an input offset (an ill-conditioned GroupNorm: |mean| >> std) in a dtype below
// float64, the unfused ATen composite is also run in `dtype` on `device`, and the fused
// operator must be within tolerance of the float64 reference or no worse than twice that
// composite's error (check_close).
inline void check_norm_case(NormOp op, const NormCase& c, at::ScalarType dtype, at::Device device,
                            Layout layout, Tol tol, double input_offset = 0.0,
                            Layout grad_layout = Layout::Contiguous) {
  INFO(norm_op_name(op) << ": " << describe(c) << ", " << dtype_name(dtype) << ", " << device
                        << ", input " << layout_name(layout) << ", grad_output "
                        << layout_name(grad_layout) << ", input offset " << input_offset);
  const int64_t C = c.shape[1];
  const at::Tensor x64 = randn64(c.shape, 1.0, input_offset);
  const OptTensor w64 = c.weight ? OptTensor(random_gn_weight(C)) : c10::nullopt;
  const OptTensor b64 = c.bias ? OptTensor(random_gn_bias(C)) : c10::nullopt;

  const at::Tensor x = leaf_with_layout(x64, dtype, device, layout);
  const OptTensor w = leaf(w64, dtype, device);
  const OptTensor b = leaf(b64, dtype, device);
  const at::Tensor out = fused_norm(op, x, c.num_groups, w, b, c.eps);
  REQUIRE(out.scalar_type() == dtype);
  REQUIRE(out.device() == device);

  const at::Tensor xr = leaf64(x);
  const OptTensor wr = leaf64(w);
  const OptTensor br = leaf64(b);
  const at::Tensor ref = ref_norm(op, xr, c.num_groups, wr, br, c.eps);

  const at::Tensor go64 = randn64(ref.sizes().vec()).to(dtype).to(at::kDouble);
  const at::Tensor go = with_layout(go64.to(device, dtype), grad_layout);
  const at::Tensor out_values = out.detach().clone();
  const auto grads = grads_of(out, go, grad_inputs({x}, {w, b}));
  const auto ref_grads = grads_of(ref, go64, grad_inputs({xr}, {wr, br}));

  // Errors of the unfused composite in `dtype` (output, then gradients), or -1.
  std::vector<double> baseline(1 + ref_grads.size(), -1.0);
  if (input_offset != 0.0 && dtype != at::kDouble) {
    const at::Tensor xa = leaf(x, dtype, device), ga = go.contiguous();
    const OptTensor wa = leaf(w, dtype, device), ba = leaf(b, dtype, device);
    const at::Tensor outa = ref_norm(op, xa, c.num_groups, wa, ba, c.eps);
    auto error = [](const at::Tensor& a, const at::Tensor& e) {
      return e.numel() == 0
                 ? 0.0
                 : (a.detach().cpu().to(at::kDouble) - e.detach()).abs().max().item<double>();
    };
    baseline[0] = error(outa, ref);
    const auto grads_a = grads_of(outa, ga, grad_inputs({xa}, {wa, ba}));
    for (size_t i = 0; i < grads_a.size(); ++i) baseline[i + 1] = error(grads_a[i], ref_grads[i]);
  }
  check_close(out_values, ref, tol, "output", 0.0, baseline[0]);

  std::vector<std::string> names{"grad input"};
  if (c.weight) names.push_back("grad weight");
  if (c.bias) names.push_back("grad bias");
  REQUIRE(grads.size() == names.size());
  // The input gradient is a difference of terms of size |grad_output| * rstd * |weight|
  // (divided by the C * HxW elements averaged, for group_norm_mean); it may be much smaller
  // than they are (e.g. 2-element groups), so they set the scale of its rounding error.
  double input_grad_scale = 0.0;
  if (ref.numel() > 0) {
    const int64_t N = c.shape[0];
    const at::Tensor v = op == NormOp::ReluGroupNorm ? at::relu(xr.detach()) : xr.detach();
    // Groups of zero variance (all zeroed by the ReLU) get no input gradient at all: leave
    // them out (an infinite variance gives rstd 0).
    at::Tensor var = v.reshape({N, c.num_groups, -1}).var(-1, /*unbiased=*/false);
    var = var.masked_fill(var == 0, std::numeric_limits<double>::infinity());
    const double rstd_max = (var + c.eps).rsqrt().max().item<double>();
    const double w_max = wr ? wr->detach().abs().max().item<double>() : 1.0;
    input_grad_scale = go64.abs().max().item<double>() * rstd_max * w_max;
    if (op == NormOp::GroupNormMean) {
      input_grad_scale /= static_cast<double>(xr.numel() / N);
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    REQUIRE(grads[i].scalar_type() == dtype);
    check_close(grads[i], ref_grads[i], tol, names[i], i == 0 ? input_grad_scale : 0.0,
                baseline[i + 1]);
  }
}

inline std::string describe(const ConvCase& c) {
  std::ostringstream os;
  os << c.name << ": input " << c10::IntArrayRef(c.input) << ", C_out " << c.c_out << ", kernel "
     << c10::IntArrayRef(c.kernel) << ", stride " << c10::IntArrayRef(c.stride) << ", padding "
     << c10::IntArrayRef(c.padding) << ", output_padding " << c10::IntArrayRef(c.output_padding)
     << ", dilation " << c10::IntArrayRef(c.dilation) << ", groups " << c.groups << ", num_groups "
     << c.num_groups << ", conv_bias " << c.conv_bias << ", gn_weight " << c.gn_weight
     << ", gn_bias " << c.gn_bias;
  return os.str();
}

// Runs a conv operator (transposed: conv_transpose3d_relu_group_norm, else
// conv3d_group_norm_mean) on `c` and compares output and the gradients of input, weight,
// conv_bias, gn_weight and gn_bias (those present) with the float64 reference.
inline void check_conv_case(bool transposed, const ConvCase& c, at::ScalarType dtype,
                            at::Device device, Layout layout, Tol tol, double input_offset = 0.0) {
  INFO((transposed ? "conv_transpose3d_relu_group_norm " : "conv3d_group_norm_mean ")
       << describe(c) << ", " << dtype_name(dtype) << ", " << device << ", input "
       << layout_name(layout));
  const ConvParams p = random_conv_params(c, transposed, input_offset);
  const at::Tensor x = leaf_with_layout(p.input, dtype, device, layout);
  const at::Tensor w = leaf(p.weight, dtype, device);
  const OptTensor cb = leaf(p.conv_bias, dtype, device);
  const OptTensor gw = leaf(p.gn_weight, dtype, device);
  const OptTensor gb = leaf(p.gn_bias, dtype, device);
  const at::Tensor out = transposed ? fused_conv_transpose3d_relu_group_norm(c, x, w, cb, gw, gb)
                                    : fused_conv3d_group_norm_mean(c, x, w, cb, gw, gb);
  REQUIRE(out.scalar_type() == dtype);
  REQUIRE(out.device() == device);

  const at::Tensor xr = leaf64(x);
  const at::Tensor wr = leaf64(w);
  const OptTensor cbr = leaf64(cb);
  const OptTensor gwr = leaf64(gw);
  const OptTensor gbr = leaf64(gb);
  const at::Tensor ref = transposed ? ref_conv_transpose3d_relu_group_norm(c, xr, wr, cbr, gwr, gbr)
                                    : ref_conv3d_group_norm_mean(c, xr, wr, cbr, gwr, gbr);
  check_close(out, ref, tol, "output");

  const at::Tensor go64 = randn64(ref.sizes().vec()).to(dtype).to(at::kDouble);
  const at::Tensor go = go64.to(device, dtype);
  const auto grads = grads_of(out, go, grad_inputs({x, w}, {cb, gw, gb}));
  const auto ref_grads = grads_of(ref, go64, grad_inputs({xr, wr}, {cbr, gwr, gbr}));
  std::vector<std::string> names{"grad input", "grad conv weight"};
  if (c.conv_bias) names.push_back("grad conv_bias");
  if (c.gn_weight) names.push_back("grad gn_weight");
  if (c.gn_bias) names.push_back("grad gn_bias");
  REQUIRE(grads.size() == names.size());

  // In half / bfloat16 the convolution's own rounding flips ReLU's mask wherever its output
  // is near 0 (the float64 reference's mask differs), which moves the gradients upstream of
  // the ReLU by O(1), as it does for PyTorch's unfused composite in that dtype: run that
  // composite too, and accept an error up to twice its own (check_close).
  std::vector<double> baseline(ref_grads.size(), -1.0);
  if (dtype == at::kHalf || dtype == at::kBFloat16) {
    const at::Tensor xa = leaf(x, dtype, device);
    const at::Tensor wa = leaf(w, dtype, device);
    const OptTensor cba = leaf(cb, dtype, device), gwa = leaf(gw, dtype, device),
                    gba = leaf(gb, dtype, device);
    const at::Tensor outa = transposed
                                ? ref_conv_transpose3d_relu_group_norm(c, xa, wa, cba, gwa, gba)
                                : ref_conv3d_group_norm_mean(c, xa, wa, cba, gwa, gba);
    const auto grads_a = grads_of(outa, go, grad_inputs({xa, wa}, {cba, gwa, gba}));
    for (size_t i = 0; i < grads_a.size(); ++i) {
      baseline[i] = (grads_a[i].detach().cpu().to(at::kDouble) - ref_grads[i].detach())
                        .abs()
                        .max()
                        .item<double>();
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    REQUIRE(grads[i].scalar_type() == dtype);
    check_close(grads[i], ref_grads[i], tol, names[i], 0.0, baseline[i]);
  }
}

// The parameter sets of the conv operators' value tests (CPU and CUDA). Spatial sizes are
// small and deliberately not multiples of 4.
inline std::vector<ConvCase> conv_transpose_cases() {
  std::vector<ConvCase> cases;
  {
    ConvCase c{
        "reference pattern: k3, no conv bias, 2 channels per group", {2, 4, 3, 5, 6}, 8, {3, 3, 3}};
    c.num_groups = 4;
    c.conv_bias = false;
    cases.push_back(c);
  }
  {
    ConvCase c{
        "batch 1, stride 2, padding 1, output_padding 1, conv bias", {1, 3, 3, 4, 3}, 6, {3, 3, 3}};
    c.stride = {2, 2, 2};
    c.padding = {1, 1, 1};
    c.output_padding = {1, 1, 1};
    c.num_groups = 3;
    cases.push_back(c);
  }
  {
    ConvCase c{"dilation 2, conv groups 2, 1 channel per GN group", {2, 4, 3, 3, 4}, 6, {2, 3, 2}};
    c.dilation = {2, 2, 2};
    c.groups = 2;
    c.num_groups = 6;
    cases.push_back(c);
  }
  {
    ConvCase c{"anisotropic stride/padding/dilation, output_padding < dilation, no GN affine",
               {2, 2, 3, 4, 3},
               4,
               {3, 2, 3}};
    c.stride = {1, 2, 3};
    c.padding = {1, 0, 2};
    c.output_padding = {1, 1, 2};
    c.dilation = {2, 1, 1};
    c.num_groups = 1;
    c.gn_weight = false;
    c.gn_bias = false;
    c.eps = 1e-3;
    cases.push_back(c);
  }
  {
    ConvCase c{"padding beyond the kernel reach, gn_bias only", {2, 3, 4, 5, 6}, 4, {2, 2, 2}};
    c.padding = {2, 1, 2};
    c.num_groups = 2;
    c.gn_weight = false;
    cases.push_back(c);
  }
  return cases;
}

inline std::vector<ConvCase> conv3d_cases() {
  std::vector<ConvCase> cases;
  {
    ConvCase c{
        "reference pattern: k3, conv bias, 3 channels per group", {2, 3, 6, 7, 5}, 12, {3, 3, 3}};
    c.num_groups = 4;
    cases.push_back(c);
  }
  {
    ConvCase c{"batch 1, stride 2, padding 1, no conv bias", {1, 4, 7, 6, 9}, 6, {3, 3, 3}};
    c.stride = {2, 2, 2};
    c.padding = {1, 1, 1};
    c.num_groups = 2;
    c.conv_bias = false;
    cases.push_back(c);
  }
  {
    ConvCase c{"dilation 2, conv groups 2, 1 channel per GN group", {2, 4, 6, 7, 7}, 6, {2, 3, 2}};
    c.dilation = {2, 2, 2};
    c.groups = 2;
    c.num_groups = 6;
    cases.push_back(c);
  }
  {
    ConvCase c{"anisotropic stride/padding/dilation, no GN affine", {2, 2, 5, 6, 7}, 4, {1, 3, 2}};
    c.stride = {2, 1, 3};
    c.padding = {0, 2, 1};
    c.dilation = {1, 2, 1};
    c.num_groups = 1;
    c.gn_weight = false;
    c.gn_bias = false;
    c.eps = 1e-3;
    cases.push_back(c);
  }
  {
    ConvCase c{"gn_weight only, 1x1x1 kernel", {3, 5, 3, 5, 7}, 4, {1, 1, 1}};
    c.num_groups = 2;
    c.gn_bias = false;
    cases.push_back(c);
  }
  {
    // Footprints of whole 16-float input rows (the CUDA one-pass forward's row table and
    // 16-byte row copies), 40 channels in chunks.
    ConvCase c{"whole input rows, 40 channels", {2, 3, 6, 7, 16}, 40, {3, 3, 3}};
    c.num_groups = 8;
    cases.push_back(c);
  }
  {
    // One input channel, kernel (1, 2, 3), rows of 32 floats: the CUDA Gram weight gradient's
    // 16-byte row copies, one lag along D, two taps along H.
    ConvCase c{"1 input channel, kernel (1, 2, 3), W 32", {2, 1, 4, 5, 32}, 4, {1, 2, 3}};
    c.num_groups = 2;
    cases.push_back(c);
  }
  {
    // Output rows of 6 positions, k3, 3 input channels: the CUDA one-pass forward on wgmma
    // loads its values in windows (OnePassPlan::windows).
    ConvCase c{"output rows of 6, k3, 3 -> 8", {2, 3, 5, 6, 8}, 8, {3, 3, 3}};
    c.num_groups = 4;
    cases.push_back(c);
  }
  return cases;
}

}  // namespace fused_ops_test
