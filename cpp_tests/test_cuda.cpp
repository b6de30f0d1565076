// The CUDA kernels: the same forward/backward value checks as on the CPU, on CUDA tensors,
// against float64 references; float32 with TF32 off for the conv operators; half/bfloat16;
// a large group (> 600k elements, mean offset 5); determinism; device checks.
//
// Every test case skips itself (with a printed reason) when no CUDA GPU is available or the
// library was built without its CUDA kernels. Sizes are modest: the whole file should take
// seconds, also under compute-sanitizer (e.g. `compute-sanitizer ./fused_ops_tests "[cuda]"`).
#include "test_utils.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/cuda.h>

#include <cstdint>
#include <cstring>

#ifdef FUSED_OPS_WITH_CUDA
#include "common/layout_kernels.h"
#include "common/run_kernel.h"
#endif

using namespace fused_ops_test;

namespace {

const at::Device kCUDA(at::kCUDA, 0);

// Why the CUDA tests cannot run in this process; empty when they can.
std::string cuda_unavailable_reason() {
#ifndef FUSED_OPS_WITH_CUDA
  return "libfused_ops was built without its CUDA kernels (FUSED_OPS_WITH_CUDA=OFF)";
#else
  if (!torch::cuda::is_available()) {
    return "no CUDA GPU available (torch::cuda::is_available() is false)";
  }
  return "";
#endif
}

// Tolerances of the CUDA kernels against float64 (the same as the CPU kernels').
Tol cuda_tol(at::ScalarType dtype) { return tol_for(dtype); }

// Sets cuDNN's TF32, determinism and benchmark flags for a scope, restoring them after.
class CudnnFlagsGuard {
 public:
  CudnnFlagsGuard(bool allow_tf32, bool deterministic)
      : tf32_(at::globalContext().allowTF32CuDNN()),
        deterministic_(at::globalContext().deterministicCuDNN()),
        benchmark_(at::globalContext().benchmarkCuDNN()) {
    at::globalContext().setAllowTF32CuDNN(allow_tf32);
    at::globalContext().setDeterministicCuDNN(deterministic);
    at::globalContext().setBenchmarkCuDNN(false);
  }
  ~CudnnFlagsGuard() {
    at::globalContext().setAllowTF32CuDNN(tf32_);
    at::globalContext().setDeterministicCuDNN(deterministic_);
    at::globalContext().setBenchmarkCuDNN(benchmark_);
  }

 private:
  bool tf32_, deterministic_, benchmark_;
};

std::vector<NormCase> cuda_norm_cases() {
  return {
      {{2, 6, 5, 7}, 3, true, true, 1e-5},
      {{1, 4, 3, 5, 7}, 4, true, true, 1e-5},     // batch 1, 1 channel per group
      {{3, 8, 13}, 2, false, false, 1e-5},        // no affine
      {{2, 6, 9}, 3, true, false, 1e-3},          // weight only
      {{2, 6, 9}, 1, false, true, 1e-5},          // bias only
      {{2, 4}, 2, true, true, 1e-5},              // HxW = 1
      {{2, 16, 33, 35}, 4, true, true, 1e-5},     // 4620-element groups
      {{3, 32, 9, 11, 13}, 8, true, true, 1e-5},  // 5148-element groups, 24 of them per sample
  };
}

const NormOp kOps[] = {NormOp::ReluGroupNorm, NormOp::GroupNormMean};

// Forward and backward of `f`, twice; every output bitwise equal across the two runs.
void check_deterministic(const std::string& what,
                         const std::function<std::vector<at::Tensor>()>& run) {
  INFO(what);
  const auto a = run();
  const auto b = run();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("result " << i);
    CHECK(at::equal(a[i], b[i]));
  }
}

}  // namespace

// Skips the test case when the CUDA tests cannot run.
#define SKIP_WITHOUT_CUDA()                                      \
  do {                                                           \
    const std::string fused_ops_why = cuda_unavailable_reason(); \
    if (!fused_ops_why.empty()) {                                \
      FUSED_SKIP(fused_ops_why);                                 \
    }                                                            \
  } while (false)

