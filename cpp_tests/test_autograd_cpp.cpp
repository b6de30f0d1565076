// The operators' C++ autograd kernels in a pure libtorch process (no Python): training steps
// through the operators with torch::optim::SGD, gradients for every combination of inputs
// requiring grad and of absent optional tensors, grad mode / inference mode, retain_graph.
#include "test_utils.h"

#include <c10/core/InferenceMode.h>
#include <torch/optim/sgd.h>

#include <fstream>
#include <functional>

using namespace fused_ops_test;

namespace {

const at::Device kCPU(at::kCPU);

// Runs `steps` SGD steps of the mean squared error between forward() and target; returns
// the loss before each step. Checks that every parameter gets a finite, non-zero gradient.
std::vector<double> train(const std::function<at::Tensor()>& forward,
                          std::vector<at::Tensor> params, const at::Tensor& target, int steps,
                          double lr) {
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(lr));
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    sgd.zero_grad();
    const at::Tensor loss = (forward() - target).pow(2).mean();
    loss.backward();
    for (size_t i = 0; i < params.size(); ++i) {
      INFO("parameter " << i << ", step " << step);
      REQUIRE(params[i].grad().defined());
      CHECK(at::isfinite(params[i].grad()).all().item<bool>());
      CHECK(params[i].grad().abs().max().item<double>() > 0.0);
    }
    sgd.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

void check_decreasing(const std::vector<double>& losses) {
  INFO("losses: " << c10::ArrayRef<double>(losses));
  REQUIRE(losses.size() >= 2);
  for (size_t i = 1; i < losses.size(); ++i) {
    CHECK(losses[i] < losses[i - 1]);
  }
  CHECK(losses.back() < 0.95 * losses.front());
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> r;
  for (const auto& t : ts) r.push_back(t.detach().clone());
  return r;
}

void check_all_changed(const std::vector<at::Tensor>& before,
                       const std::vector<at::Tensor>& after) {
  for (size_t i = 0; i < before.size(); ++i) {
    INFO("parameter " << i);
    CHECK_FALSE(at::equal(before[i], after[i].detach()));
  }
}

}  // namespace

TEST_CASE("this test process runs without Python", "[autograd]") {
#ifdef __linux__
  std::ifstream maps("/proc/self/maps");
  REQUIRE(maps.good());
  std::string line;
  bool fused = false;
  while (std::getline(maps, line)) {
    CHECK(line.find("libtorch_python") == std::string::npos);
    CHECK(line.find("libpython") == std::string::npos);
    fused = fused || line.find("libfused_ops") != std::string::npos;
  }
  CHECK(fused);
#else
  SUCCEED("only checked on Linux");
#endif
}

TEST_CASE("C++ training steps (torch::optim::SGD) through the fused operators reduce the loss",
          "[autograd][training]") {
  at::manual_seed(20);
  SECTION("conv_transpose3d_relu_group_norm: conv weight, conv bias, GN weight, GN bias") {
    const ConvCase c = conv_transpose_cases()[1];  // stride 2, padding, output_padding
    const ConvParams p = random_conv_params(c, true);
    const ConvParams teacher = random_conv_params(c, true);
    const at::Tensor x = p.input.to(at::kFloat);
    const at::Tensor target = fused_conv_transpose3d_relu_group_norm(
        c, x, teacher.weight.to(at::kFloat), teacher.conv_bias->to(at::kFloat),
        teacher.gn_weight->to(at::kFloat), teacher.gn_bias->to(at::kFloat));
    const std::vector<at::Tensor> params{
        leaf(p.weight, at::kFloat, kCPU), leaf(*p.conv_bias, at::kFloat, kCPU),
        leaf(*p.gn_weight, at::kFloat, kCPU), leaf(*p.gn_bias, at::kFloat, kCPU)};
    const auto before = clones(params);
    const auto losses = train(
        [&] {
          return fused_conv_transpose3d_relu_group_norm(c, x, params[0], params[1], params[2],
                                                        params[3]);
        },
        params, target, 6, 0.2);
    check_decreasing(losses);
    check_all_changed(before, params);
  }
  SECTION("conv3d_group_norm_mean: conv weight, conv bias, GN weight, GN bias") {
    const ConvCase c = conv3d_cases()[0];
    const ConvParams p = random_conv_params(c, false, 0.5);
    const at::Tensor x = p.input.to(at::kFloat);
    const at::Tensor target = at::randn({c.input[0]});
    const std::vector<at::Tensor> params{
        leaf(p.weight, at::kFloat, kCPU), leaf(*p.conv_bias, at::kFloat, kCPU),
        leaf(*p.gn_weight, at::kFloat, kCPU), leaf(*p.gn_bias, at::kFloat, kCPU)};
    const auto before = clones(params);
    const auto losses = train(
        [&] {
          return fused_conv3d_group_norm_mean(c, x, params[0], params[1], params[2], params[3]);
        },
        params, target, 6, 0.2);
    check_decreasing(losses);
    check_all_changed(before, params);
  }
  SECTION("relu_group_norm and group_norm_mean: GN weight and bias") {
    for (NormOp op : {NormOp::ReluGroupNorm, NormOp::GroupNormMean}) {
      INFO(norm_op_name(op));
      const at::Tensor x = at::randn({3, 6, 5, 4});
      const at::Tensor target = fused_norm(op, x, 3, at::randn({6}), at::randn({6}), 1e-5).detach();
      const std::vector<at::Tensor> params{leaf(random_gn_weight(6), at::kFloat, kCPU),
                                           leaf(random_gn_bias(6), at::kFloat, kCPU)};
      const auto losses = train([&] { return fused_norm(op, x, 3, params[0], params[1], 1e-5); },
                                params, target, 6, 0.2);
      check_decreasing(losses);
    }
  }
}

