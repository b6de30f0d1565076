// Argument checks (every bad input raises a c10::Error whose message names the operator, the
// argument and the expectation; CPU and Meta kernels reject the same inputs with the same
// messages) and the Meta kernels' output shapes and dtypes.
#include "test_utils.h"

#include <functional>

using namespace fused_ops_test;

namespace {

constexpr const char* kRgn = "fused::relu_group_norm";
constexpr const char* kGnm = "fused::group_norm_mean";
constexpr const char* kCt = "fused::conv_transpose3d_relu_group_norm";
constexpr const char* kCv = "fused::conv3d_group_norm_mean";

struct ErrorCase {
  std::string what;
  const char* op;           // operator name the message must contain
  std::string expectation;  // and the expectation (naming the argument)
  std::function<void(const at::TensorOptions&)> call;
};

using Opts = at::TensorOptions;

at::Tensor empty(Sizes s, const Opts& o) { return at::empty(s, o); }

// relu_group_norm or group_norm_mean, by name.
void norm(const char* op, const at::Tensor& x, int64_t G, const OptTensor& w, const OptTensor& b,
          double eps = 1e-5) {
  if (std::string(op) == kRgn) {
    fused_ops::api::relu_group_norm(x, G, w, b, eps);
  } else {
    fused_ops::api::group_norm_mean(x, G, w, b, eps);
  }
}

std::vector<ErrorCase> norm_error_cases(const char* op) {
  return {
      {"1-d input", op, "expected input of shape (N, C, *) with at least 2 dims",
       [op](const Opts& o) { norm(op, empty({6}, o), 1, c10::nullopt, c10::nullopt); }},
      {"channels not divisible by num_groups", op,
       "expected the number of channels (6) to be divisible by num_groups (4)",
       [op](const Opts& o) { norm(op, empty({2, 6, 5}, o), 4, c10::nullopt, c10::nullopt); }},
      {"num_groups 0", op, "expected num_groups > 0",
       [op](const Opts& o) { norm(op, empty({2, 6, 5}, o), 0, c10::nullopt, c10::nullopt); }},
      {"weight of the wrong shape", op, "expected weight of shape (6,)",
       [op](const Opts& o) { norm(op, empty({2, 6, 5}, o), 3, empty({5}, o), empty({6}, o)); }},
      {"bias of the wrong rank", op, "expected bias of shape (6,)",
       [op](const Opts& o) { norm(op, empty({2, 6, 5}, o), 3, empty({6}, o), empty({6, 1}, o)); }},
      {"weight of another dtype", op, "expected weight to have the same dtype as input",
       [op](const Opts& o) {
         norm(op, empty({2, 6, 5}, o), 3, empty({6}, o.dtype(at::kDouble)), c10::nullopt);
       }},
      {"bias of another dtype", op, "expected bias to have the same dtype as input",
       [op](const Opts& o) {
         norm(op, empty({2, 6, 5}, o), 3, c10::nullopt, empty({6}, o.dtype(at::kHalf)));
       }},
      {"integer input", op, "expected input of a floating dtype",
       [op](const Opts& o) {
         norm(op, empty({2, 6, 5}, o.dtype(at::kLong)), 3, c10::nullopt, c10::nullopt);
       }},
      {"negative eps", op, "expected eps >= 0",
       [op](const Opts& o) { norm(op, empty({2, 6, 5}, o), 3, c10::nullopt, c10::nullopt, -1.0); }},
      {"empty spatial dims", op, "expected non-empty spatial dimensions",
       [op](const Opts& o) { norm(op, empty({2, 6, 0}, o), 3, c10::nullopt, c10::nullopt); }},
  };
}

// A valid conv_transpose3d_relu_group_norm call (C_in 4, C_out 4, k3, GN 2 groups) with one
// thing changed by `mutate`.
struct CtArgs {
  at::Tensor input, weight;
  OptTensor conv_bias, gn_weight, gn_bias;
  Sizes stride{1, 1, 1}, padding{0, 0, 0}, output_padding{0, 0, 0}, dilation{1, 1, 1};
  int64_t groups = 1, num_groups = 2;
  double eps = 1e-5;
};

CtArgs ct_args(const Opts& o) {
  CtArgs a;
  a.input = empty({2, 4, 3, 4, 5}, o);
  a.weight = empty({4, 4, 3, 3, 3}, o);
  a.conv_bias = empty({4}, o);
  a.gn_weight = empty({4}, o);
  a.gn_bias = empty({4}, o);
  return a;
}

void call_ct(const CtArgs& a) {
  fused_ops::api::conv_transpose3d_relu_group_norm(
      a.input, a.weight, a.conv_bias, a.stride, a.padding, a.output_padding, a.groups, a.dilation,
      a.num_groups, a.gn_weight, a.gn_bias, a.eps);
}

void call_cv(const CtArgs& a) {
  fused_ops::api::conv3d_group_norm_mean(a.input, a.weight, a.conv_bias, a.stride, a.padding,
                                         a.dilation, a.groups, a.num_groups, a.gn_weight, a.gn_bias,
                                         a.eps);
}

ErrorCase ct_case(std::string what, std::string expectation,
                  std::function<void(CtArgs&, const Opts&)> mutate) {
  return {what, kCt, expectation, [mutate](const Opts& o) {
            CtArgs a = ct_args(o);
            mutate(a, o);
            call_ct(a);
          }};
}

// conv3d_group_norm_mean: same valid arguments (weight (4, 4, 3, 3, 3) reads as C_out 4,
// C_in 4), input (2, 4, 5, 6, 7).
ErrorCase cv_case(std::string what, std::string expectation,
                  std::function<void(CtArgs&, const Opts&)> mutate) {
  return {what, kCv, expectation, [mutate](const Opts& o) {
            CtArgs a = ct_args(o);
            a.input = empty({2, 4, 5, 6, 7}, o);
            mutate(a, o);
            call_cv(a);
          }};
}

std::vector<ErrorCase> conv_error_cases() {
  std::vector<ErrorCase> cases;
  for (bool transposed : {true, false}) {
    auto make = transposed ? ct_case : cv_case;
    cases.push_back(make("4-d input", "expected input of shape (N, C_in, D, H, W)",
                         [](CtArgs& a, const Opts& o) { a.input = empty({2, 4, 3, 4}, o); }));
    cases.push_back(make("4-d conv weight", "expected a 5-d weight",
                         [](CtArgs& a, const Opts& o) { a.weight = empty({4, 4, 3, 3}, o); }));
    cases.push_back(
        make("integer input", "expected input of a floating dtype", [](CtArgs& a, const Opts& o) {
          a.input = empty(a.input.sizes().vec(), o.dtype(at::kInt));
        }));
    cases.push_back(make(
        "conv weight of another dtype", "expected weight to have the same dtype as input",
        [](CtArgs& a, const Opts& o) { a.weight = empty({4, 4, 3, 3, 3}, o.dtype(at::kDouble)); }));
    cases.push_back(make("negative padding", "expected padding >= 0",
                         [](CtArgs& a, const Opts&) { a.padding = {0, -1, 0}; }));
    cases.push_back(make("stride 0", "expected stride > 0",
                         [](CtArgs& a, const Opts&) { a.stride = {1, 1, 0}; }));
    cases.push_back(make("dilation 0", "expected dilation > 0",
                         [](CtArgs& a, const Opts&) { a.dilation = {0, 1, 1}; }));
    cases.push_back(make("stride with 2 entries", "expected stride to have 3 entries",
                         [](CtArgs& a, const Opts&) { a.stride = {1, 1}; }));
    cases.push_back(
        make("groups 0", "expected groups > 0", [](CtArgs& a, const Opts&) { a.groups = 0; }));
    cases.push_back(make("conv_bias of the wrong shape", "expected conv_bias of shape (4,)",
                         [](CtArgs& a, const Opts& o) { a.conv_bias = empty({3}, o); }));
    cases.push_back(
        make("conv_bias of another dtype", "expected conv_bias to have the same dtype as input",
             [](CtArgs& a, const Opts& o) { a.conv_bias = empty({4}, o.dtype(at::kDouble)); }));
    cases.push_back(make("gn_weight of the wrong shape", "expected gn_weight of shape (4,)",
                         [](CtArgs& a, const Opts& o) { a.gn_weight = empty({8}, o); }));
    cases.push_back(make("gn_bias of the wrong shape", "expected gn_bias of shape (4,)",
                         [](CtArgs& a, const Opts& o) { a.gn_bias = empty({1, 4}, o); }));
    cases.push_back(
        make("gn_weight of another dtype", "expected gn_weight to have the same dtype as input",
             [](CtArgs& a, const Opts& o) { a.gn_weight = empty({4}, o.dtype(at::kBFloat16)); }));
    cases.push_back(make("C_out not divisible by num_groups",
                         "expected the number of channels (4) to be divisible by num_groups (3)",
                         [](CtArgs& a, const Opts&) { a.num_groups = 3; }));
    cases.push_back(
        make("negative eps", "expected eps >= 0", [](CtArgs& a, const Opts&) { a.eps = -1e-5; }));
    cases.push_back(make("empty spatial input dim", "expected non-empty spatial dimensions",
                         [](CtArgs& a, const Opts& o) {
                           auto s = a.input.sizes().vec();
                           s[3] = 0;
                           a.input = empty(s, o);
                         }));
  }
  // Transposed only.
  cases.push_back(ct_case("output_padding not smaller than stride or dilation",
                          "expected output_padding smaller than either stride or dilation",
                          [](CtArgs& a, const Opts&) {
                            a.stride = {2, 2, 2};
                            a.output_padding = {1, 2, 1};
                          }));
  cases.push_back(ct_case("negative output_padding", "expected output_padding >= 0",
                          [](CtArgs& a, const Opts&) { a.output_padding = {0, 0, -1}; }));
  cases.push_back(ct_case("conv weight whose first dim is not C_in",
                          "expected weight of shape (C_in=4, C_out/groups, kD, kH, kW)",
                          [](CtArgs& a, const Opts& o) { a.weight = empty({3, 4, 3, 3, 3}, o); }));
  cases.push_back(ct_case("C_in not divisible by groups",
                          "expected C_in (4) to be divisible by groups (3)",
                          [](CtArgs& a, const Opts&) { a.groups = 3; }));
  cases.push_back(ct_case("output_padding with 2 entries",
                          "expected output_padding to have 3 entries",
                          [](CtArgs& a, const Opts&) { a.output_padding = {0, 0}; }));
  // Forward only.
  cases.push_back(cv_case("conv weight whose second dim is not C_in / groups",
                          "expected weight of shape (C_out, C_in/groups, kD, kH, kW) for C_in=4 "
                          "and groups=2",
                          [](CtArgs& a, const Opts& o) {
                            a.weight = empty({4, 4, 3, 3, 3}, o);
                            a.groups = 2;
                          }));
  cases.push_back(cv_case("C_out not divisible by groups",
                          "expected C_out (5) to be divisible by groups (2)",
                          [](CtArgs& a, const Opts& o) {
                            a.weight = empty({5, 2, 3, 3, 3}, o);
                            a.groups = 2;
                          }));
  cases.push_back(cv_case("kernel larger than the padded input",
                          "is smaller than the dilated kernel size",
                          [](CtArgs& a, const Opts&) { a.dilation = {1, 1, 4}; }));
  return cases;
}

void check_error_cases(const std::vector<ErrorCase>& cases, at::Device device) {
  const Opts o = at::TensorOptions().dtype(at::kFloat).device(device);
  for (const auto& c : cases) {
    INFO(c.op << ": " << c.what << " (" << device << " tensors)");
    REQUIRE_C10_ERROR(c.call(o), FUSED_CONTAINS(c.op) && FUSED_CONTAINS(c.expectation));
  }
}

}  // namespace