TEST_CASE("CUDA: relu_group_norm / group_norm_mean match the float64 reference", "[cuda][norm]") {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(30);
  SECTION("float32, tolerance 1e-5") {
    for (NormOp op : kOps)
      for (const auto& c : cuda_norm_cases())
        check_norm_case(op, c, at::kFloat, kCUDA, Layout::Contiguous, cuda_tol(at::kFloat));
  }
  SECTION("float64, tolerance 1e-10") {
    for (NormOp op : kOps)
      for (const auto& c : cuda_norm_cases())
        check_norm_case(op, c, at::kDouble, kCUDA, Layout::Contiguous, cuda_tol(at::kDouble));
  }
  SECTION("float16 and bfloat16") {
    for (auto dtype : {at::kHalf, at::kBFloat16})
      for (NormOp op : kOps)
        for (const auto& c : cuda_norm_cases())
          check_norm_case(op, c, dtype, kCUDA, Layout::Contiguous, cuda_tol(dtype));
  }
  SECTION("channels_last and non-contiguous inputs and grad_outputs") {
    for (Layout layout : {Layout::ChannelsLast, Layout::NonContiguous})
      for (NormOp op : kOps) {
        check_norm_case(op, {{2, 6, 3, 5, 7}, 3}, at::kFloat, kCUDA, layout, cuda_tol(at::kFloat));
        check_norm_case(op, {{2, 6, 5, 7}, 2}, at::kHalf, kCUDA, layout, cuda_tol(at::kHalf));
        check_norm_case(op, {{2, 6, 3, 5, 7}, 3}, at::kFloat, kCUDA, Layout::Contiguous,
                        cuda_tol(at::kFloat), 0.0, layout);
        // Channel counts that group_norm_mean's channels-last kernel reads in place (a
        // multiple of the 16-byte vector), with a mean offset (its shifted sums).
        check_norm_case(op, {{2, 8, 3, 5, 7}, 4}, at::kFloat, kCUDA, layout, cuda_tol(at::kFloat));
        check_norm_case(op, {{2, 24, 6, 5, 7}, 8}, at::kFloat, kCUDA, layout, cuda_tol(at::kFloat),
                        5.0);
        check_norm_case(op, {{2, 16, 5, 7}, 4}, at::kHalf, kCUDA, layout, cuda_tol(at::kHalf));
      }
  }
  SECTION("mean offset 5 + randn, moderate groups") {
    for (NormOp op : kOps)
      check_norm_case(op, {{2, 4, 37, 29}, 2}, at::kFloat, kCUDA, Layout::Contiguous,
                      cuda_tol(at::kFloat), 5.0);
  }
  SECTION("a group that ReLU zeroes entirely") {
    at::Tensor x64 = randn64({2, 4, 3, 5});
    x64.select(0, 0).slice(0, 0, 2).abs_().neg_();
    const at::Tensor w64 = random_gn_weight(4), b64 = random_gn_bias(4);
    const at::Tensor x = leaf(x64, at::kFloat, kCUDA);
    const at::Tensor w = leaf(w64, at::kFloat, kCUDA), b = leaf(b64, at::kFloat, kCUDA);
    const at::Tensor out = fused_ops::api::relu_group_norm(x, 2, w, b, 1e-5);
    const at::Tensor xr = leaf64(x), wr = leaf64(w), br = leaf64(b);
    const at::Tensor ref = ref_relu_group_norm(xr, 2, wr, br, 1e-5);
    check_close(out, ref, cuda_tol(at::kFloat), "output");
    const at::Tensor go64 = randn64({2, 4, 3, 5});
    const auto g = grads_of(out, go64.to(kCUDA, at::kFloat), {x, w, b});
    const auto gr = grads_of(ref, go64, {xr, wr, br});
    check_close(g[0], gr[0], cuda_tol(at::kFloat), "grad input");
    check_close(g[1], gr[1], cuda_tol(at::kFloat), "grad weight");
    check_close(g[2], gr[2], cuda_tol(at::kFloat), "grad bias");
  }
  SECTION("NaN propagates like the reference") {
    at::Tensor x64 = randn64({2, 4, 3, 5});
    x64.index_put_({1, 3, 2, 4}, std::numeric_limits<double>::quiet_NaN());
    const at::Tensor w64 = random_gn_weight(4), b64 = random_gn_bias(4);
    for (NormOp op : kOps) {
      INFO(norm_op_name(op));
      const at::Tensor out = fused_norm(op, x64.to(kCUDA, at::kFloat), 2, w64.to(kCUDA, at::kFloat),
                                        b64.to(kCUDA, at::kFloat), 1e-5)
                                 .cpu();
      const at::Tensor ref = ref_norm(op, x64, 2, w64, b64, 1e-5);
      CHECK(at::equal(at::isnan(out), at::isnan(ref)));
      const at::Tensor finite = at::logical_not(at::isnan(ref));
      check_close(out.masked_select(finite), ref.masked_select(finite), cuda_tol(at::kFloat),
                  "finite part of the output");
    }
  }
  SECTION("empty batch (N = 0)") {
    const at::Tensor x = leaf(at::empty({0, 6, 3, 5}, f64()), at::kFloat, kCUDA);
    const at::Tensor w = leaf(random_gn_weight(6), at::kFloat, kCUDA);
    const at::Tensor b = leaf(random_gn_bias(6), at::kFloat, kCUDA);
    const at::Tensor y = fused_ops::api::relu_group_norm(x, 3, w, b, 1e-5);
    REQUIRE(y.sizes().vec() == (Sizes{0, 6, 3, 5}));
    auto g = grads_of(y, at::empty_like(y), {x, w, b});
    CHECK(g[0].sizes().vec() == (Sizes{0, 6, 3, 5}));
    CHECK(at::equal(g[1], at::zeros_like(w)));
    CHECK(at::equal(g[2], at::zeros_like(b)));
    const at::Tensor m = fused_ops::api::group_norm_mean(x, 3, w, b, 1e-5);
    REQUIRE(m.sizes().vec() == (Sizes{0}));
    g = grads_of(m, at::empty_like(m), {x, w, b});
    CHECK(g[0].sizes().vec() == (Sizes{0, 6, 3, 5}));
    CHECK(at::equal(g[1], at::zeros_like(w)));
    CHECK(at::equal(g[2], at::zeros_like(b)));
  }
}

