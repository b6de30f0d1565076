// fused::relu_group_norm and fused::group_norm_mean on the CPU: forward and backward against
// float64 ATen references (at::relu, at::group_norm, .mean), over shapes, affine variants,
// dtypes and input layouts; the saved statistics of the internal forward operators; NaN
// propagation; empty batches.
#include "test_utils.h"

using namespace fused_ops_test;

namespace {

const at::Device kCPU(at::kCPU);

// Shapes and parameters: spatial sizes not multiples of 4, batch 1, 1 channel per group,
// 2-d to 5-d inputs, every affine combination, two eps values.
std::vector<NormCase> norm_cases() {
  return {
      {{2, 6, 5, 7}, 3, true, true, 1e-5},     // 2 channels per group, HxW = 35
      {{1, 4, 3, 5, 7}, 4, true, true, 1e-5},  // batch 1, 1 channel per group, 5-d
      {{3, 8, 13}, 2, false, false, 1e-5},     // no affine, 3-d
      {{2, 6, 9}, 3, true, false, 1e-3},       // weight only, eps 1e-3
      {{2, 6, 9}, 1, false, true, 1e-5},       // bias only, a single group
      {{2, 4}, 2, true, true, 1e-5},           // 2-d input (HxW = 1)
      {{2, 16, 33, 35}, 4, true, true, 1e-5},  // larger groups (4620 elements)
  };
}

const NormOp kOps[] = {NormOp::ReluGroupNorm, NormOp::GroupNormMean};

}  // namespace

TEST_CASE("relu_group_norm / group_norm_mean match the float64 ATen reference on the CPU",
          "[norm][cpu]") {
  at::manual_seed(1);
  SECTION("float64, tolerance 1e-10") {
    for (NormOp op : kOps)
      for (const auto& c : norm_cases())
        check_norm_case(op, c, at::kDouble, kCPU, Layout::Contiguous, tol_for(at::kDouble));
  }
  SECTION("float32, tolerance 1e-5") {
    for (NormOp op : kOps)
      for (const auto& c : norm_cases())
        check_norm_case(op, c, at::kFloat, kCPU, Layout::Contiguous, tol_for(at::kFloat));
  }
  SECTION("float16 and bfloat16, loose tolerance") {
    for (auto dtype : {at::kHalf, at::kBFloat16})
      for (NormOp op : kOps)
        for (const auto& c : norm_cases())
          check_norm_case(op, c, dtype, kCPU, Layout::Contiguous, tol_for(dtype));
  }
  SECTION("channels_last and non-contiguous inputs") {
    for (Layout layout : {Layout::ChannelsLast, Layout::NonContiguous})
      for (NormOp op : kOps) {
        check_norm_case(op, {{2, 6, 3, 5, 7}, 3}, at::kFloat, kCPU, layout, tol_for(at::kFloat));
        check_norm_case(op, {{2, 6, 5, 7}, 2}, at::kDouble, kCPU, layout, tol_for(at::kDouble));
        check_norm_case(op, {{2, 4, 11}, 4, false, true}, at::kFloat, kCPU, layout,
                        tol_for(at::kFloat));
      }
  }
  SECTION("non-contiguous grad_output") {
    for (NormOp op : kOps) {
      check_norm_case(op, {{2, 6, 3, 5, 7}, 3}, at::kFloat, kCPU, Layout::Contiguous,
                      tol_for(at::kFloat), 0.0, Layout::NonContiguous);
      check_norm_case(op, {{2, 6, 3, 5, 7}, 3}, at::kDouble, kCPU, Layout::ChannelsLast,
                      tol_for(at::kDouble), 0.0, Layout::ChannelsLast);
    }
  }
  SECTION("mean offset: statistics must not cancel") {
    // float32 at offset 5 (within tolerance of float64, or no worse than the unfused ATen
    // composite in float32 where float32 itself cannot do better); float64 at offset 100.
    for (NormOp op : kOps) {
      check_norm_case(op, {{2, 4, 37, 29}, 2}, at::kFloat, kCPU, Layout::Contiguous,
                      tol_for(at::kFloat), 5.0);
      check_norm_case(op, {{2, 4, 37, 29}, 2}, at::kDouble, kCPU, Layout::Contiguous,
                      tol_for(at::kDouble), 100.0);
    }
  }
  SECTION("one large group (100k elements, multi-threaded row pass)") {
    for (NormOp op : kOps)
      check_norm_case(op, {{1, 2, 50000}, 1}, at::kFloat, kCPU, Layout::Contiguous,
                      tol_for(at::kFloat), 3.0);
  }
}