TEST_CASE("relu_group_norm / group_norm_mean reject bad arguments with clear messages",
          "[errors]") {
  SECTION("CPU tensors") {
    check_error_cases(norm_error_cases(kRgn), at::kCPU);
    check_error_cases(norm_error_cases(kGnm), at::kCPU);
  }
  SECTION("Meta tensors: the same checks, the same messages") {
    check_error_cases(norm_error_cases(kRgn), at::kMeta);
    check_error_cases(norm_error_cases(kGnm), at::kMeta);
  }
  SECTION("through autograd (input requires grad)") {
    for (const char* op : {kRgn, kGnm}) {
      INFO(op);
      const at::Tensor x = at::randn({2, 6, 5}).requires_grad_();
      REQUIRE_C10_ERROR(norm(op, x, 4, c10::nullopt, c10::nullopt),
                        FUSED_CONTAINS(op) && FUSED_CONTAINS("divisible by num_groups (4)"));
      REQUIRE_C10_ERROR(norm(op, x, 3, at::ones({5}), c10::nullopt),
                        FUSED_CONTAINS(op) && FUSED_CONTAINS("expected weight of shape (6,)"));
    }
  }
  SECTION("a weight on another device (Meta weight, CPU input)") {
    for (const char* op : {kRgn, kGnm}) {
      INFO(op);
      const at::Tensor x = at::randn({2, 6, 5});
      REQUIRE_C10_ERROR(
          norm(op, x, 3, at::empty({6}, at::kMeta), c10::nullopt),
          FUSED_CONTAINS(op) && FUSED_CONTAINS("expected weight on the same device as input"));
      REQUIRE_C10_ERROR(
          norm(op, x, 3, c10::nullopt, at::empty({6}, at::kMeta)),
          FUSED_CONTAINS(op) && FUSED_CONTAINS("expected bias on the same device as input"));
    }
  }
}