TEST_CASE("CUDA: conv operators match the float64 reference", "[cuda][conv]") {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(31);
  SECTION("float32 with TF32 off, tolerance 1e-5") {
    CudnnFlagsGuard flags(/*allow_tf32=*/false, /*deterministic=*/false);
    REQUIRE_FALSE(at::globalContext().allowTF32CuDNN());
    for (const auto& c : conv_transpose_cases())
      check_conv_case(true, c, at::kFloat, kCUDA, Layout::Contiguous, cuda_tol(at::kFloat));
    for (const auto& c : conv3d_cases())
      check_conv_case(false, c, at::kFloat, kCUDA, Layout::Contiguous, cuda_tol(at::kFloat));
  }
  SECTION("float64") {
    for (const auto& c : conv_transpose_cases())
      check_conv_case(true, c, at::kDouble, kCUDA, Layout::Contiguous, cuda_tol(at::kDouble));
    for (const auto& c : conv3d_cases())
      check_conv_case(false, c, at::kDouble, kCUDA, Layout::Contiguous, cuda_tol(at::kDouble));
  }
  SECTION("float16 and bfloat16") {
    for (auto dtype : {at::kHalf, at::kBFloat16}) {
      for (const auto& c : conv_transpose_cases())
        check_conv_case(true, c, dtype, kCUDA, Layout::Contiguous, cuda_tol(dtype));
      for (const auto& c : conv3d_cases())
        check_conv_case(false, c, dtype, kCUDA, Layout::Contiguous, cuda_tol(dtype));
    }
  }
  SECTION("channels_last (ChannelsLast3d) and non-contiguous inputs, float32, TF32 off") {
    CudnnFlagsGuard flags(/*allow_tf32=*/false, /*deterministic=*/false);
    for (Layout layout : {Layout::ChannelsLast, Layout::NonContiguous}) {
      for (const auto& c : conv_transpose_cases())
        check_conv_case(true, c, at::kFloat, kCUDA, layout, cuda_tol(at::kFloat));
      for (const auto& c : conv3d_cases())
        check_conv_case(false, c, at::kFloat, kCUDA, layout, cuda_tol(at::kFloat));
    }
  }
  SECTION("empty batch (N = 0)") {
    ConvCase c = conv_transpose_cases()[0];
    c.input[0] = 0;
    const ConvParams p = random_conv_params(c, true);
    const at::Tensor x = leaf(p.input, at::kFloat, kCUDA), w = leaf(p.weight, at::kFloat, kCUDA);
    const at::Tensor gw = leaf(*p.gn_weight, at::kFloat, kCUDA);
    const at::Tensor y =
        fused_conv_transpose3d_relu_group_norm(c, x, w, c10::nullopt, gw, c10::nullopt);
    REQUIRE(y.sizes().vec() == (Sizes{0, 8, 5, 7, 8}));
    const auto g = grads_of(y, at::empty_like(y), {x, w, gw});
    CHECK(at::equal(g[1], at::zeros_like(w)));
    CHECK(at::equal(g[2], at::zeros_like(gw)));
    ConvCase c3 = conv3d_cases()[0];
    c3.input[0] = 0;
    const ConvParams p3 = random_conv_params(c3, false);
    const at::Tensor x3 = leaf(p3.input, at::kFloat, kCUDA),
                     w3 = leaf(p3.weight, at::kFloat, kCUDA);
    const at::Tensor m =
        fused_conv3d_group_norm_mean(c3, x3, w3, c10::nullopt, c10::nullopt, c10::nullopt);
    REQUIRE(m.sizes().vec() == (Sizes{0}));
    const auto g3 = grads_of(m, at::empty_like(m), {x3, w3});
    CHECK(at::equal(g3[1], at::zeros_like(w3)));
  }
  SECTION("a C++ training step on the GPU reduces the loss") {
    CudnnFlagsGuard flags(/*allow_tf32=*/false, /*deterministic=*/false);
    const ConvCase c = conv3d_cases()[0];
    const ConvParams p = random_conv_params(c, false, 0.5);
    const at::Tensor x = p.input.to(kCUDA, at::kFloat);
    const at::Tensor target = at::randn({c.input[0]}, x.options());
    std::vector<at::Tensor> params{
        leaf(p.weight, at::kFloat, kCUDA), leaf(*p.conv_bias, at::kFloat, kCUDA),
        leaf(*p.gn_weight, at::kFloat, kCUDA), leaf(*p.gn_bias, at::kFloat, kCUDA)};
    auto loss_of = [&] {
      return (fused_conv3d_group_norm_mean(c, x, params[0], params[1], params[2], params[3]) -
              target)
          .pow(2)
          .mean();
    };
    const at::Tensor loss0 = loss_of();
    const auto grads = torch::autograd::grad({loss0}, params);
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) params[i].sub_(0.2 * grads[i]);
    }
    CHECK(loss_of().item<double>() < loss0.item<double>());
  }
}