TEST_CASE("relu_group_norm: groups that ReLU zeroes entirely", "[norm][cpu]") {
  at::manual_seed(2);
  // Group 0 of sample 0 is all negative: relu gives a constant group (variance 0), the output
  // there is the bias, and no gradient reaches the input through the ReLU mask.
  at::Tensor x64 = randn64({2, 4, 3, 5});
  x64.select(0, 0).slice(0, 0, 2).abs_().neg_();
  const at::Tensor w64 = random_gn_weight(4), b64 = random_gn_bias(4);
  for (auto dtype : {at::kFloat, at::kDouble}) {
    INFO(dtype_name(dtype));
    const at::Tensor x = leaf(x64, dtype, kCPU);
    const OptTensor w = leaf(w64, dtype, kCPU), b = leaf(b64, dtype, kCPU);
    const at::Tensor out = fused_ops::api::relu_group_norm(x, 2, w, b, 1e-5);
    const at::Tensor xr = leaf64(x);
    const OptTensor wr = leaf64(w), br = leaf64(b);
    const at::Tensor ref = ref_relu_group_norm(xr, 2, wr, br, 1e-5);
    check_close(out, ref, tol_for(dtype), "output");
    check_close(out.select(0, 0).slice(0, 0, 2),
                b64.slice(0, 0, 2).view({2, 1, 1}).expand({2, 3, 5}), tol_for(dtype),
                "zeroed group's output equals its bias");
    const at::Tensor go64 = randn64({2, 4, 3, 5});
    const auto g = grads_of(out, go64.to(dtype), {x, *w, *b});
    const auto gr = grads_of(ref, go64, {xr, *wr, *br});
    check_close(g[0], gr[0], tol_for(dtype), "grad input");
    check_close(g[1], gr[1], tol_for(dtype), "grad weight");
    check_close(g[2], gr[2], tol_for(dtype), "grad bias");
    CHECK(g[0].select(0, 0).slice(0, 0, 2).abs().max().item<double>() == 0.0);
  }
}

TEST_CASE("internal forward operators save the right statistics", "[norm][cpu]") {
  at::manual_seed(3);
  const int64_t N = 3, C = 6, G = 3;
  const double eps = 1e-5;
  const at::Tensor x64 = randn64({N, C, 4, 7}, 1.5, 0.5);
  const at::Tensor w64 = random_gn_weight(C), b64 = random_gn_bias(C);
  const auto dtypes = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16};

  SECTION("_relu_group_norm_forward: (output, mean, rstd) of relu(input)") {
    for (auto dtype : dtypes) {
      INFO(dtype_name(dtype));
      const at::Tensor x = x64.to(dtype), w = w64.to(dtype), b = b64.to(dtype);
      const at::Tensor xv = x.to(at::kDouble);  // the values the kernel saw
      const auto stats = dtype == at::kDouble ? at::kDouble : at::kFloat;
      const Tol tol = dtype == at::kDouble ? tol_for(at::kDouble) : tol_for(at::kFloat);
      auto [out, mean, rstd] = fused_ops::api::_relu_group_norm_forward(x, G, w, b, eps);
      REQUIRE(out.sizes().vec() == x.sizes().vec());
      REQUIRE(mean.sizes().vec() == (Sizes{N, G}));
      REQUIRE(rstd.sizes().vec() == (Sizes{N, G}));
      CHECK(out.scalar_type() == dtype);
      CHECK(mean.scalar_type() == stats);
      CHECK(rstd.scalar_type() == stats);
      const at::Tensor grouped = at::relu(xv).reshape({N, G, -1});
      check_close(mean, grouped.mean(-1), tol, "mean");
      check_close(rstd, (grouped.var(-1, /*unbiased=*/false) + eps).rsqrt(), tol, "rstd");
      check_close(out, ref_relu_group_norm(xv, G, w.to(at::kDouble), b.to(at::kDouble), eps),
                  tol_for(dtype), "output");
    }
  }
  SECTION("_group_norm_mean_forward: (output, mean, rstd, channel_mean)") {
    for (auto dtype : dtypes) {
      INFO(dtype_name(dtype));
      const at::Tensor x = x64.to(dtype), w = w64.to(dtype), b = b64.to(dtype);
      const at::Tensor xv = x.to(at::kDouble);
      const auto stats = dtype == at::kDouble ? at::kDouble : at::kFloat;
      const Tol tol = dtype == at::kDouble ? tol_for(at::kDouble) : tol_for(at::kFloat);
      auto [out, mean, rstd, channel_mean] =
          fused_ops::api::_group_norm_mean_forward(x, G, w, b, eps);
      REQUIRE(out.sizes().vec() == (Sizes{N}));
      REQUIRE(mean.sizes().vec() == (Sizes{N, G}));
      REQUIRE(rstd.sizes().vec() == (Sizes{N, G}));
      REQUIRE(channel_mean.sizes().vec() == (Sizes{N, C}));
      CHECK(out.scalar_type() == dtype);
      CHECK(mean.scalar_type() == stats);
      CHECK(channel_mean.scalar_type() == stats);
      const at::Tensor grouped = xv.reshape({N, G, -1});
      check_close(mean, grouped.mean(-1), tol, "mean");
      check_close(rstd, (grouped.var(-1, /*unbiased=*/false) + eps).rsqrt(), tol, "rstd");
      check_close(channel_mean, xv.reshape({N, C, -1}).mean(-1), tol, "channel_mean");
      check_close(out, ref_group_norm_mean(xv, G, w.to(at::kDouble), b.to(at::kDouble), eps),
                  tol_for(dtype), "output");
    }
  }
}