TEST_CASE("conv operators reject bad arguments with clear messages", "[errors]") {
  SECTION("the valid base call works") {
    const Opts o = at::TensorOptions().dtype(at::kFloat);
    CtArgs a = ct_args(o);
    a.input = at::randn({2, 4, 3, 4, 5});
    a.weight = at::randn({4, 4, 3, 3, 3});
    CHECK_NOTHROW(call_ct(a));
    a.input = at::randn({2, 4, 5, 6, 7});
    CHECK_NOTHROW(call_cv(a));
  }
  SECTION("CPU tensors") { check_error_cases(conv_error_cases(), at::kCPU); }
  SECTION("Meta tensors: the same checks, the same messages") {
    check_error_cases(conv_error_cases(), at::kMeta);
  }
  SECTION("through autograd (parameters require grad)") {
    CtArgs a = ct_args(at::TensorOptions());
    a.input = at::randn({2, 4, 3, 4, 5}).requires_grad_();
    a.weight = at::randn({4, 4, 3, 3, 3}).requires_grad_();
    a.gn_weight = at::randn({3}).requires_grad_();
    REQUIRE_C10_ERROR(call_ct(a),
                      FUSED_CONTAINS(kCt) && FUSED_CONTAINS("expected gn_weight of shape (4,)"));
    a.input = at::randn({2, 4, 5, 6, 7}).requires_grad_();
    REQUIRE_C10_ERROR(call_cv(a),
                      FUSED_CONTAINS(kCv) && FUSED_CONTAINS("expected gn_weight of shape (4,)"));
    a.gn_weight = at::randn({4}).requires_grad_();
    a.padding = {-1, 0, 0};
    REQUIRE_C10_ERROR(call_cv(a), FUSED_CONTAINS(kCv) && FUSED_CONTAINS("expected padding >= 0"));
  }
  SECTION("tensors on mismatched devices (Meta tensors with a CPU input)") {
    for (bool transposed : {true, false}) {
      const char* op = transposed ? kCt : kCv;
      INFO(op);
      auto base = [&] {
        CtArgs a = ct_args(at::TensorOptions());
        a.input = transposed ? at::randn({2, 4, 3, 4, 5}) : at::randn({2, 4, 5, 6, 7});
        a.weight = at::randn({4, 4, 3, 3, 3});
        a.conv_bias = at::randn({4});
        a.gn_weight = at::randn({4});
        a.gn_bias = at::randn({4});
        return a;
      };
      auto call = [&](const CtArgs& a) { transposed ? call_ct(a) : call_cv(a); };
      CtArgs a = base();
      a.weight = at::empty({4, 4, 3, 3, 3}, at::kMeta);
      REQUIRE_C10_ERROR(call(a), FUSED_CONTAINS(op) &&
                                     FUSED_CONTAINS("expected weight on the same device as input"));
      a = base();
      a.conv_bias = at::empty({4}, at::kMeta);
      REQUIRE_C10_ERROR(
          call(a),
          FUSED_CONTAINS(op) && FUSED_CONTAINS("expected conv_bias on the same device as input"));
      a = base();
      a.gn_weight = at::empty({4}, at::kMeta);
      REQUIRE_C10_ERROR(
          call(a),
          FUSED_CONTAINS(op) && FUSED_CONTAINS("expected gn_weight on the same device as input"));
      a = base();
      a.gn_bias = at::empty({4}, at::kMeta);
      REQUIRE_C10_ERROR(
          call(a),
          FUSED_CONTAINS(op) && FUSED_CONTAINS("expected gn_bias on the same device as input"));
    }
  }
}