TEST_CASE("CUDA: a large group (> 600k elements) with mean offset 5", "[cuda][norm]") {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(32);
  // (2, 4, 61, 71, 73): HxW = 316163, 2 channels per group -> 632326 elements per group;
  // with num_groups 1, 1264652. Values 5 + randn: within tolerance of float64, or no worse
  // than the unfused ATen composite in the same dtype (check_norm_case).
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16})
    for (int64_t G : {2, 1})
      for (NormOp op : kOps)
        check_norm_case(op, {{2, 4, 61, 71, 73}, G}, dtype, kCUDA, Layout::Contiguous,
                        cuda_tol(dtype), 5.0);
}

TEST_CASE("CUDA: results are deterministic (two runs bitwise equal)", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(33);
  SECTION("norm operators, forward and backward") {
    for (const Sizes& shape : {Sizes{4, 32, 17, 19, 23}, Sizes{2, 4, 61, 71, 73}})
      for (NormOp op : kOps)
        for (auto dtype : {at::kFloat, at::kHalf}) {
          const int64_t C = shape[1];
          const at::Tensor x = leaf(randn64(shape, 1.0, 5.0), dtype, kCUDA);
          const at::Tensor w = leaf(random_gn_weight(C), dtype, kCUDA);
          const at::Tensor b = leaf(random_gn_bias(C), dtype, kCUDA);
          const at::Tensor go = op == NormOp::ReluGroupNorm
                                    ? at::randn(shape, x.options().requires_grad(false))
                                    : at::randn({shape[0]}, x.options().requires_grad(false));
          check_deterministic(std::string(norm_op_name(op)) + " " + dtype_name(dtype) + " shape " +
                                  to_string(c10::IntArrayRef(shape)),
                              [&] {
                                const at::Tensor out = fused_norm(op, x, 2, w, b, 1e-5);
                                auto g = grads_of(out, go, {x, w, b});
                                g.insert(g.begin(), out.detach());
                                return g;
                              });
        }
  }
  SECTION("conv operators (cuDNN deterministic, TF32 off)") {
    CudnnFlagsGuard flags(/*allow_tf32=*/false, /*deterministic=*/true);
    for (bool transposed : {true, false}) {
      const ConvCase c = transposed ? conv_transpose_cases()[0] : conv3d_cases()[0];
      const ConvParams p = random_conv_params(c, transposed);
      const at::Tensor x = leaf(p.input, at::kFloat, kCUDA), w = leaf(p.weight, at::kFloat, kCUDA);
      const OptTensor cb = leaf(p.conv_bias, at::kFloat, kCUDA);
      const at::Tensor gw = leaf(*p.gn_weight, at::kFloat, kCUDA);
      const at::Tensor gb = leaf(*p.gn_bias, at::kFloat, kCUDA);
      check_deterministic(
          transposed ? "conv_transpose3d_relu_group_norm" : "conv3d_group_norm_mean", [&] {
            const at::Tensor out = transposed
                                       ? fused_conv_transpose3d_relu_group_norm(c, x, w, cb, gw, gb)
                                       : fused_conv3d_group_norm_mean(c, x, w, cb, gw, gb);
            const at::Tensor go = at::ones_like(out);
            auto g = grads_of(out, go, grad_inputs({x, w}, {cb, OptTensor(gw), OptTensor(gb)}));
            g.insert(g.begin(), out.detach());
            return g;
          });
    }
  }
}