TEST_CASE("NaN in the input propagates like the reference", "[norm][cpu]") {
  at::manual_seed(4);
  at::Tensor x64 = randn64({2, 4, 3, 5});
  x64.index_put_({1, 3, 2, 4}, std::numeric_limits<double>::quiet_NaN());
  const at::Tensor w64 = random_gn_weight(4), b64 = random_gn_bias(4);
  for (NormOp op : kOps) {
    INFO(norm_op_name(op));
    const at::Tensor out =
        fused_norm(op, x64.to(at::kFloat), 2, w64.to(at::kFloat), b64.to(at::kFloat), 1e-5);
    const at::Tensor ref = ref_norm(op, x64, 2, w64, b64, 1e-5);
    const at::Tensor nan_out = at::isnan(out), nan_ref = at::isnan(ref);
    REQUIRE(nan_ref.any().item<bool>());
    CHECK(at::equal(nan_out, nan_ref));
    const at::Tensor finite = at::logical_not(nan_ref);
    check_close(out.masked_select(finite), ref.masked_select(finite), tol_for(at::kFloat),
                "finite part of the output");
  }
}

TEST_CASE("empty batch (N = 0): empty output, backward works", "[norm][cpu]") {
  const int64_t C = 6;
  const auto dtypes = {at::kFloat, at::kDouble};
  SECTION("relu_group_norm returns (0, C, 3, 5)") {
    for (auto dtype : dtypes) {
      INFO(dtype_name(dtype));
      const at::Tensor x = leaf(at::empty({0, C, 3, 5}, f64()), dtype, kCPU);
      const at::Tensor w = leaf(random_gn_weight(C), dtype, kCPU);
      const at::Tensor b = leaf(random_gn_bias(C), dtype, kCPU);
      const at::Tensor out = fused_ops::api::relu_group_norm(x, 3, w, b, 1e-5);
      REQUIRE(out.sizes().vec() == (Sizes{0, C, 3, 5}));
      CHECK(out.scalar_type() == dtype);
      const auto g = grads_of(out, at::empty({0, C, 3, 5}, x.options()), {x, w, b});
      CHECK(g[0].sizes().vec() == (Sizes{0, C, 3, 5}));
      REQUIRE(g[1].sizes().vec() == (Sizes{C}));
      REQUIRE(g[2].sizes().vec() == (Sizes{C}));
      CHECK(at::equal(g[1], at::zeros({C}, w.options())));
      CHECK(at::equal(g[2], at::zeros({C}, b.options())));
    }
  }
  SECTION("group_norm_mean returns (0,)") {
    for (auto dtype : dtypes) {
      INFO(dtype_name(dtype));
      const at::Tensor x = leaf(at::empty({0, C, 3, 5}, f64()), dtype, kCPU);
      const at::Tensor w = leaf(random_gn_weight(C), dtype, kCPU);
      const at::Tensor b = leaf(random_gn_bias(C), dtype, kCPU);
      const at::Tensor out = fused_ops::api::group_norm_mean(x, 3, w, b, 1e-5);
      REQUIRE(out.sizes().vec() == (Sizes{0}));
      CHECK(out.scalar_type() == dtype);
      const auto g = grads_of(out, at::empty({0}, x.options()), {x, w, b});
      CHECK(g[0].sizes().vec() == (Sizes{0, C, 3, 5}));
      REQUIRE(g[1].sizes().vec() == (Sizes{C}));
      REQUIRE(g[2].sizes().vec() == (Sizes{C}));
      CHECK(at::equal(g[1], at::zeros({C}, w.options())));
      CHECK(at::equal(g[2], at::zeros({C}, b.options())));
    }
  }
  SECTION("no affine, no grad") {
    const at::Tensor x = at::empty({0, C, 3, 5});
    CHECK(fused_ops::api::relu_group_norm(x, 2).sizes().vec() == (Sizes{0, C, 3, 5}));
    CHECK(fused_ops::api::group_norm_mean(x, 2).sizes().vec() == (Sizes{0}));
  }
}