TEST_CASE("internal backward operators check the saved tensors", "[errors]") {
  const at::Tensor x = at::randn({2, 6, 5});
  const at::Tensor go = at::randn({2, 6, 5});
  const at::Tensor stats = at::zeros({2, 3});
  const std::array<bool, 3> all{true, true, true};
  SECTION("_relu_group_norm_backward") {
    const char* op = "fused::relu_group_norm (backward)";
    REQUIRE_C10_ERROR(fused_ops::api::_relu_group_norm_backward(at::randn({2, 6, 4}), x, stats,
                                                                stats, 3, c10::nullopt, all),
                      FUSED_CONTAINS(op) && FUSED_CONTAINS("expected grad_output of shape"));
    REQUIRE_C10_ERROR(fused_ops::api::_relu_group_norm_backward(go, x, at::zeros({2, 2}), stats, 3,
                                                                c10::nullopt, all),
                      FUSED_CONTAINS(op) && FUSED_CONTAINS("expected mean of shape (2, 3)"));
    REQUIRE_C10_ERROR(fused_ops::api::_relu_group_norm_backward(go, x, stats, stats.to(at::kDouble),
                                                                3, c10::nullopt, all),
                      FUSED_CONTAINS(op) && FUSED_CONTAINS("expected rstd of dtype Float"));
    REQUIRE_C10_ERROR(fused_ops::api::_relu_group_norm_backward(go.to(at::kDouble), x, stats, stats,
                                                                3, c10::nullopt, all),
                      FUSED_CONTAINS(op) &&
                          FUSED_CONTAINS("expected grad_output to have the same dtype as input"));
  }
  SECTION("_group_norm_mean_backward") {
    const char* op = "fused::group_norm_mean (backward)";
    const at::Tensor cm = at::zeros({2, 6});
    REQUIRE_C10_ERROR(
        fused_ops::api::_group_norm_mean_backward(go, x, stats, stats, cm, 3, c10::nullopt, all),
        FUSED_CONTAINS(op) && FUSED_CONTAINS("expected grad_output of shape [2]"));
    REQUIRE_C10_ERROR(
        fused_ops::api::_group_norm_mean_backward(at::randn({2}), x, stats, stats,
                                                  at::zeros({2, 3}), 3, c10::nullopt, all),
        FUSED_CONTAINS(op) && FUSED_CONTAINS("expected channel_mean of shape (2, 6)"));
  }
}