TEST_CASE("CUDA: tensors on mismatched devices are rejected", "[cuda][errors]") {
  SKIP_WITHOUT_CUDA();
  const at::Tensor x = at::randn({2, 6, 5}, at::TensorOptions().device(kCUDA));
  SECTION("norm operators: CPU weight or bias with a CUDA input") {
    REQUIRE_C10_ERROR(fused_ops::api::relu_group_norm(x, 3, at::ones({6}), c10::nullopt),
                      FUSED_CONTAINS("fused::relu_group_norm") &&
                          FUSED_CONTAINS("expected weight on the same device as input"));
    REQUIRE_C10_ERROR(fused_ops::api::group_norm_mean(x, 3, c10::nullopt, at::ones({6})),
                      FUSED_CONTAINS("fused::group_norm_mean") &&
                          FUSED_CONTAINS("expected bias on the same device as input"));
    REQUIRE_C10_ERROR(
        fused_ops::api::group_norm_mean(x.cpu(), 3, at::ones({6}, x.options()), c10::nullopt),
        FUSED_CONTAINS("fused::group_norm_mean") &&
            FUSED_CONTAINS("expected weight on the same device as input"));
  }
  SECTION("conv operators: CPU conv weight / gn_weight with a CUDA input") {
    const at::Tensor x5 = at::randn({2, 4, 3, 4, 5}, x.options());
    const at::Tensor w = at::randn({4, 4, 3, 3, 3});
    REQUIRE_C10_ERROR(fused_ops::api::conv_transpose3d_relu_group_norm(
                          x5, w, c10::nullopt, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, 1, {1, 1, 1}, 2,
                          c10::nullopt, c10::nullopt, 1e-5),
                      FUSED_CONTAINS("fused::conv_transpose3d_relu_group_norm") &&
                          FUSED_CONTAINS("expected weight on the same device as input"));
    REQUIRE_C10_ERROR(
        fused_ops::api::conv3d_group_norm_mean(x5, w.to(kCUDA), c10::nullopt, {1, 1, 1}, {1, 1, 1},
                                               {1, 1, 1}, 1, 2, at::ones({4}), c10::nullopt, 1e-5),
        FUSED_CONTAINS("fused::conv3d_group_norm_mean") &&
            FUSED_CONTAINS("expected gn_weight on the same device as input"));
  }
  SECTION("internal backward: statistics on the CPU") {
    const at::Tensor stats = at::zeros({2, 3});
    REQUIRE_C10_ERROR(fused_ops::api::_relu_group_norm_backward(x, x, stats, stats, 3, c10::nullopt,
                                                                {true, true, true}),
                      FUSED_CONTAINS("fused::relu_group_norm (backward)") &&
                          FUSED_CONTAINS("expected mean on device"));
  }
}