TEST_CASE("gradients for every subset of inputs requiring grad and of absent optionals",
          "[autograd]") {
  at::manual_seed(21);
  // For each presence pattern of the optional tensors and each requires_grad pattern of the
  // present ones: the output requires grad iff some input does, and the gradients (through
  // torch::autograd::grad and through backward() into .grad()) match the float64 reference.
  SECTION("relu_group_norm and group_norm_mean (input, weight?, bias?)") {
    const NormCase c{{2, 6, 3, 5}, 3};
    for (NormOp op : {NormOp::ReluGroupNorm, NormOp::GroupNormMean})
      for (int present = 0; present < 4; ++present)
        for (int req = 0; req < 8; ++req) {
          const bool has_w = present & 1, has_b = present & 2;
          if ((!has_w && (req & 2)) || (!has_b && (req & 4))) continue;
          INFO(norm_op_name(op) << ", weight " << has_w << ", bias " << has_b
                                << ", requires_grad mask " << req);
          const at::Tensor x64 = randn64(c.shape);
          const at::Tensor w64 = random_gn_weight(6), b64 = random_gn_bias(6);
          const at::Tensor x = leaf(x64, at::kDouble, kCPU, req & 1);
          const OptTensor w =
              has_w ? leaf(OptTensor(w64), at::kDouble, kCPU, req & 2) : c10::nullopt;
          const OptTensor b =
              has_b ? leaf(OptTensor(b64), at::kDouble, kCPU, req & 4) : c10::nullopt;
          const at::Tensor out = fused_norm(op, x, 3, w, b, 1e-5);
          REQUIRE(out.requires_grad() == (req != 0));
          if (req == 0) continue;
          const at::Tensor xr = leaf64(x64);
          const OptTensor wr = has_w ? leaf64(OptTensor(w64)) : c10::nullopt;
          const OptTensor br = has_b ? leaf64(OptTensor(b64)) : c10::nullopt;
          const at::Tensor ref = ref_norm(op, xr, 3, wr, br, 1e-5);
          check_close(out, ref, tol_for(at::kDouble), "output");
          std::vector<at::Tensor> wrt, wrt_ref;
          std::vector<std::string> names;
          if (req & 1) {
            wrt.push_back(x);
            wrt_ref.push_back(xr);
            names.push_back("grad input");
          }
          if (req & 2) {
            wrt.push_back(*w);
            wrt_ref.push_back(*wr);
            names.push_back("grad weight");
          }
          if (req & 4) {
            wrt.push_back(*b);
            wrt_ref.push_back(*br);
            names.push_back("grad bias");
          }
          const at::Tensor go = randn64(out.sizes().vec());
          const auto g = torch::autograd::grad({out}, wrt, {go}, /*retain_graph=*/true);
          const auto gr = grads_of(ref, go, wrt_ref);
          for (size_t i = 0; i < g.size(); ++i)
            check_close(g[i], gr[i], tol_for(at::kDouble), names[i]);
          out.backward(go);
          for (size_t i = 0; i < wrt.size(); ++i) {
            REQUIRE(wrt[i].grad().defined());
            check_close(wrt[i].grad(), gr[i], tol_for(at::kDouble), names[i] + " via backward()");
          }
          if (!(req & 1)) CHECK_FALSE(x.grad().defined());
        }
  }
  SECTION("conv operators (input, weight, conv_bias?, gn_weight?, gn_bias?)") {
    for (bool transposed : {true, false})
      for (int present = 0; present < 8; ++present)
        for (int req = 0; req < 32; ++req) {
          ConvCase c = transposed ? conv_transpose_cases()[2] : conv3d_cases()[2];
          c.conv_bias = present & 1;
          c.gn_weight = present & 2;
          c.gn_bias = present & 4;
          if ((!c.conv_bias && (req & 4)) || (!c.gn_weight && (req & 8)) ||
              (!c.gn_bias && (req & 16)))
            continue;
          INFO((transposed ? "conv_transpose3d_relu_group_norm" : "conv3d_group_norm_mean")
               << ", present mask " << present << ", requires_grad mask " << req);
          const ConvParams p = random_conv_params(c, transposed);
          const at::Tensor x = leaf(p.input, at::kDouble, kCPU, req & 1);
          const at::Tensor w = leaf(p.weight, at::kDouble, kCPU, req & 2);
          const OptTensor cb = leaf(p.conv_bias, at::kDouble, kCPU, req & 4);
          const OptTensor gw = leaf(p.gn_weight, at::kDouble, kCPU, req & 8);
          const OptTensor gb = leaf(p.gn_bias, at::kDouble, kCPU, req & 16);
          const at::Tensor out = transposed
                                     ? fused_conv_transpose3d_relu_group_norm(c, x, w, cb, gw, gb)
                                     : fused_conv3d_group_norm_mean(c, x, w, cb, gw, gb);
          REQUIRE(out.requires_grad() == (req != 0));
          if (req == 0) continue;
          const at::Tensor xr = leaf64(p.input), wr = leaf64(p.weight);
          const OptTensor cbr = leaf64(p.conv_bias), gwr = leaf64(p.gn_weight),
                          gbr = leaf64(p.gn_bias);
          const at::Tensor ref =
              transposed ? ref_conv_transpose3d_relu_group_norm(c, xr, wr, cbr, gwr, gbr)
                         : ref_conv3d_group_norm_mean(c, xr, wr, cbr, gwr, gbr);
          const std::vector<at::Tensor> all{x, w, cb.value_or(at::Tensor()),
                                            gw.value_or(at::Tensor()), gb.value_or(at::Tensor())};
          const std::vector<at::Tensor> all_ref{xr, wr, cbr.value_or(at::Tensor()),
                                                gwr.value_or(at::Tensor()),
                                                gbr.value_or(at::Tensor())};
          const char* kNames[] = {"grad input", "grad conv weight", "grad conv_bias",
                                  "grad gn_weight", "grad gn_bias"};
          std::vector<at::Tensor> wrt, wrt_ref;
          std::vector<std::string> names;
          for (int i = 0; i < 5; ++i) {
            if (req & (1 << i)) {
              wrt.push_back(all[i]);
              wrt_ref.push_back(all_ref[i]);
              names.push_back(kNames[i]);
            }
          }
          const at::Tensor go = randn64(out.sizes().vec());
          const auto g = torch::autograd::grad({out}, wrt, {go}, /*retain_graph=*/true);
          const auto gr = grads_of(ref, go, wrt_ref);
          for (size_t i = 0; i < g.size(); ++i)
            check_close(g[i], gr[i], tol_for(at::kDouble), names[i]);
          out.backward(go);
          for (int i = 0; i < 5; ++i) {
            if (!all[i].defined()) continue;
            INFO(kNames[i]);
            CHECK(all[i].grad().defined() == bool(req & (1 << i)));
          }
        }
  }
}