// ---------------------------------------------------------------------------------------
// Meta kernels.

namespace {

// Expected conv output size (independent of the library's shape inference).
int64_t conv_out_size(bool transposed, int64_t in, int64_t k, int64_t stride, int64_t padding,
                      int64_t output_padding, int64_t dilation) {
  if (transposed) {
    return (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1;
  }
  return (in + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
}

Sizes expected_conv_shape(bool transposed, const ConvCase& c) {
  Sizes s{c.input[0], c.c_out};
  for (int i = 0; i < 3; ++i) {
    s.push_back(conv_out_size(transposed, c.input[i + 2], c.kernel[i], c.stride[i], c.padding[i],
                              transposed ? c.output_padding[i] : 0, c.dilation[i]));
  }
  return s;
}

}  // namespace

TEST_CASE("Meta kernels return the right shapes and dtypes", "[meta]") {
  const auto dtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
  SECTION("relu_group_norm and group_norm_mean") {
    for (auto dtype : dtypes) {
      INFO(dtype_name(dtype));
      const Opts o = at::TensorOptions().dtype(dtype).device(at::kMeta);
      const at::Tensor x = at::empty({3, 6, 5, 7, 2}, o), w = at::empty({6}, o);
      const at::Tensor y = fused_ops::api::relu_group_norm(x, 3, w, w, 1e-5);
      CHECK(y.is_meta());
      CHECK(y.sizes().vec() == (Sizes{3, 6, 5, 7, 2}));
      CHECK(y.scalar_type() == dtype);
      const at::Tensor m = fused_ops::api::group_norm_mean(x, 3, c10::nullopt, w, 1e-5);
      CHECK(m.is_meta());
      CHECK(m.sizes().vec() == (Sizes{3}));
      CHECK(m.scalar_type() == dtype);
      CHECK(fused_ops::api::group_norm_mean(at::empty({0, 6, 4}, o), 2).sizes().vec() ==
            (Sizes{0}));
    }
  }
  SECTION("internal forward and backward operators") {
    for (auto dtype : dtypes) {
      INFO(dtype_name(dtype));
      const auto stats = dtype == at::kDouble ? at::kDouble : at::kFloat;
      const Opts o = at::TensorOptions().dtype(dtype).device(at::kMeta);
      const at::Tensor x = at::empty({3, 6, 5, 7}, o), w = at::empty({6}, o);
      auto [y, mean, rstd] = fused_ops::api::_relu_group_norm_forward(x, 2, w, w, 1e-5);
      CHECK(y.sizes().vec() == (Sizes{3, 6, 5, 7}));
      CHECK(mean.sizes().vec() == (Sizes{3, 2}));
      CHECK(rstd.sizes().vec() == (Sizes{3, 2}));
      CHECK(mean.scalar_type() == stats);
      CHECK(rstd.scalar_type() == stats);
      auto [out, mean2, rstd2, cm] = fused_ops::api::_group_norm_mean_forward(x, 2, w, w, 1e-5);
      CHECK(out.sizes().vec() == (Sizes{3}));
      CHECK(out.scalar_type() == dtype);
      CHECK(mean2.sizes().vec() == (Sizes{3, 2}));
      CHECK(cm.sizes().vec() == (Sizes{3, 6}));
      CHECK(cm.scalar_type() == stats);

      auto [gx, gw, gb] =
          fused_ops::api::_relu_group_norm_backward(y, x, mean, rstd, 2, w, {true, true, false});
      CHECK(gx.sizes().vec() == (Sizes{3, 6, 5, 7}));
      CHECK(gx.scalar_type() == dtype);
      CHECK(gw.sizes().vec() == (Sizes{6}));
      CHECK_FALSE(gb.defined());
      auto [gx2, gw2, gb2] = fused_ops::api::_group_norm_mean_backward(
          out, x, mean2, rstd2, cm, 2, c10::nullopt, {false, true, true});
      CHECK_FALSE(gx2.defined());
      CHECK_FALSE(gw2.defined());  // no weight: no weight gradient
      CHECK(gb2.sizes().vec() == (Sizes{6}));
    }
  }
  SECTION("conv_transpose3d_relu_group_norm: the transposed-convolution output shape") {
    for (const auto& c : conv_transpose_cases()) {
      INFO(describe(c));
      for (auto dtype : dtypes) {
        const Opts o = at::TensorOptions().dtype(dtype).device(at::kMeta);
        const ConvParams p = random_conv_params(c, true);
        const at::Tensor y = fused_conv_transpose3d_relu_group_norm(
            c, at::empty(c.input, o), at::empty(p.weight.sizes(), o),
            c.conv_bias ? OptTensor(at::empty({c.c_out}, o)) : c10::nullopt,
            c.gn_weight ? OptTensor(at::empty({c.c_out}, o)) : c10::nullopt,
            c.gn_bias ? OptTensor(at::empty({c.c_out}, o)) : c10::nullopt);
        CHECK(y.is_meta());
        CHECK(y.scalar_type() == dtype);
        CHECK(y.sizes().vec() == expected_conv_shape(true, c));
      }
    }
  }
  SECTION("conv3d_group_norm_mean: (N,)") {
    for (const auto& c : conv3d_cases()) {
      INFO(describe(c));
      for (auto dtype : dtypes) {
        const Opts o = at::TensorOptions().dtype(dtype).device(at::kMeta);
        const ConvParams p = random_conv_params(c, false);
        const at::Tensor y =
            fused_conv3d_group_norm_mean(c, at::empty(c.input, o), at::empty(p.weight.sizes(), o),
                                         c10::nullopt, c10::nullopt, c10::nullopt);
        CHECK(y.is_meta());
        CHECK(y.scalar_type() == dtype);
        CHECK(y.sizes().vec() == (Sizes{c.input[0]}));
      }
    }
  }
  SECTION("Meta shapes agree with the CPU kernels' (and with ATen's convolution)") {
    for (const auto& c : conv_transpose_cases()) {
      INFO(describe(c));
      const ConvParams p = random_conv_params(c, true);
      const at::Tensor cpu = fused_conv_transpose3d_relu_group_norm(
          c, p.input, p.weight, p.conv_bias, p.gn_weight, p.gn_bias);
      const at::Tensor meta = fused_conv_transpose3d_relu_group_norm(
          c, p.input.to(at::kMeta), p.weight.to(at::kMeta),
          p.conv_bias ? OptTensor(p.conv_bias->to(at::kMeta)) : c10::nullopt,
          p.gn_weight ? OptTensor(p.gn_weight->to(at::kMeta)) : c10::nullopt,
          p.gn_bias ? OptTensor(p.gn_bias->to(at::kMeta)) : c10::nullopt);
      const at::Tensor aten =
          at::conv_transpose3d(p.input, p.weight, p.conv_bias, c.stride, c.padding,
                               c.output_padding, c.groups, c.dilation);
      CHECK(cpu.sizes().vec() == meta.sizes().vec());
      CHECK(cpu.sizes().vec() == aten.sizes().vec());
    }
  }
}

TEST_CASE("Meta kernels return the strides the CPU kernels return (what torch.compile relies on)",
          "[meta]") {
  at::manual_seed(40);
  // Meta tensors with exactly the input's sizes and strides.
  auto meta_like = [](const at::Tensor& t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
  };
  for (Layout layout : {Layout::Contiguous, Layout::ChannelsLast, Layout::NonContiguous}) {
    INFO("input " << layout_name(layout));
    const at::Tensor x = with_layout(at::randn({2, 6, 3, 4, 5}), layout);
    const at::Tensor w = at::randn({6}), b = at::randn({6});
    const at::Tensor xm = meta_like(x), wm = meta_like(w), bm = meta_like(b);
    SECTION("relu_group_norm and its internal forward/backward") {
      const at::Tensor y = fused_ops::api::relu_group_norm(x, 3, w, b, 1e-5);
      const at::Tensor ym = fused_ops::api::relu_group_norm(xm, 3, wm, bm, 1e-5);
      CHECK(y.strides().vec() == ym.strides().vec());
      auto [y2, mean, rstd] = fused_ops::api::_relu_group_norm_forward(x, 3, w, b, 1e-5);
      auto [y2m, meanm, rstdm] = fused_ops::api::_relu_group_norm_forward(xm, 3, wm, bm, 1e-5);
      CHECK(y2.strides().vec() == y2m.strides().vec());
      CHECK(mean.strides().vec() == meanm.strides().vec());
      const at::Tensor go = with_layout(at::randn({2, 6, 3, 4, 5}), layout);
      auto [gx, gw, gb] =
          fused_ops::api::_relu_group_norm_backward(go, x, mean, rstd, 3, w, {true, true, true});
      auto [gxm, gwm, gbm] = fused_ops::api::_relu_group_norm_backward(
          meta_like(go), xm, meta_like(mean), meta_like(rstd), 3, wm, {true, true, true});
      CHECK(gx.sizes().vec() == gxm.sizes().vec());
      CHECK(gx.strides().vec() == gxm.strides().vec());
      CHECK(gw.strides().vec() == gwm.strides().vec());
    }
    SECTION("group_norm_mean and its internal forward/backward") {
      auto [y, mean, rstd, cm] = fused_ops::api::_group_norm_mean_forward(x, 3, w, b, 1e-5);
      auto [ym, meanm, rstdm, cmm] = fused_ops::api::_group_norm_mean_forward(xm, 3, wm, bm, 1e-5);
      CHECK(y.strides().vec() == ym.strides().vec());
      CHECK(cm.strides().vec() == cmm.strides().vec());
      const at::Tensor go = at::randn({2});
      auto [gx, gw, gb] = fused_ops::api::_group_norm_mean_backward(go, x, mean, rstd, cm, 3, w,
                                                                    {true, true, true});
      auto [gxm, gwm, gbm] = fused_ops::api::_group_norm_mean_backward(
          meta_like(go), xm, meta_like(mean), meta_like(rstd), meta_like(cm), 3, wm,
          {true, true, true});
      CHECK(gx.strides().vec() == gxm.strides().vec());
      CHECK(gb.strides().vec() == gbm.strides().vec());
    }
  }
  SECTION("conv_transpose3d_relu_group_norm") {
    for (Layout layout : {Layout::Contiguous, Layout::ChannelsLast}) {
      INFO("input " << layout_name(layout));
      const ConvCase c = conv_transpose_cases()[1];
      const ConvParams p = random_conv_params(c, true);
      const at::Tensor x = with_layout(p.input, layout);
      const at::Tensor y = fused_conv_transpose3d_relu_group_norm(c, x, p.weight, p.conv_bias,
                                                                  p.gn_weight, p.gn_bias);
      const at::Tensor ym = fused_conv_transpose3d_relu_group_norm(
          c, meta_like(x), meta_like(p.weight), meta_like(*p.conv_bias), meta_like(*p.gn_weight),
          meta_like(*p.gn_bias));
      CHECK(y.sizes().vec() == ym.sizes().vec());
      CHECK(y.strides().vec() == ym.strides().vec());
    }
  }
}