TEST_CASE("CUDA: conv3d_group_norm_mean without autograd runs the one-pass kernels",
          "[cuda][onepass]") {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(31);
  const at::NoGradGuard no_grad;
  // The references run on the CPU (no cuDNN: racecheck runs this test case).
  for (const auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (const auto& c : conv3d_cases()) {
      INFO(describe(c) << ", " << dtype_name(dtype));
      const ConvParams p = random_conv_params(c, false, /*input_offset=*/0.5);
      const auto on_gpu = [&](const OptTensor& t) -> OptTensor {
        return t ? OptTensor(t->to(kCUDA, dtype)) : OptTensor();
      };
      const auto rounded = [&](const OptTensor& t) -> OptTensor {
        return t ? OptTensor(t->to(dtype).to(at::kDouble)) : OptTensor();
      };
      const at::Tensor x = p.input.to(kCUDA, dtype), w = p.weight.to(kCUDA, dtype);
      CHECK(fused_ops::api::conv3d_group_norm_mean_path(
                x, w, on_gpu(p.conv_bias), c.stride, c.padding, c.dilation, c.groups, c.num_groups,
                on_gpu(p.gn_weight), on_gpu(p.gn_bias), c.eps) == "onepass");
      const at::Tensor out = fused_conv3d_group_norm_mean(c, x, w, on_gpu(p.conv_bias),
                                                          on_gpu(p.gn_weight), on_gpu(p.gn_bias));
      REQUIRE(out.scalar_type() == dtype);
      // The float64 reference of the dtype-rounded arguments: the kernels' products are exact
      // (float or double accumulation), so the only rounding left is the output's.
      const at::Tensor ref = ref_conv3d_group_norm_mean(
          c, p.input.to(dtype).to(at::kDouble), p.weight.to(dtype).to(at::kDouble),
          rounded(p.conv_bias), rounded(p.gn_weight), rounded(p.gn_bias));
      check_close(out, ref, cuda_tol(dtype), "output");
      // Deterministic: a second run is bitwise equal.
      CHECK(at::equal(out, fused_conv3d_group_norm_mean(c, x, w, on_gpu(p.conv_bias),
                                                        on_gpu(p.gn_weight), on_gpu(p.gn_bias))));
    }
  }
}

TEST_CASE("CUDA: conv3d_group_norm_mean trains through the one-pass kernels", "[cuda][onepass]") {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(37);
  // Every gradient against the float64 CPU reference (no cuDNN: racecheck runs this test
  // case), for the contiguous and the channels-last input; inputs with a common offset.
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    for (const auto& c : conv3d_cases()) {
      for (const Layout layout : {Layout::Contiguous, Layout::ChannelsLast}) {
        INFO(describe(c) << ", " << dtype_name(dtype));
        const ConvParams p = random_conv_params(c, false);
        const at::Tensor x = leaf(p.input, dtype, kCUDA);
        const at::Tensor w = leaf(p.weight, dtype, kCUDA);
        CHECK(fused_ops::api::conv3d_group_norm_mean_path(
                  x, w, leaf(p.conv_bias, dtype, kCUDA), c.stride, c.padding, c.dilation, c.groups,
                  c.num_groups, leaf(p.gn_weight, dtype, kCUDA), leaf(p.gn_bias, dtype, kCUDA),
                  c.eps) == "onepass");
        check_conv_case(false, c, dtype, kCUDA, layout, cuda_tol(dtype), /*input_offset=*/0.5);
      }
    }
  }
}