TEST_CASE("grad mode, inference mode and retain_graph", "[autograd]") {
  at::manual_seed(22);
  const ConvCase c = conv_transpose_cases()[0];
  const ConvParams p = random_conv_params(c, true);
  const at::Tensor x = leaf(p.input, at::kFloat, kCPU), w = leaf(p.weight, at::kFloat, kCPU);
  const at::Tensor gw = leaf(*p.gn_weight, at::kFloat, kCPU),
                   gb = leaf(*p.gn_bias, at::kFloat, kCPU);
  const at::Tensor with_grad =
      fused_conv_transpose3d_relu_group_norm(c, x, w, c10::nullopt, gw, gb);
  REQUIRE(with_grad.requires_grad());
  SECTION("NoGradGuard: no graph, same values") {
    at::NoGradGuard no_grad;
    const at::Tensor y = fused_conv_transpose3d_relu_group_norm(c, x, w, c10::nullopt, gw, gb);
    CHECK_FALSE(y.requires_grad());
    CHECK_FALSE(y.grad_fn());
    CHECK(at::equal(y, with_grad.detach()));
    const at::Tensor m = fused_ops::api::group_norm_mean(with_grad, 2, gw, gb);
    CHECK_FALSE(m.requires_grad());
  }
  SECTION("InferenceMode: inference tensors, same values") {
    c10::InferenceMode guard;
    const at::Tensor y = fused_conv_transpose3d_relu_group_norm(c, x, w, c10::nullopt, gw, gb);
    CHECK(y.is_inference());
    CHECK_FALSE(y.requires_grad());
    CHECK(at::equal(y, with_grad.detach()));
  }
  SECTION("backward twice with retain_graph accumulates twice the gradient") {
    const at::Tensor go = at::randn(with_grad.sizes());
    with_grad.backward(go, /*retain_graph=*/true);
    const at::Tensor once = gb.grad().clone();
    const at::Tensor once_w = w.grad().clone();
    with_grad.backward(go);
    check_close(gb.grad(), 2 * once.to(at::kDouble), tol_for(at::kFloat), "grad gn_bias");
    check_close(w.grad(), 2 * once_w.to(at::kDouble), tol_for(at::kFloat), "grad conv weight");
  }
}