TEST_CASE("CUDA: conv3d_group_norm_mean's input gradient without the weight's (lag tables)",
          "[cuda][onepass]") {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(41);
  // A frozen conv weight: in float32 the backward takes the input gradient from the lag
  // tables (conv3d_group_norm_mean_lag_input_grad_cuda.cu; cpp_tests/test_conv_ops.cpp checks
  // these shapes' plans), in float64 (outside their family) from the recomputing kernel. D of
  // 4 (both correction pairs in one column), 11 (columns 8, 2, 1) and padding; tables of each
  // sample's own and combined from per-segment ones (conv groups straddling GroupNorm groups);
  // inputs with a large common offset. Against the float64 CPU reference.
  std::vector<ConvCase> cases;
  cases.push_back(ConvCase{"k3, 3 -> 24", {2, 3, 11, 9, 34}, 24, {3, 3, 3}});
  {
    ConvCase c{"k (3, 2, 3), padding (1, 1, 0), 2 -> 16", {1, 2, 4, 6, 9}, 16, {3, 2, 3}};
    c.padding = {1, 1, 0};
    cases.push_back(c);
  }
  for (auto& c : cases) {
    c.num_groups = 4;
  }
  {
    // 12 samples, 2 conv groups of 6 channels, GroupNorm groups of 4: 2 segments each.
    ConvCase c{"k3, padding 1, 2 -> 12 in 2 conv groups, 3 GroupNorm groups, N 12",
               {12, 2, 6, 7, 9},
               12,
               {3, 3, 3}};
    c.padding = {1, 1, 1};
    c.groups = 2;
    c.num_groups = 3;
    cases.push_back(c);
  }
  for (const auto& c : cases) {
    for (const auto dtype : {at::kFloat, at::kDouble}) {
      INFO(c.name << ", " << dtype_name(dtype));
      const ConvParams p = random_conv_params(c, false, /*input_offset=*/8.0);
      const at::Tensor x = leaf(p.input, dtype, kCUDA);
      const at::Tensor w = leaf(p.weight, dtype, kCUDA, /*requires_grad=*/false);
      const OptTensor cb = leaf(p.conv_bias, dtype, kCUDA);
      const OptTensor gw = leaf(p.gn_weight, dtype, kCUDA);
      const OptTensor gb = leaf(p.gn_bias, dtype, kCUDA);
      const at::Tensor out = fused_conv3d_group_norm_mean(c, x, w, cb, gw, gb);
      const at::Tensor xr = leaf64(x), wr = leaf(w, at::kDouble, at::kCPU, false);
      const OptTensor cbr = leaf64(cb), gwr = leaf64(gw), gbr = leaf64(gb);
      const at::Tensor ref = ref_conv3d_group_norm_mean(c, xr, wr, cbr, gwr, gbr);
      check_close(out, ref, cuda_tol(dtype), "output");
      const at::Tensor go64 = randn64(ref.sizes().vec());
      const auto grads = grads_of(out, go64.to(kCUDA, dtype), grad_inputs({x}, {cb, gw, gb}));
      const auto ref_grads = grads_of(ref, go64, grad_inputs({xr}, {cbr, gwr, gbr}));
      REQUIRE(grads.size() == ref_grads.size());
      for (size_t i = 0; i < grads.size(); ++i) {
        check_close(grads[i], ref_grads[i], cuda_tol(dtype), i == 0 ? "grad input" : "grad param");
      }
    }
  }
}

TEST_CASE("CUDA: float32 transposed convolutions with TF32 off run the split-TF32 kernels",
          "[cuda][split_tf32]") {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(43);
  CudnnFlagsGuard flags(/*allow_tf32=*/false, /*deterministic=*/false);
  std::vector<ConvCase> cases;
  cases.push_back(ConvCase{"k3, C 8 -> 16", {2, 8, 4, 5, 6}, 16, {3, 3, 3}});
  // More tiles (2 x 22^3 / 128 = 167 row tiles, 2 channel tiles: 128 + 4) than an H100 or
  // H200 has SMs (132): the persistent wgmma kernel's blocks take several tiles each, the last
  // channel tile partly filled (and the input gradient's 132 channels end in a partial block).
  cases.push_back(ConvCase{"k3, C 4 -> 132 on 20^3, N 2", {2, 4, 20, 20, 20}, 132, {3, 3, 3}});
  {
    ConvCase c{
        "k (3, 1, 2), padding (1, 0, 1), dilation 2, no conv bias", {1, 4, 5, 3, 4}, 12, {3, 1, 2}};
    c.padding = {1, 0, 1};
    c.dilation = {2, 2, 2};
    c.conv_bias = false;
    cases.push_back(c);
  }
  for (auto& c : cases) {
    c.num_groups = 4;
    const ConvParams p = random_conv_params(c, true);
    const at::Tensor x = p.input.to(kCUDA, at::kFloat), w = p.weight.to(kCUDA, at::kFloat);
    const std::string path = fused_ops::api::conv_transpose3d_relu_group_norm_path(
        x, w, c10::nullopt, c.stride, c.padding, c.output_padding, c.groups, c.dilation,
        c.num_groups, c10::nullopt, c10::nullopt, 1e-5);
    INFO(c.name);
    // No tensor requires grad: the inference forward, whose conv output stays NDHWC for the
    // GroupNorm to read in place; on the wgmma kernel, with at least 128 output positions per
    // sample (the first case: 6 x 7 x 8, two samples, so row tiles straddle them; the second,
    // 22^3; not the third: 7 x 3 x 4), the convolution computes the GroupNorm's statistics too.
    int64_t positions = 1;
    for (int i = 0; i < 3; ++i) {
      positions *= c.input[i + 2] + (c.kernel[i] - 1) * c.dilation[i] - 2 * c.padding[i];
    }
    const auto kernel_query = c10::Dispatcher::singleton()
                                  .findSchemaOrThrow("fused::_split_tf32_conv_kernel", "")
                                  .typed<std::string(const at::Tensor&)>();
    const bool moments = kernel_query.call(x) == "wgmma" && positions >= 128;
    CHECK(path == std::string("transposed_as_forward_split_tf32") +
                      (moments ? "+relu_moments" : "") + " -> relu_group_norm_channels_last");
    {
      // That inference forward against float64 (check_conv_case's calls record autograd).
      const at::NoGradGuard no_grad;
      const ConvParams q = random_conv_params(c, true, /*input_offset=*/1.0);
      const at::Tensor xq = q.input.to(kCUDA, at::kFloat), wq = q.weight.to(kCUDA, at::kFloat);
      const OptTensor cb = leaf(q.conv_bias, at::kFloat, kCUDA);
      const OptTensor gw = leaf(q.gn_weight, at::kFloat, kCUDA);
      const OptTensor gb = leaf(q.gn_bias, at::kFloat, kCUDA);
      const at::Tensor out = fused_conv_transpose3d_relu_group_norm(c, xq, wq, cb, gw, gb);
      const at::Tensor ref = ref_conv_transpose3d_relu_group_norm(
          c, leaf64(xq), leaf64(wq), leaf64(cb), leaf64(gw), leaf64(gb));
      check_close(out, ref, cuda_tol(at::kFloat), "inference output");
    }
    for (Layout layout : {Layout::Contiguous, Layout::ChannelsLast})
      check_conv_case(true, c, at::kFloat, kCUDA, layout, cuda_tol(at::kFloat),
                      /*input_offset=*/1.0);
  }
}

#ifdef FUSED_OPS_WITH_CUDA
namespace {

// v rounded to the nearest TF32 value (10 mantissa bits), ties to even; infinities and NaN kept.
float round_to_tf32_reference(float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  if ((bits & 0x7f800000u) != 0x7f800000u) {
    const uint32_t dropped = bits & 0x1fffu, kept_lsb = (bits >> 13) & 1u;
    bits &= ~0x1fffu;
    if (dropped > 0x1000u || (dropped == 0x1000u && kept_lsb != 0u)) {
      bits += 0x2000u;
    }
  }
  float r = 0.0f;
  std::memcpy(&r, &bits, sizeof(r));
  return r;
}

}  // namespace
#endif

TEST_CASE("CUDA: the batched transpose moves every value (both tile shapes, TF32 rounding)",
          "[cuda][layout]") {
  SKIP_WITHOUT_CUDA();
#ifdef FUSED_OPS_WITH_CUDA
  at::manual_seed(41);
  struct Shape {
    int64_t batches, rows, cols, offset;  // offset: floats before the input's first value
  };
  // The 64 x 64 float4 tiles (multiples of 4, aligned: whole and partial tiles) and the 32 x 32
  // scalar tiles (odd sizes, a misaligned input).
  for (const Shape& sh :
       {Shape{2, 64, 4096, 0}, Shape{3, 36, 100, 0}, Shape{1, 128, 8, 0}, Shape{2, 4, 260, 0},
        Shape{2, 5, 7, 0}, Shape{1, 64, 210, 0}, Shape{2, 64, 256, 1}})
    for (bool round : {false, true}) {
      const int64_t count = sh.batches * sh.rows * sh.cols;
      const at::Tensor storage = at::randn({count + sh.offset}) * 3.0;
      const at::Tensor in_cpu = storage.narrow(0, sh.offset, count);
      const at::Tensor in = storage.to(kCUDA).narrow(0, sh.offset, count);
      at::Tensor out = at::empty({count}, in.options());
      fused_ops::BatchedTransposeParams params{
          in.const_data_ptr<float>(), out.mutable_data_ptr<float>(), sh.batches, sh.rows, sh.cols};
      params.round_to_tf32 = round;
      fused_ops::run_cuda_kernel("batched transpose test", in, params,
                                 fused_ops::batched_transpose_cuda);
      at::Tensor expected =
          in_cpu.view({sh.batches, sh.rows, sh.cols}).transpose(1, 2).contiguous().view({count});
      if (round) {
        float* e = expected.data_ptr<float>();
        for (int64_t i = 0; i < count; ++i) {
          e[i] = round_to_tf32_reference(e[i]);
        }
      }
      INFO("batches " << sh.batches << ", rows " << sh.rows << ", cols " << sh.cols << ", offset "
                      << sh.offset << (round ? ", rounded to TF32" : ""));
      CHECK(at::equal(out.cpu(), expected));
    }
#endif
}
