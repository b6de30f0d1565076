// fused::conv_transpose3d_relu_group_norm and fused::conv3d_group_norm_mean on the CPU:
// forward and backward (input, conv weight, conv bias, GN weight, GN bias) against float64
// ATen references (at::conv_transpose3d / at::conv3d, at::relu, at::group_norm, .mean).
// Also: non-contiguous parameters and broadcast grad_outputs for every operator.
#include "conv/conv_kernels.h"
#include "test_utils.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

using namespace fused_ops_test;

namespace {
const at::Device kCPU(at::kCPU);
}  // namespace

TEST_CASE("conv_transpose3d_relu_group_norm matches the float64 ATen reference on the CPU",
          "[conv][cpu]") {
  at::manual_seed(10);
  SECTION("float64, tolerance 1e-10") {
    for (const auto& c : conv_transpose_cases())
      check_conv_case(true, c, at::kDouble, kCPU, Layout::Contiguous, tol_for(at::kDouble));
  }
  SECTION("float32, tolerance 1e-5") {
    for (const auto& c : conv_transpose_cases())
      check_conv_case(true, c, at::kFloat, kCPU, Layout::Contiguous, tol_for(at::kFloat));
  }
  SECTION("channels_last (ChannelsLast3d) and non-contiguous inputs") {
    for (Layout layout : {Layout::ChannelsLast, Layout::NonContiguous})
      for (const auto& c : conv_transpose_cases())
        check_conv_case(true, c, at::kFloat, kCPU, layout, tol_for(at::kFloat));
  }
  SECTION("float16 and bfloat16, loose tolerance") {
    const auto cases = conv_transpose_cases();
    for (auto dtype : {at::kHalf, at::kBFloat16})
      for (size_t i : {0, 1})
        check_conv_case(true, cases[i], dtype, kCPU, Layout::Contiguous, tol_for(dtype));
  }
}

TEST_CASE("conv3d_group_norm_mean matches the float64 ATen reference on the CPU", "[conv][cpu]") {
  at::manual_seed(11);
  SECTION("float64, tolerance 1e-10") {
    for (const auto& c : conv3d_cases())
      check_conv_case(false, c, at::kDouble, kCPU, Layout::Contiguous, tol_for(at::kDouble));
  }
  SECTION("float32, tolerance 1e-5") {
    for (const auto& c : conv3d_cases())
      check_conv_case(false, c, at::kFloat, kCPU, Layout::Contiguous, tol_for(at::kFloat));
  }
  SECTION("channels_last (ChannelsLast3d) and non-contiguous inputs") {
    for (Layout layout : {Layout::ChannelsLast, Layout::NonContiguous})
      for (const auto& c : conv3d_cases())
        check_conv_case(false, c, at::kFloat, kCPU, layout, tol_for(at::kFloat));
  }
  SECTION("float16 and bfloat16, loose tolerance") {
    const auto cases = conv3d_cases();
    for (auto dtype : {at::kHalf, at::kBFloat16})
      for (size_t i : {0, 1})
        check_conv_case(false, cases[i], dtype, kCPU, Layout::Contiguous, tol_for(dtype));
  }
  SECTION("input with a mean offset (rand-like, what users pass)") {
    for (const auto& c : conv3d_cases())
      check_conv_case(false, c, at::kFloat, kCPU, Layout::Contiguous, tol_for(at::kFloat), 2.0);
  }
}

TEST_CASE("conv operators: the default GroupNorm init would hide a broken kernel", "[conv][cpu]") {
  // Sanity check of the test method itself: with weight = 1, bias = 0 the reference
  // conv3d_group_norm_mean output is 0 for any input, whereas with the randomised affine
  // parameters the tests use, it depends on the input.
  at::manual_seed(12);
  const ConvCase c = conv3d_cases()[0];
  const ConvParams p = random_conv_params(c, false);
  const at::Tensor ones = at::ones({c.c_out}, f64()), zeros = at::zeros({c.c_out}, f64());
  const at::Tensor default_init =
      ref_conv3d_group_norm_mean(c, p.input, p.weight, p.conv_bias, ones, zeros);
  CHECK(default_init.abs().max().item<double>() < 1e-12);
  const at::Tensor randomised =
      ref_conv3d_group_norm_mean(c, p.input, p.weight, p.conv_bias, p.gn_weight, p.gn_bias);
  const at::Tensor other_input = ref_conv3d_group_norm_mean(c, randn64(c.input), p.weight,
                                                            p.conv_bias, p.gn_weight, p.gn_bias);
  CHECK((randomised - other_input).abs().max().item<double>() > 1e-3);
  // And the fused operator follows the input too (a kernel that skipped the convolution
  // would not).
  const at::Tensor fused =
      fused_conv3d_group_norm_mean(c, p.input, p.weight, p.conv_bias, p.gn_weight, p.gn_bias);
  check_close(fused, randomised, tol_for(at::kDouble), "output");
}

TEST_CASE("conv operators: empty batch (N = 0) gives an empty result and backward works",
          "[conv][cpu]") {
  at::manual_seed(13);
  SECTION("conv_transpose3d_relu_group_norm") {
    ConvCase c = conv_transpose_cases()[1];  // stride 2, padding 1, output_padding 1
    c.input[0] = 0;
    const ConvParams p = random_conv_params(c, true);
    const at::Tensor x = leaf(p.input, at::kFloat, kCPU), w = leaf(p.weight, at::kFloat, kCPU);
    const OptTensor cb = leaf(p.conv_bias, at::kFloat, kCPU);
    const OptTensor gw = leaf(p.gn_weight, at::kFloat, kCPU);
    const OptTensor gb = leaf(p.gn_bias, at::kFloat, kCPU);
    const at::Tensor out = fused_conv_transpose3d_relu_group_norm(c, x, w, cb, gw, gb);
    REQUIRE(out.sizes().vec() == (Sizes{0, 6, 6, 8, 6}));
    const auto g = grads_of(out, at::zeros(out.sizes(), out.options()), {x, w, *cb, *gw, *gb});
    CHECK(g[0].sizes().vec() == x.sizes().vec());
    CHECK(at::equal(g[1], at::zeros_like(w)));
    CHECK(at::equal(g[2], at::zeros_like(*cb)));
    CHECK(at::equal(g[3], at::zeros_like(*gw)));
    CHECK(at::equal(g[4], at::zeros_like(*gb)));
  }
  SECTION("conv3d_group_norm_mean") {
    ConvCase c = conv3d_cases()[1];
    c.input[0] = 0;
    c.conv_bias = true;
    const ConvParams p = random_conv_params(c, false);
    const at::Tensor x = leaf(p.input, at::kFloat, kCPU), w = leaf(p.weight, at::kFloat, kCPU);
    const OptTensor cb = leaf(p.conv_bias, at::kFloat, kCPU);
    const OptTensor gw = leaf(p.gn_weight, at::kFloat, kCPU);
    const OptTensor gb = leaf(p.gn_bias, at::kFloat, kCPU);
    const at::Tensor out = fused_conv3d_group_norm_mean(c, x, w, cb, gw, gb);
    REQUIRE(out.sizes().vec() == (Sizes{0}));
    const auto g = grads_of(out, at::zeros({0}, out.options()), {x, w, *cb, *gw, *gb});
    CHECK(g[0].sizes().vec() == x.sizes().vec());
    CHECK(at::equal(g[1], at::zeros_like(w)));
    CHECK(at::equal(g[2], at::zeros_like(*cb)));
    CHECK(at::equal(g[3], at::zeros_like(*gw)));
    CHECK(at::equal(g[4], at::zeros_like(*gb)));
  }
}

TEST_CASE("non-contiguous parameters and a broadcast grad_output", "[norm][conv][cpu]") {
  at::manual_seed(41);
  const Tol tol = tol_for(at::kDouble);
  // Every other element of a longer vector: stride 2.
  auto strided = [](const at::Tensor& t) {
    at::Tensor big = at::zeros({t.numel() * 2}, t.options());
    at::Tensor v = big.slice(0, 0, t.numel() * 2, 2);
    v.copy_(t);
    return v.detach().requires_grad_();
  };
  SECTION("relu_group_norm / group_norm_mean with strided weight and bias") {
    for (NormOp op : {NormOp::ReluGroupNorm, NormOp::GroupNormMean}) {
      INFO(norm_op_name(op));
      const at::Tensor x = randn64({3, 6, 4, 5}).requires_grad_();
      const at::Tensor w = strided(random_gn_weight(6)), b = strided(random_gn_bias(6));
      REQUIRE_FALSE(w.is_contiguous());
      const at::Tensor out = fused_norm(op, x, 3, w, b, 1e-5);
      const at::Tensor xr = leaf64(x), wr = leaf64(w), br = leaf64(b);
      const at::Tensor ref = ref_norm(op, xr, 3, wr, br, 1e-5);
      check_close(out, ref, tol, "output");
      // group_norm_mean: a stride-0 (expanded) grad_output; relu_group_norm: expanded too.
      const at::Tensor go = op == NormOp::GroupNormMean
                                ? at::randn({1}, f64()).expand({3})
                                : at::randn({1, 6, 1, 5}, f64()).expand({3, 6, 4, 5});
      const auto g = grads_of(out, go, {x, w, b});
      const auto gr = grads_of(ref, go.contiguous(), {xr, wr, br});
      check_close(g[0], gr[0], tol, "grad input");
      check_close(g[1], gr[1], tol, "grad weight");
      check_close(g[2], gr[2], tol, "grad bias");
    }
  }
  SECTION("conv operators with permuted (non-contiguous) conv weights") {
    for (bool transposed : {true, false}) {
      INFO((transposed ? "conv_transpose3d_relu_group_norm" : "conv3d_group_norm_mean"));
      const ConvCase c = transposed ? conv_transpose_cases()[0] : conv3d_cases()[0];
      const ConvParams p = random_conv_params(c, transposed);
      const at::Tensor x = leaf64(p.input);
      // The same values, stored with the kernel's last two dims swapped.
      const at::Tensor w =
          p.weight.transpose(3, 4).contiguous().transpose(3, 4).detach().requires_grad_();
      REQUIRE_FALSE(w.is_contiguous());
      const OptTensor gw = strided(*p.gn_weight), gb = strided(*p.gn_bias);
      const OptTensor cb = c.conv_bias ? OptTensor(strided(*p.conv_bias)) : c10::nullopt;
      const at::Tensor out = transposed
                                 ? fused_conv_transpose3d_relu_group_norm(c, x, w, cb, gw, gb)
                                 : fused_conv3d_group_norm_mean(c, x, w, cb, gw, gb);
      const at::Tensor xr = leaf64(x), wr = leaf64(w);
      const OptTensor cbr = leaf64(cb), gwr = leaf64(gw), gbr = leaf64(gb);
      const at::Tensor ref = transposed
                                 ? ref_conv_transpose3d_relu_group_norm(c, xr, wr, cbr, gwr, gbr)
                                 : ref_conv3d_group_norm_mean(c, xr, wr, cbr, gwr, gbr);
      check_close(out, ref, tol, "output");
      const at::Tensor go = randn64(ref.sizes().vec());
      const auto g = grads_of(out, go, grad_inputs({x, w}, {cb, gw, gb}));
      const auto gr = grads_of(ref, go, grad_inputs({xr, wr}, {cbr, gwr, gbr}));
      REQUIRE(g.size() == gr.size());
      for (size_t i = 0; i < g.size(); ++i)
        check_close(g[i], gr[i], tol, "grad " + std::to_string(i));
    }
  }
}

TEST_CASE("debug queries name the kernels a call runs (CPU: ATen's convolutions)", "[conv][cpu]") {
  at::manual_seed(43);
  const ConvCase ct = conv_transpose_cases()[0];
  const ConvParams pt = random_conv_params(ct, true);
  // float64 (these parameters) and float32 as eager's (conv_stage.cpp: the CPU's forward rewrite
  // of a float32 transposed convolution was less accurate).
  CHECK(fused_ops::api::conv_transpose3d_relu_group_norm_path(
            pt.input, pt.weight, pt.conv_bias, ct.stride, ct.padding, ct.output_padding, ct.groups,
            ct.dilation, ct.num_groups, pt.gn_weight, pt.gn_bias,
            ct.eps) == "aten -> relu_group_norm");
  CHECK(fused_ops::api::conv_transpose3d_relu_group_norm_path(
            pt.input.to(at::kFloat), pt.weight.to(at::kFloat), c10::nullopt, ct.stride, ct.padding,
            ct.output_padding, ct.groups, ct.dilation, ct.num_groups, c10::nullopt, c10::nullopt,
            ct.eps) == "aten -> relu_group_norm");
  CHECK(fused_ops::api::conv_transpose3d_relu_group_norm_backward_path(
            pt.input, pt.weight, pt.conv_bias, ct.stride, ct.padding, ct.output_padding, ct.groups,
            ct.dilation, ct.num_groups, pt.gn_weight, pt.gn_bias,
            ct.eps) == "dy -> input_grad=aten, weight_grad=aten");
  // Its arguments are checked as the operator's.
  REQUIRE_C10_ERROR(fused_ops::api::conv_transpose3d_relu_group_norm_backward_path(
                        pt.input, pt.weight, pt.conv_bias, ct.stride, ct.padding, ct.output_padding,
                        ct.groups, ct.dilation, /*num_groups=*/0, pt.gn_weight, pt.gn_bias, ct.eps),
                    FUSED_CONTAINS("expected num_groups > 0"));
  const ConvCase c3 = conv3d_cases()[0];
  const ConvParams p3 = random_conv_params(c3, false);
  CHECK(fused_ops::api::conv3d_group_norm_mean_path(
            p3.input, p3.weight, p3.conv_bias, c3.stride, c3.padding, c3.dilation, c3.groups,
            c3.num_groups, p3.gn_weight, p3.gn_bias, c3.eps) == "aten -> group_norm_mean");
  const at::Tensor x = randn64({2, 6, 3, 4});
  CHECK(fused_ops::api::relu_group_norm_path(x, 3) == "relu_group_norm");
  CHECK(fused_ops::api::group_norm_mean_path(x, 3) == "group_norm_mean");
  // The query checks the arguments as the operator does.
  REQUIRE_C10_ERROR(fused_ops::api::group_norm_mean_path(x, 4),
                    FUSED_CONTAINS("divisible by num_groups"));
}

// The one-pass plans are plain host logic: what they decide holds on any machine.
TEST_CASE("one-pass conv3d_group_norm_mean plans at the headline", "[conv][cpu][onepass]") {
  using fused_ops::ScalarKind;
  namespace conv = fused_ops::conv;
  // x (128, 3, 24, 32, 32), Conv3d 3 -> 24, k = 3, stride 1, no padding.
  conv::Conv3dShape s{};
  s.N = 128, s.C_in = 3, s.D = 24, s.H = 32, s.W = 32;
  s.C_out = 24, s.kD = 3, s.kH = 3, s.kW = 3;
  s.Do = 22, s.Ho = 30, s.Wo = 30;
  for (int i = 0; i < 3; ++i) {
    s.stride[i] = 1, s.padding[i] = 0, s.dilation[i] = 1;
  }
  s.groups = 1;
  constexpr size_t kTwoBlocks = 112 * 1024;  // what two blocks per H100 SM may take
  for (const ScalarKind dtype :
       {ScalarKind::kFloat, ScalarKind::kDouble, ScalarKind::kHalf, ScalarKind::kBFloat16}) {
    for (const bool device_tensor_cores : {true, false}) {
      INFO("dtype " << static_cast<int>(dtype) << ", tensor cores " << device_tensor_cores);
      const conv::OnePassPlan forward =
          conv::plan_conv3d_group_norm_mean_onepass(s, dtype, kTwoBlocks, device_tensor_cores);
      REQUIRE(forward.supported);
      CHECK(forward.tensor_cores == (dtype == ScalarKind::kFloat && device_tensor_cores));
      CHECK(forward.smem_bytes <= kTwoBlocks);
    }
    const conv::OnePassBackwardPlan backward =
        conv::plan_conv3d_group_norm_mean_onepass_backward(s, dtype, kTwoBlocks);
    REQUIRE(backward.supported);
    CHECK(backward.smem_bytes <= kTwoBlocks);
    CHECK(backward.tiles == s.N * backward.boxes);
    // Every input position lies in exactly one box.
    CHECK(backward.boxes_d * backward.BD >= s.D);
    CHECK((backward.boxes_d - 1) * backward.BD < s.D);
  }
  // python_tests/test_conv3d_onepass.py's dilated, padded problem: x (2, 8, 32, 32, 32),
  // 8 -> 16, k = 3, dilation 3, padding 3. Its backward boxes are thinner than the dilation
  // along some dim, where the outputs a box owns are not one contiguous run (what that test
  // checks the weight gradient of).
  conv::Conv3dShape dilated = s;
  dilated.N = 2, dilated.C_in = 8, dilated.C_out = 16;
  dilated.D = dilated.H = dilated.W = 32;
  dilated.Do = dilated.Ho = dilated.Wo = 32;  // 32 + 2 * 3 - 3 * 2
  for (int i = 0; i < 3; ++i) {
    dilated.padding[i] = 3, dilated.dilation[i] = 3;
  }
  const conv::OnePassBackwardPlan thin =
      conv::plan_conv3d_group_norm_mean_onepass_backward(dilated, ScalarKind::kFloat, kTwoBlocks);
  REQUIRE(thin.supported);
  CHECK(std::min({thin.BD, thin.BH, thin.BW}) < 3);
  // The tensor-core forward's boxes are whole input rows (loaded by 16-byte row copies).
  const conv::OnePassPlan headline =
      conv::plan_conv3d_group_norm_mean_onepass(s, ScalarKind::kFloat, kTwoBlocks, true);
  CHECK(conv::boxes_are_whole_input_rows(s, headline.FW, headline.boxes_w));
  CHECK(headline.FW == 32);
  // Its footprint is laid out with padded pitches (row 16-20, plane 16, channel 24 modulo the
  // 32 banks, multiples of 4 for the 16-byte row copies), in two buffers, and the regions of
  // its shared memory follow one another without overlap: weights, tap offsets, footprints,
  // reduction scratch, row table.
  CHECK(headline.row_pitch >= headline.FW);
  CHECK(headline.row_pitch % 32 >= 16);
  CHECK(headline.row_pitch % 32 <= 20);
  CHECK(headline.plane_pitch >= headline.FH * headline.row_pitch);
  CHECK(headline.plane_pitch % 32 == 16);
  CHECK(headline.channel_pitch >= headline.FD * headline.plane_pitch);
  CHECK(headline.channel_pitch % 32 == 24);
  CHECK(headline.row_pitch % 4 == 0);
  CHECK(headline.plane_pitch % 4 == 0);
  CHECK(headline.channel_pitch % 4 == 0);
  CHECK(headline.footprint == headline.c_in_g * headline.channel_pitch);
  CHECK(headline.footprint_buffers == 2);
  CHECK(headline.footprint_bytes == static_cast<size_t>(headline.footprint) * 4);
  CHECK(headline.koff_offset >= static_cast<size_t>(headline.k_pad * headline.cb * 2 * 4));
  // On wgmma, the weights' region holds the B tiles (per part, ceil(k_pad / 32) blocks of cb
  // rows of 128 bytes) from the first 1024-byte boundary past the region's start, wherever
  // the dynamic shared memory starts (16-byte aligned), before the taps' offsets: over plans
  // of every chunk width and reductions up to the tensor-core kernel's largest.
  const conv::OnePassPlan headline_wgmma =
      conv::plan_conv3d_group_norm_mean_onepass(s, ScalarKind::kFloat, kTwoBlocks, true, true);
  CHECK(headline_wgmma.smem_bytes <= kTwoBlocks);
  // Its tiles: 384 position slots on wgmma (3 m16 tiles a warp), 512 on mma.sync (4); at the
  // headline, boxes of 2 x 6 x 30 and 2 x 8 x 30 outputs, whole output rows.
  CHECK(headline_wgmma.capacity == conv::kOnePassWgmmaCapacity);
  CHECK(headline.capacity == conv::kOnePassTensorCoreCapacity);
  CHECK(headline_wgmma.TD * headline_wgmma.TH * headline_wgmma.TW <= headline_wgmma.capacity);
  CHECK(headline.TD * headline.TH * headline.TW <= headline.capacity);
  CHECK(headline_wgmma.TD == 2);
  CHECK(headline_wgmma.TH == 6);
  CHECK(headline_wgmma.TW == 30);
  CHECK(headline_wgmma.tiles == 128 * 11 * 5);
  CHECK(headline.TD == 2);
  CHECK(headline.TH == 8);
  CHECK(headline.TW == 30);
  for (const int64_t c_in : {1, 2, 3, 4}) {
    for (const int64_t k : {1, 2, 3, 4}) {
      for (const int64_t c_out : {8, 16, 24, 40}) {
        conv::Conv3dShape shape = s;
        shape.C_in = c_in, shape.C_out = c_out;
        shape.kD = shape.kH = shape.kW = k;
        shape.Do = s.D - k + 1, shape.Ho = s.H - k + 1, shape.Wo = s.W - k + 1;
        const conv::OnePassPlan plan = conv::plan_conv3d_group_norm_mean_onepass(
            shape, ScalarKind::kFloat, kTwoBlocks, true, /*wgmma=*/true);
        if (!plan.tensor_cores) {
          continue;  // (reductions past 128: the direct kernel)
        }
        INFO("c_in " << c_in << ", k " << k << ", c_out " << c_out);
        const size_t b_tiles = static_cast<size_t>((plan.k_pad + 31) / 32 * plan.cb) * 2 * 128;
        for (size_t base = 0; base < 1024; base += 16) {
          CHECK((base + 1023) / 1024 * 1024 + b_tiles <= base + plan.koff_offset);
        }
      }
    }
  }
  CHECK(headline.footprint_offset >= headline.koff_offset + headline.k_pad * 4);
  CHECK(headline.scratch_offset == headline.footprint_offset + 2 * headline.footprint_bytes);
  REQUIRE(headline.row_table_offset != 0);
  CHECK(headline.row_table_offset ==
        headline.scratch_offset +
            static_cast<size_t>(conv::kOnePassTensorCoreScratchBytesPerChannel * headline.cb +
                                conv::kOnePassTensorCoreScratchBytes));
  CHECK(headline.smem_bytes ==
        headline.row_table_offset +
            static_cast<size_t>(headline.c_in_g * headline.FD * headline.FH) * 16);
  CHECK(headline.smem_bytes <= kTwoBlocks);
  // The direct kernel's footprint stays dense, in one buffer, without a row table.
  const conv::OnePassPlan direct =
      conv::plan_conv3d_group_norm_mean_onepass(s, ScalarKind::kFloat, kTwoBlocks, false);
  CHECK(direct.row_pitch == direct.FW);
  CHECK(direct.plane_pitch == direct.FH * direct.FW);
  CHECK(direct.channel_pitch == direct.FD * direct.FH * direct.FW);
  CHECK(direct.footprint_buffers == 1);
  CHECK(direct.row_table_offset == 0);
}

TEST_CASE("one-pass footprint pitches", "[conv][cpu][onepass]") {
  namespace conv = fused_ops::conv;
  for (int64_t FW = 1; FW <= 70; ++FW) {
    for (const int64_t FH : {1, 3, 10, 17}) {
      for (const int64_t FD : {1, 3, 4}) {
        INFO("FD " << FD << ", FH " << FH << ", FW " << FW);
        const conv::FootprintPitches dense = conv::footprint_pitches(FD, FH, FW, false);
        CHECK(dense.row == FW);
        CHECK(dense.plane == FH * FW);
        CHECK(dense.channel == FD * FH * FW);
        const conv::FootprintPitches padded = conv::footprint_pitches(FD, FH, FW, true);
        // Room for every row, plane and channel; padding by less than one bank cycle (+ the
        // 4-alignment) at each level.
        CHECK(padded.row >= FW);
        CHECK(padded.row < FW + 32 + 4);
        CHECK(padded.plane >= FH * padded.row);
        CHECK(padded.plane < FH * padded.row + 32 + 4);
        CHECK(padded.channel >= FD * padded.plane);
        CHECK(padded.channel < FD * padded.plane + 32 + 4);
        CHECK(padded.row % 32 >= 16);
        CHECK(padded.row % 32 <= 20);
        CHECK(padded.plane % 32 == 16);
        CHECK(padded.channel % 32 == 24);
        if (FW % 4 == 0) {
          CHECK(padded.row % 4 == 0);
          CHECK(padded.plane % 4 == 0);
          CHECK(padded.channel % 4 == 0);
        }
      }
    }
  }
}

namespace {
// A stride-1 Conv3dShape (output sizes from the input's, padding and dilation).
fused_ops::conv::Conv3dShape stride1_shape(std::array<int64_t, 5> x, int64_t c_out,
                                           std::array<int64_t, 3> k, std::array<int64_t, 3> pad,
                                           std::array<int64_t, 3> dil, int64_t groups) {
  fused_ops::conv::Conv3dShape s{};
  s.N = x[0], s.C_in = x[1], s.D = x[2], s.H = x[3], s.W = x[4];
  s.C_out = c_out, s.kD = k[0], s.kH = k[1], s.kW = k[2];
  s.Do = x[2] + 2 * pad[0] - dil[0] * (k[0] - 1);
  s.Ho = x[3] + 2 * pad[1] - dil[1] * (k[1] - 1);
  s.Wo = x[4] + 2 * pad[2] - dil[2] * (k[2] - 1);
  for (int i = 0; i < 3; ++i) {
    s.stride[i] = 1, s.padding[i] = pad[i], s.dilation[i] = dil[i];
  }
  s.groups = groups;
  return s;
}

// A float32 problem's one-pass plans with tensor cores on an H100's opt-in shared memory per
// block: on wgmma and on mma.sync.
struct TensorCorePlans {
  fused_ops::conv::OnePassPlan wgmma, mma_sync;
};
TensorCorePlans tensor_core_plans(const fused_ops::conv::Conv3dShape& s) {
  constexpr size_t kH100 = 232448;
  using fused_ops::ScalarKind;
  return {fused_ops::conv::plan_conv3d_group_norm_mean_onepass(s, ScalarKind::kFloat, kH100, true,
                                                               /*wgmma=*/true),
          fused_ops::conv::plan_conv3d_group_norm_mean_onepass(s, ScalarKind::kFloat, kH100, true,
                                                               /*wgmma=*/false)};
}
}  // namespace

// lag_tap_range is the one definition of a position's tap range (the plan, the table kernel and
// the input-gradient kernel all use it): against the taps counted one by one.
TEST_CASE("lag input gradient: tap ranges match a brute-force count", "[conv][cpu][onepass]") {
  for (int64_t k = 1; k <= 3; ++k) {
    for (int64_t dil = 1; dil <= 3; ++dil) {
      for (int64_t pad = 0; pad <= 4; ++pad) {
        for (int64_t in = 1; in <= 12; ++in) {
          const int64_t out = in + 2 * pad - dil * (k - 1);
          if (out <= 0) {
            continue;
          }
          for (int64_t p = 0; p < in; ++p) {
            int64_t lo = -1, hi = -1;
            for (int64_t kk = 0; kk < k; ++kk) {
              const int64_t o = p + pad - kk * dil;
              if (o >= 0 && o < out) {
                lo = lo < 0 ? kk : lo;
                hi = kk;
              }
            }
            const fused_ops::conv::TapRange r = fused_ops::conv::lag_tap_range(p, out, k, pad, dil);
            // (the kernels' 32-bit instance)
            const fused_ops::conv::TapRange r32 = fused_ops::conv::lag_tap_range<int>(
                static_cast<int>(p), static_cast<int>(out), static_cast<int>(k),
                static_cast<int>(pad), static_cast<int>(dil));
            INFO("k " << k << " dil " << dil << " pad " << pad << " in " << in << " p " << p);
            CHECK(r32.lo == r.lo);
            CHECK(r32.hi == r.hi);
            if (lo < 0) {
              CHECK(r.lo > r.hi);
            } else {
              CHECK(r.lo == lo);
              CHECK(r.hi == hi);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("Gram weight gradient plans: the family, the classes and the pieces",
          "[conv][cpu][onepass]") {
  using fused_ops::ScalarKind;
  namespace conv = fused_ops::conv;
  constexpr size_t kSmem = 227 * 1024;  // an H100's opt-in shared memory per block
  constexpr int64_t kH100 = 132;        // its multiprocessors
  const auto plan_for = [&](const conv::Conv3dShape& s, ScalarKind dtype, int64_t multiprocessors,
                            size_t partial_bytes = conv::kGramPartialBytes) {
    return conv::plan_conv3d_group_norm_mean_gram_weight_grad(s, dtype, kSmem, multiprocessors,
                                                              partial_bytes);
  };
  const conv::Conv3dShape headline =
      stride1_shape({128, 3, 24, 32, 32}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1);
  CHECK_FALSE(plan_for(headline, ScalarKind::kDouble, kH100).supported);
  for (const ScalarKind dtype : {ScalarKind::kFloat, ScalarKind::kHalf, ScalarKind::kBFloat16}) {
    const conv::GramWeightGradPlan plan = plan_for(headline, dtype, kH100);
    REQUIRE(plan.supported);
    // Classes per dim: {0}, {1}, [2, 22 or 30), and the last two rows; box 0 holds the first
    // three, box 1 the middle three, box 2 the last three.
    REQUIRE(plan.classes[0] == 5);
    REQUIRE(plan.classes[1] == 5);
    const int32_t lo_d[] = {0, 1, 2, 22, 23}, hi_d[] = {1, 2, 22, 23, 24};
    const uint8_t mask[] = {0b001, 0b011, 0b111, 0b110, 0b100};
    for (int c = 0; c < 5; ++c) {
      CHECK(plan.class_lo[0][c] == lo_d[c]);
      CHECK(plan.class_hi[0][c] == hi_d[c]);
      CHECK(plan.box_mask[0][c] == mask[c]);
      CHECK(plan.box_mask[1][c] == mask[c]);
    }
    CHECK(plan.class_hi[1][2] == 30);
    // Every H-class but the middle one is an edge class.
    CHECK(plan.edge_classes == 4);
    // Bulk units: 6 chunks of 4 planes x 32 rows; their pieces the chunks' D-segments: planes
    // {0}, {1}, {2, 3} | 4 chunks inside class 2 | {20, 21}, {22}, {23}.
    CHECK(plan.bulk_planes == 4);
    CHECK(plan.bulk_rows == 32);
    CHECK(plan.bulk_d_chunks == 6);
    CHECK(plan.h_chunks == 1);
    CHECK(plan.bulk_pieces == 10);
    // Edge units: rows {0, 1} and {30, 31} (two groups of two edge classes, windows of 6 rows),
    // each over all 24 planes; a piece per D-class and edge class.
    CHECK(plan.edge_groups == 2);
    CHECK(plan.edge_group_begin[1] == 2);
    CHECK(plan.edge_planes == 24);
    CHECK(plan.edge_d_chunks == 1);
    CHECK(plan.pieces == 10 + 5 * 4);
    CHECK(plan.units_per_item == 6 + 2);
    CHECK(plan.warps == 13);  // the lags (dd, dw) with dd > 0, or dd = 0 and dw >= 0
    // Totals and 4 edge lanes per (a, b, dh) of each warp.
    CHECK(plan.value_stride == 48);  // 45 values, rounded up to 4
    CHECK(plan.piece_floats == 13 * 48 * 5);
    CHECK(plan.items_per_launch * plan.pieces * plan.piece_floats * 4 <=
          static_cast<int64_t>(conv::kGramPartialBytes));
    // As few rounds of the sums kernel's persistent grid (a block per multiprocessor), then as
    // few launches: 2 launches of 64 items, 512 units each, in 4 rounds of 132 blocks (8 in
    // all, the fewest: 1024 units). With the device's size unknown, as few launches, balanced:
    // the same here.
    CHECK(plan.items_per_launch == 64);
    CHECK(plan_for(headline, dtype, 0).items_per_launch == 64);
    // 16 MiB (44 items fit): 4 launches of 32 items, 2 rounds each, not the fewest launches,
    // 3 of 43 items (344 units: 3 rounds each); where the device's size is unknown, those.
    const size_t kSixteenMiB = size_t{16} << 20;
    CHECK(plan_for(headline, dtype, kH100, kSixteenMiB).items_per_launch == 32);
    CHECK(plan_for(headline, dtype, 0, kSixteenMiB).items_per_launch == 43);
    // Beside the lag kernels (their concurrent budget, 6 MiB): 16 items fit, 8 launches of 16.
    const conv::GramWeightGradPlan concurrent =
        plan_for(headline, dtype, kH100, conv::kGramConcurrentPartialBytes);
    REQUIRE(concurrent.supported);
    CHECK(concurrent.items_per_launch == 16);
    CHECK(concurrent.items_per_launch * concurrent.pieces * concurrent.piece_floats * 4 <=
          static_cast<int64_t>(conv::kGramConcurrentPartialBytes));
    // A bulk unit's window: 3 channels x (4 + 2) planes x (32 + 4) rows x (32 + 2 x 4) floats
    // (along D the lags reach above the piece only), two of them in 227 KB.
    CHECK(plan.whole_rows);
    CHECK(plan.smem_bytes == 3 * 6 * 36 * 40 * 4);
  }
  // python_tests/test_conv3d_onepass.py's GRAM_CASES in the family, and the lag cases
  // outside it (4 input channels per group, a padded W past 32).
  const conv::Conv3dShape inside[] = {
      stride1_shape({2, 3, 8, 9, 10}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 7, 9, 11}, 24, {3, 3, 3}, {2, 1, 3}, {1, 2, 2}, 1),
      stride1_shape({1, 4, 6, 7, 5}, 24, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 2),
      stride1_shape({2, 2, 4, 6, 9}, 16, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({40, 3, 6, 6, 6}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 2, 5, 6, 9}, 16, {3, 3, 3}, {1, 0, 2}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 6, 5, 32}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 2, 9, 8, 12}, 12, {3, 3, 3}, {1, 2, 0}, {2, 2, 3}, 1),
      stride1_shape({3, 3, 5, 6, 7}, 8, {2, 1, 3}, {1, 0, 1}, {1, 1, 1}, 1),
      stride1_shape({80, 3, 24, 32, 32}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({3, 1, 15, 10, 30}, 6, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 2, 6, 7, 9}, 8, {2, 2, 1}, {0, 1, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 4, 6, 12}, 6, {1, 3, 2}, {0, 1, 0}, {1, 1, 9}, 1),
      stride1_shape({2, 1, 4, 5, 32}, 4, {1, 2, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 40, 45, 20}, 12, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 6, 40, 10}, 6, {3, 3, 3}, {0, 0, 0}, {1, 8, 1}, 1),
  };
  for (const auto& s : inside) {
    const conv::GramWeightGradPlan plan = plan_for(s, ScalarKind::kFloat, kH100);
    INFO("x (" << s.N << ", " << s.C_in << ", " << s.D << ", " << s.H << ", " << s.W << ")");
    REQUIRE(plan.supported);
    // The classes cover each padded dim in order.
    for (int d = 0; d < 2; ++d) {
      CHECK(plan.class_lo[d][0] == 0);
      CHECK(plan.class_hi[d][plan.classes[d] - 1] == plan.E[d]);
      for (int c = 1; c < plan.classes[d]; ++c) {
        CHECK(plan.class_lo[d][c] == plan.class_hi[d][c - 1]);
      }
    }
    // The D-segments of each grid: the (chunk, class) pairs that meet, numbered in order of
    // chunk and class, as the sums kernel numbers them (segment_begin[c] + chunk - lo / planes).
    const auto check_segments = [&](int64_t planes, int64_t chunks, const int32_t* begin) {
      REQUIRE(planes > 0);
      CHECK(chunks == (plan.E[0] + planes - 1) / planes);
      int64_t expected = 0;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        for (int64_t c = 0; c < plan.classes[0]; ++c) {
          const int64_t lo = plan.class_lo[0][c], hi = plan.class_hi[0][c];
          if (lo < (chunk + 1) * planes && hi > chunk * planes) {
            CHECK(begin[c] + chunk - lo / planes == expected);
            ++expected;
          }
        }
      }
      CHECK(begin[plan.classes[0]] == expected);
    };
    check_segments(plan.bulk_planes, plan.bulk_d_chunks, plan.d_segment_begin);
    CHECK(plan.bulk_pieces == plan.d_segment_begin[plan.classes[0]] * plan.h_chunks);
    CHECK(plan.h_chunks * plan.bulk_rows >= plan.E[1]);
    if (plan.edge_classes > 0) {
      check_segments(plan.edge_planes, plan.edge_d_chunks, plan.edge_segment_begin);
      // The groups cover the edge classes in order.
      CHECK(plan.edge_group_begin[0] == 0);
      CHECK(plan.edge_group_begin[plan.edge_groups] == plan.edge_classes);
      for (int64_t g = 0; g < plan.edge_groups; ++g) {
        CHECK(plan.edge_group_begin[g] < plan.edge_group_begin[g + 1]);
      }
    }
    CHECK(plan.pieces ==
          plan.bulk_pieces + plan.edge_segment_begin[plan.classes[0]] * plan.edge_classes);
    CHECK(plan.units_per_item ==
          plan.bulk_d_chunks * plan.h_chunks + plan.edge_d_chunks * plan.edge_groups);
    if (s.D == 40) {  // "tall-and-deep": two H chunks of 24 rows, D chunks of 5 and 21 planes
      CHECK(plan.h_chunks == 2);
      CHECK(plan.bulk_rows == 24);
      CHECK(plan.bulk_planes == 5);
      CHECK(plan.edge_d_chunks == 2);
      CHECK(plan.edge_groups == 2);
    }
    if (s.H == 40) {  // "edge-groups-apart": edge classes of 8 rows, two groups of two
      CHECK(plan.classes[1] == 5);
      CHECK(plan.edge_groups == 2);
      CHECK(plan.edge_group_begin[1] == 2);
    }
    if (s.N == 80 && s.D == 24) {  // "two-launches": 80 items in 47 + 33 (3 + 2 rounds)
      CHECK(plan.items_per_launch == 47);
    }
  }
  // The box sums' piece codes (2 bytes each in shared memory) bound the pieces per item.
  const conv::GramWeightGradPlan deep =
      plan_for(stride1_shape({1, 3, 60000, 32, 32}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
               ScalarKind::kFloat, kH100);
  CHECK(deep.supported);
  CHECK(deep.pieces <= conv::kGramMaxPieces);
  CHECK_FALSE(plan_for(stride1_shape({1, 3, 70000, 32, 32}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
                       ScalarKind::kFloat, kH100)
                  .supported);
  conv::Conv3dShape strided = headline;
  strided.stride[1] = 2, strided.Ho = 15;
  const conv::Conv3dShape outside[] = {
      strided,
      stride1_shape({2, 4, 6, 7, 5}, 24, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1),
      stride1_shape({2, 4, 23, 19, 40}, 12, {3, 1, 2}, {0, 2, 1}, {1, 1, 1}, 1),
      stride1_shape({3, 1, 15, 10, 33}, 6, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 9, 9, 30}, 24, {3, 3, 3}, {0, 0, 2}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 9, 9, 9}, 24, {4, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      // Rows of 32 + 2 x 20 floats, more than the 2 warps of a (1, 3, 2) kernel spread over.
      stride1_shape({1, 3, 4, 6, 30}, 6, {1, 3, 2}, {0, 0, 0}, {1, 1, 17}, 1),
  };
  for (const auto& s : outside) {
    CHECK_FALSE(plan_for(s, ScalarKind::kFloat, kH100).supported);
  }
}

TEST_CASE("one-pass plans fall back to the direct kernel where tensor-core footprints do not fit",
          "[conv][cpu][onepass]") {
  using fused_ops::ScalarKind;
  namespace conv = fused_ops::conv;
  constexpr size_t kH100 = 232448;  // an H100's opt-in shared memory per block
  // Dilation 8 along every dim: footprints of 33 x 40 x 40 rows, which the direct kernel's one
  // buffer holds and the tensor-core kernel's two do not.
  const conv::Conv3dShape s =
      stride1_shape({2, 2, 40, 40, 33}, 24, {3, 3, 3}, {0, 0, 0}, {8, 8, 8}, 1);
  const conv::OnePassPlan direct =
      conv::plan_conv3d_group_norm_mean_onepass(s, ScalarKind::kFloat, kH100, false, true);
  REQUIRE(direct.supported);
  const conv::OnePassPlan plan =
      conv::plan_conv3d_group_norm_mean_onepass(s, ScalarKind::kFloat, kH100, true, true);
  REQUIRE(plan.supported);
  CHECK_FALSE(plan.tensor_cores);
  CHECK(plan.smem_bytes == direct.smem_bytes);
}

// On wgmma the tensor-core forward copies its footprints with the tensor memory accelerator
// (OnePassPlan::tma_footprint) where x's rows and every box's first column are 16-byte aligned:
// the box's layout (the padded row, a multiple of 4 floats, dense above it), the buffers 128-byte
// multiples after kOnePassTmaAlignSlack bytes of slack, boxes of at most 384 positions (3 m16
// tiles a warp; 512 on mma.sync, which never uses the map); python_tests/test_conv3d_onepass.py's
// TMA_CASES run these problems.
TEST_CASE("one-pass plans copy footprints with tensor maps on wgmma", "[conv][cpu][onepass]") {
  namespace conv = fused_ops::conv;
  struct Case {
    conv::Conv3dShape s;
    bool tma;
  };
  conv::Conv3dShape padded_by_one =
      stride1_shape({2, 3, 5, 6, 30}, 16, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1);
  const Case cases[] = {
      {stride1_shape({128, 3, 24, 32, 32}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), true},
      {stride1_shape({2, 3, 5, 6, 24}, 16, {3, 3, 3}, {1, 2, 4}, {1, 1, 1}, 1), true},
      {stride1_shape({2, 2, 4, 5, 72}, 8, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), true},
      {stride1_shape({2, 6, 4, 6, 32}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 3), true},
      {stride1_shape({1, 4, 7, 8, 40}, 16, {3, 3, 3}, {0, 0, 0}, {2, 2, 2}, 1), true},
      // Padding 1 along W (an unaligned first column), W = 30 (unaligned rows): not.
      {padded_by_one, false},
      {stride1_shape({2, 3, 5, 6, 30}, 16, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), false},
  };
  for (const Case& c : cases) {
    INFO("W " << c.s.W << ", padding " << c.s.padding[2] << ", groups " << c.s.groups);
    const auto [plan, mma_sync] = tensor_core_plans(c.s);
    REQUIRE(plan.supported);
    REQUIRE(plan.tensor_cores);
    CHECK(plan.tma_footprint == c.tma);
    CHECK_FALSE(mma_sync.tma_footprint);
    CHECK(plan.capacity == conv::kOnePassWgmmaCapacity);
    CHECK(mma_sync.capacity == conv::kOnePassTensorCoreCapacity);
    CHECK(plan.TD * plan.TH * plan.TW <= plan.capacity);
    if (!c.tma) {
      continue;
    }
    CHECK(plan.row_pitch % 4 == 0);
    CHECK(plan.row_pitch >= plan.FW);
    CHECK(plan.row_pitch <= 256);
    CHECK(plan.plane_pitch == plan.FH * plan.row_pitch);
    CHECK(plan.channel_pitch == plan.FD * plan.plane_pitch);
    CHECK(plan.footprint == plan.c_in_g * plan.channel_pitch);
    CHECK(plan.footprint_bytes % 128 == 0);
    CHECK(plan.footprint_bytes >= static_cast<size_t>(plan.footprint) * 4);
    CHECK(plan.scratch_offset ==
          plan.footprint_offset + conv::kOnePassTmaAlignSlack + 2 * plan.footprint_bytes);
    // (Where boxes are whole input rows, the row table stays, for the asynchronous copies where
    // the tensor map is not used.)
    const size_t scratch_end =
        plan.scratch_offset +
        static_cast<size_t>(conv::kOnePassTensorCoreScratchBytesPerChannel * plan.cb +
                            conv::kOnePassTensorCoreScratchBytes);
    CHECK((plan.row_table_offset == 0 || plan.row_table_offset == scratch_end));
    CHECK(plan.smem_bytes ==
          scratch_end + (plan.row_table_offset != 0
                             ? static_cast<size_t>(plan.c_in_g * plan.FD * plan.FH) * 16
                             : 0));
    CHECK((plan.row_table_offset != 0) ==
          conv::boxes_are_whole_input_rows(c.s, plan.FW, plan.boxes_w));
  }
}

// On wgmma the tensor-core forward loads its values in windows (OnePassPlan::windows) where kW =
// 3 with stride and dilation 1 along W, the box's width is a multiple of 6, the footprint's
// pitches are even and the windows' triples take no more K steps than the taps;
// python_tests/test_conv3d_onepass.py's WINDOW_CASES run the problems that take them.
TEST_CASE("one-pass plans load windows on wgmma", "[conv][cpu][onepass]") {
  namespace conv = fused_ops::conv;
  struct Case {
    conv::Conv3dShape s;
    bool windows;
    int64_t rows, triples;
  };
  conv::Conv3dShape strided =
      stride1_shape({2, 3, 9, 11, 26}, 16, {3, 3, 3}, {0, 0, 0}, {2, 1, 1}, 1);
  strided.stride[0] = 2, strided.stride[1] = 2;
  strided.Do = (strided.D - 2 * 2 - 1) / 2 + 1, strided.Ho = (strided.H - 2 - 1) / 2 + 1;
  conv::Conv3dShape strided_w =
      stride1_shape({2, 3, 6, 7, 26}, 16, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1);
  strided_w.stride[2] = 2, strided_w.Wo = (strided_w.W - 2 - 1) / 2 + 1;
  const Case cases[] = {
      // The Conv3d headline: 27 kernel rows, 7 triples a quad of lanes (quad 3's last one
      // padding), 11 K steps (3 pairs of triples, then the odd one).
      {stride1_shape({128, 3, 24, 32, 32}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), true, 27, 7},
      {stride1_shape({2, 3, 6, 8, 32}, 8, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), true, 27, 7},
      // cpp_tests/test_utils.h's conv3d_cases: output rows of 6.
      {stride1_shape({2, 3, 5, 6, 8}, 8, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), true, 27, 7},
      // Padding along every dim, one along W (asynchronous copies).
      {stride1_shape({2, 3, 5, 7, 12}, 24, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1), true, 27, 7},
      // Conv groups of 4 input channels: 36 rows, 9 triples, 14 K steps either way.
      {stride1_shape({1, 8, 4, 5, 20}, 40, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 2), true, 36, 9},
      // Stride and dilation along D and H.
      {strided, true, 27, 7},
      // N = 1, boxes overhanging the output along D and H.
      {stride1_shape({1, 3, 7, 9, 38}, 16, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), true, 27, 7},
      // 5 input channels, kernel 2 x 3 x 3: 30 rows, 8 triples (an even count: no odd last
      // one), 12 K steps.
      {stride1_shape({2, 5, 4, 5, 26}, 16, {2, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), true, 30, 8},
      // Kernel 1 x 3 x 3 with 1, 2 and 4 input channels: 3, 6 and 12 rows, 1, 2 and 3 triples
      // (no pair; one pair; a pair and an odd one), 2, 3 and 5 K steps.
      {stride1_shape({2, 1, 4, 5, 14}, 8, {1, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), true, 3, 1},
      {stride1_shape({2, 2, 4, 5, 14}, 8, {1, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), true, 6, 2},
      {stride1_shape({2, 4, 4, 5, 14}, 8, {1, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), true, 12, 3},
      // Not: Wo = 32 (boxes of 32), kW = 2, stride 2 along W, one input channel (9 rows: 5 K
      // steps in triples against 4).
      {stride1_shape({2, 3, 6, 8, 34}, 16, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), false, 0, 0},
      {stride1_shape({2, 3, 6, 8, 31}, 16, {3, 3, 2}, {0, 0, 0}, {1, 1, 1}, 1), false, 0, 0},
      {strided_w, false, 0, 0},
      {stride1_shape({2, 1, 6, 8, 32}, 16, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1), false, 0, 0},
  };
  for (const Case& c : cases) {
    INFO("C_in " << c.s.C_in << ", W " << c.s.W << ", kW " << c.s.kW << ", stride " << c.s.stride[0]
                 << "," << c.s.stride[2] << ", groups " << c.s.groups);
    const auto [plan, mma_sync] = tensor_core_plans(c.s);
    REQUIRE(plan.supported);
    REQUIRE(plan.tensor_cores);
    CHECK(plan.windows == c.windows);
    CHECK_FALSE(mma_sync.windows);
    if (!c.windows) {
      continue;
    }
    CHECK(plan.TW % 6 == 0);
    CHECK(plan.window_rows == c.rows);
    CHECK(plan.window_triples == c.triples);
    // The taps' offsets take 4 ints per triple, within the k_pad ints the plan keeps for them.
    CHECK(4 * plan.window_triples <= plan.k_pad);
    // The K columns take every tap once (the rest are padding), and a K step's columns of one
    // quad of lanes take taps of one kw (but in an odd last triple) from two kernel rows.
    std::vector<int> taken(static_cast<size_t>(plan.K), 0);
    for (int k = 0; k < plan.k_pad; ++k) {
      const int tap = fused_ops::conv::onepass_window_tap(k, plan);
      REQUIRE(tap >= -1);
      REQUIRE(tap < plan.K);
      if (tap >= 0) {
        ++taken[static_cast<size_t>(tap)];
      }
    }
    CHECK(std::count(taken.begin(), taken.end(), 1) == plan.K);
    // Step 3 p + kw: quad q's column q takes tap kw of its triple 2 p (kernel row 4 (2 p) + q),
    // column q + 4 tap kw of triple 2 p + 1 (row 4 more; padding past the rows). An odd last
    // triple j: (j, 0), (j, 1), then (j, 2), padding.
    const auto tap_of = [&](int row, int kw) { return row < plan.window_rows ? 3 * row + kw : -1; };
    const int triples = static_cast<int>(plan.window_triples);
    const int pair_steps = 3 * (triples / 2);
    for (int ks = 0; ks < plan.k_pad / 8; ++ks) {
      for (int q = 0; q < 4; ++q) {
        const int first = fused_ops::conv::onepass_window_tap(8 * ks + q, plan);
        const int second = fused_ops::conv::onepass_window_tap(8 * ks + 4 + q, plan);
        if (ks < pair_steps) {
          const int row = 4 * (2 * (ks / 3)) + q;
          CHECK(first == tap_of(row, ks % 3));
          CHECK(second == tap_of(row + 4, ks % 3));
        } else {
          const int row = 4 * (triples - 1) + q;
          const int kw = 2 * (ks - pair_steps);
          CHECK(first == tap_of(row, kw));
          CHECK(second == (kw + 1 < 3 ? tap_of(row, kw + 1) : -1));
        }
      }
    }
    CHECK(plan.row_pitch % 2 == 0);
    CHECK(plan.plane_pitch % 2 == 0);
    CHECK(plan.channel_pitch % 2 == 0);
  }
}

// The one-pass plans are memoized per argument set (PlanMemo, 8 entries): from any thread, in
// any order, with more argument sets than entries (evictions), each call returns its own
// arguments' plan.
TEST_CASE("one-pass plans: each argument set gets its own plan from the memo, from any thread",
          "[conv][cpu][onepass]") {
  using fused_ops::ScalarKind;
  namespace conv = fused_ops::conv;
  constexpr size_t kSmem = 227 * 1024;
  struct Args {
    conv::Conv3dShape s;
    ScalarKind dtype;
    bool tensor_cores;
  };
  std::vector<Args> args;
  for (const int64_t n : {1, 3, 128}) {
    for (const int64_t c : {1, 3, 16}) {
      for (const int64_t k : {1, 3}) {
        const auto s =
            stride1_shape({n, c, 8 + k, 12, 20 + n % 5}, 24, {k, k, k}, {1, 0, 1}, {1, 1, 1}, 1);
        args.push_back({s, ScalarKind::kFloat, true});
        args.push_back({s, k == 1 ? ScalarKind::kDouble : ScalarKind::kFloat, false});
      }
    }
  }
  REQUIRE(args.size() > 8);  // more than the memo's entries
  const auto forward = [&](const Args& a) {
    return conv::plan_conv3d_group_norm_mean_onepass(a.s, a.dtype, kSmem, a.tensor_cores, true);
  };
  const auto backward = [&](const Args& a) {
    return conv::plan_conv3d_group_norm_mean_onepass_backward(a.s, a.dtype, kSmem);
  };
  const auto same_forward = [](const conv::OnePassPlan& x, const conv::OnePassPlan& y) {
    return x.supported == y.supported && x.tensor_cores == y.tensor_cores && x.tiles == y.tiles &&
           x.TD == y.TD && x.TH == y.TH && x.TW == y.TW && x.cb == y.cb &&
           x.smem_bytes == y.smem_bytes && x.footprint == y.footprint;
  };
  const auto same_backward = [](const conv::OnePassBackwardPlan& x,
                                const conv::OnePassBackwardPlan& y) {
    return x.supported == y.supported && x.tiles == y.tiles && x.BD == y.BD && x.BH == y.BH &&
           x.BW == y.BW && x.smem_bytes == y.smem_bytes;
  };
  // Each plan against its own arguments (independent of the memo): the reduction length and
  // the tile count its boxes give.
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const auto fits_forward = [&](const Args& a, const conv::OnePassPlan& x) {
    const conv::Conv3dShape& t = a.s;
    return x.supported && x.K == t.C_in / t.groups * t.kD * t.kH * t.kW &&
           x.tiles == t.N * t.groups * x.chunks * ceil_div(t.Do, x.TD) * ceil_div(t.Ho, x.TH) *
                          ceil_div(t.Wo, x.TW);
  };
  const auto fits_backward = [&](const Args& a, const conv::OnePassBackwardPlan& x) {
    const conv::Conv3dShape& t = a.s;
    return x.supported && x.K == t.C_in / t.groups * t.kD * t.kH * t.kW &&
           x.tiles ==
               t.N * t.groups * ceil_div(t.D, x.BD) * ceil_div(t.H, x.BH) * ceil_div(t.W, x.BW);
  };
  std::vector<conv::OnePassPlan> forward_plans;
  std::vector<conv::OnePassBackwardPlan> backward_plans;
  for (const Args& a : args) {
    forward_plans.push_back(forward(a));
    backward_plans.push_back(backward(a));
    CHECK(fits_forward(a, forward_plans.back()));
    CHECK(fits_backward(a, backward_plans.back()));
  }
  // The argument sets differ in their plans (else a mix-up could not show).
  int distinct = 0;
  for (size_t i = 1; i < args.size(); ++i) {
    distinct += same_forward(forward_plans[i], forward_plans[i - 1]) ? 0 : 1;
  }
  CHECK(distinct > static_cast<int>(args.size()) / 2);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 400; ++i) {
        // Each thread its own order: runs of one set (hits) and strides across them (misses).
        const size_t j = static_cast<size_t>((i / (1 + t) * (2 * t + 1) + t) % args.size());
        const conv::OnePassPlan f = forward(args[j]);
        const conv::OnePassBackwardPlan b = backward(args[j]);
        if (!fits_forward(args[j], f) || !same_forward(f, forward_plans[j]) ||
            !fits_backward(args[j], b) || !same_backward(b, backward_plans[j])) {
          ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(mismatches.load() == 0);
}

TEST_CASE("lag input gradient plans: the family, the patterns and the D columns",
          "[conv][cpu][onepass]") {
  using fused_ops::ScalarKind;
  namespace conv = fused_ops::conv;
  constexpr size_t kSmem = 227 * 1024;  // an H100's opt-in shared memory per block
  constexpr int64_t kH100 = 132;        // its multiprocessors
  const auto plan_for = [&](const conv::Conv3dShape& s, int64_t num_groups, ScalarKind dtype,
                            int64_t multiprocessors) {
    return conv::plan_conv3d_group_norm_mean_lag_input_grad(s, num_groups, dtype, kSmem,
                                                            multiprocessors);
  };
  // The headline: 5 tap ranges per dim ({0}, {0,1}, {0,1,2}, {1,2}, {2}); D in 2 columns of 12.
  const conv::Conv3dShape headline =
      stride1_shape({128, 3, 24, 32, 32}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1);
  // float64 stays on the recomputing kernel (the lag kernel's double registers spill).
  CHECK_FALSE(plan_for(headline, 8, ScalarKind::kDouble, kH100).supported);
  // GroupNorm's groups must divide the channels.
  CHECK_FALSE(plan_for(headline, 7, ScalarKind::kFloat, kH100).supported);
  for (const ScalarKind dtype : {ScalarKind::kFloat, ScalarKind::kHalf, ScalarKind::kBFloat16}) {
    const conv::LagInputGradPlan plan = plan_for(headline, 8, dtype, kH100);
    REQUIRE(plan.supported);
    CHECK(plan.patterns[0] == 5);
    CHECK(plan.patterns[1] == 5);
    CHECK(plan.patterns[2] == 5);
    CHECK(plan.d_tiles == 2);  // columns of 12
    CHECK(plan.row == 16);     // 5 lags x 3 channels, padded to 4
    CHECK(plan.table_elems == 125 * (3 * 5 * 5 * 16));
    // 8 segments (one per GroupNorm group) for 128 items: their tables, built once, take
    // 8 x (81 x 81 + table_elems) doubles.
    CHECK(plan.segment_tables);
    CHECK(plan.segments_per_group == 8);
    CHECK(8 * (81 * 81 + plan.table_elems) * 8 <=
          static_cast<int64_t>(conv::kLagSegmentTableBytes));
    // An item's tables (float) take at most 20 MiB a launch: 34 items, so 4 balanced launches
    // of 32. On an H100 (8 blocks per item, 2 resident per multiprocessor, 132
    // multiprocessors) each is one wave (256 blocks); no chunk takes fewer waves.
    CHECK(plan_for(headline, 8, dtype, 0).items_per_chunk == 32);
    CHECK(plan.items_per_chunk == 32);
    CHECK(plan.items_per_chunk * plan.table_elems * 4 <=
          static_cast<int64_t>(conv::kLagTableBytes));
    // Beside the Gram kernels (their concurrent budget, 14 MiB): 24 items fit, so 6 launches of
    // 22, each one wave (176 blocks); no smaller chunk takes fewer waves.
    const conv::LagInputGradPlan concurrent = conv::plan_conv3d_group_norm_mean_lag_input_grad(
        headline, 8, dtype, kSmem, kH100, conv::kLagConcurrentTableBytes);
    REQUIRE(concurrent.supported);
    CHECK(concurrent.items_per_chunk == 22);
    CHECK(concurrent.items_per_chunk * concurrent.table_elems * 4 <=
          static_cast<int64_t>(conv::kLagConcurrentTableBytes));
    // A budget below one item's tables: one item a launch.
    CHECK(conv::plan_conv3d_group_norm_mean_lag_input_grad(headline, 8, dtype, kSmem, kH100, 1024)
              .items_per_chunk == 1);
    // The footprint (columns of 20 floats) leaves shared memory for two blocks per SM, with
    // their 1 KiB each.
    CHECK(plan.smem_bytes == 3 * 20 * (8 + 4) * (32 + 4) * 4);
    CHECK((plan.smem_bytes + 1024) * 2 <= 228 * 1024);
  }
  // Segment tables where they are fewer than the items and fit; else each item's own.
  {
    // 2 items, 8 segments.
    const conv::Conv3dShape two =
        stride1_shape({2, 3, 8, 9, 10}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1);
    CHECK_FALSE(plan_for(two, 8, ScalarKind::kFloat, kH100).segment_tables);
    CHECK(plan_for(two, 1, ScalarKind::kFloat, kH100).segment_tables);  // 1 segment
    // 16 segments of the headline's size take over 16 MiB.
    const conv::Conv3dShape wide =
        stride1_shape({128, 3, 24, 32, 32}, 48, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1);
    const conv::LagInputGradPlan plan = plan_for(wide, 16, ScalarKind::kFloat, kH100);
    REQUIRE(plan.supported);
    CHECK_FALSE(plan.segment_tables);
    CHECK(plan_for(wide, 8, ScalarKind::kFloat, kH100).segment_tables);
    // Conv groups whose channels straddle GroupNorm groups: 2 conv groups of 6 channels,
    // GroupNorm groups of 4 (0-3, 4-7, 8-11): each conv group meets 2.
    const conv::Conv3dShape straddling =
        stride1_shape({12, 2, 6, 7, 9}, 12, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 2);
    const conv::LagInputGradPlan split = plan_for(straddling, 3, ScalarKind::kFloat, kH100);
    REQUIRE(split.supported);
    CHECK(split.segment_tables);
    CHECK(split.segments_per_group == 2);
    // GroupNorm groups of 3 within conv groups of 6: 2 each.
    CHECK(plan_for(straddling, 4, ScalarKind::kFloat, kH100).segments_per_group == 2);
    // 242 items (121 samples x 2 conv groups) of 25000-float tables: at most 209 a launch; on
    // an H100, two launches of 121, the second starting at conv group 1 (python_tests'
    // "odd-chunks-groups").
    const conv::Conv3dShape odd =
        stride1_shape({121, 2, 6, 6, 6}, 12, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 2);
    const conv::LagInputGradPlan halves = plan_for(odd, 3, ScalarKind::kFloat, kH100);
    REQUIRE(halves.supported);
    CHECK(halves.segment_tables);
    CHECK(halves.table_elems == 125 * 25 * 8);
    CHECK(halves.items_per_chunk == 121);
    // 24 segments of one channel each for 96 items in one launch (python_tests'
    // "many-segments"): more items than one tile of the combine kernel's alphas.
    const conv::Conv3dShape many =
        stride1_shape({96, 1, 7, 5, 6}, 24, {3, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1);
    const conv::LagInputGradPlan thin = plan_for(many, 24, ScalarKind::kFloat, kH100);
    REQUIRE(thin.supported);
    CHECK(thin.segment_tables);
    CHECK(thin.segments_per_group == 24);
    CHECK(thin.items_per_chunk == 96);  // (the combine kernel's alphas: 80 items a tile)
    // More segments than the combine kernel takes (one item's alphas in shared memory): each
    // item's own tables, though the segments' would be fewer and small.
    const conv::Conv3dShape finest =
        stride1_shape({4100, 1, 3, 1, 1}, 4096, {3, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1);
    const conv::LagInputGradPlan finest_plan = plan_for(finest, 4096, ScalarKind::kFloat, kH100);
    REQUIRE(finest_plan.supported);
    CHECK(finest_plan.segments_per_group == 4096);
    CHECK_FALSE(finest_plan.segment_tables);
    CHECK(plan_for(finest, 256, ScalarKind::kFloat, kH100).segments_per_group == 256);
    CHECK(plan_for(finest, 256, ScalarKind::kFloat, kH100).segment_tables);
  }
  // python_tests/test_conv3d_onepass.py's LAG_CASES are in the family (planned with 2
  // GroupNorm groups here: which tables they take is checked above).
  const conv::Conv3dShape cases[] = {
      stride1_shape({2, 3, 8, 9, 10}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 7, 9, 11}, 24, {3, 3, 3}, {2, 1, 3}, {1, 2, 2}, 1),
      stride1_shape({1, 4, 6, 7, 5}, 24, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 2),
      stride1_shape({2, 4, 23, 19, 40}, 12, {3, 1, 2}, {0, 2, 1}, {1, 1, 1}, 1),
      stride1_shape({3, 1, 15, 10, 33}, 6, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 2, 4, 6, 9}, 16, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 2, 5, 6, 9}, 16, {3, 3, 3}, {1, 0, 2}, {1, 1, 1}, 1),
      stride1_shape({40, 3, 6, 6, 6}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({12, 2, 6, 7, 9}, 12, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 2),
      stride1_shape({2, 3, 20, 37, 35}, 24, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 24, 5, 6}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      // test_cuda.cpp's
      stride1_shape({2, 3, 11, 9, 34}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({1, 2, 4, 6, 9}, 16, {3, 2, 3}, {1, 1, 0}, {1, 1, 1}, 1),
  };
  for (const auto& s : cases) {
    const conv::LagInputGradPlan plan = plan_for(s, 2, ScalarKind::kFloat, kH100);
    INFO("x (" << s.N << ", " << s.C_in << ", " << s.D << ", " << s.H << ", " << s.W << ")");
    REQUIRE(plan.supported);
    // D's columns: of 12, then 8, 4, 2, 1; the footprint's columns those of the deepest (its
    // planes and the 4 the D lags reach: 16 -> 20 values, 12 -> 12, 8, 6 and 5 -> 8).
    CHECK(plan.d_tiles == s.D / 12 + __builtin_popcountll(s.D % 12));
    const int64_t pitch = s.D >= 12 ? 20 : s.D >= 8 ? 12 : 8;
    CHECK(plan.smem_bytes == static_cast<size_t>(plan.c_in_g * pitch * plan.FH * plan.FW * 4));
    CHECK(plan.table_elems % 4 == 0);  // (the combine kernel writes pairs of elements)
    if (s.N == 40) {  // python_tests' "two-chunks": its 40 items take two launches of 20
      CHECK(plan.items_per_chunk == 20);
    }
  }
  // Outside: stride 2, dilation along D, 5 input channels per group, kernel sizes 4 and (2, 3,
  // 3), and more table products than the direct input gradient's (4 input channels, 8 outputs
  // per group).
  conv::Conv3dShape strided = headline;
  strided.stride[1] = 2, strided.Ho = 15;
  const conv::Conv3dShape outside[] = {
      strided,
      stride1_shape({2, 3, 9, 9, 9}, 24, {3, 3, 3}, {0, 0, 0}, {2, 1, 1}, 1),
      stride1_shape({2, 5, 9, 9, 9}, 24, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 9, 9, 9}, 24, {4, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 3, 9, 9, 9}, 24, {2, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
      stride1_shape({2, 4, 9, 9, 9}, 8, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, 1),
  };
  for (const auto& s : outside) {
    CHECK_FALSE(plan_for(s, 2, ScalarKind::kFloat, kH100).supported);
  }
  // Sizes whose tap ranges pass int (the kernels compute them in int): outside. Output extent
  // plus padding; input extent plus padding (a dilation that shrinks the output); a dilation
  // past int along a dim of one tap (the footprint does not grow with it). A large padding
  // and a large dilation within int stay in.
  CHECK_FALSE(plan_for(stride1_shape({1, 3, 9, 9, 9}, 24, {3, 3, 3}, {0, 0, int64_t{1} << 30},
                                     {1, 1, 1}, 1),
                       2, ScalarKind::kFloat, kH100)
                  .supported);
  CHECK_FALSE(plan_for(stride1_shape({1, 1, 1, (int64_t{1} << 31) - 1, 1}, 8, {3, 2, 1}, {1, 2, 0},
                                     {1, 71, 1}, 1),
                       2, ScalarKind::kFloat, kH100)
                  .supported);
  CHECK_FALSE(plan_for(stride1_shape({2, 3, 8, 16, 30}, 24, {3, 1, 3}, {1, 0, 1},
                                     {1, int64_t{1} << 32, 1}, 1),
                       2, ScalarKind::kFloat, kH100)
                  .supported);
  CHECK(plan_for(stride1_shape({2, 3, 8, 16, 30}, 24, {3, 1, 3}, {1, 0, 1}, {1, 1 << 20, 1}, 1), 2,
                 ScalarKind::kFloat, kH100)
            .supported);
  CHECK(plan_for(
            stride1_shape({1, 3, 9, 9, 9}, 24, {3, 3, 3}, {0, 0, int64_t{1} << 28}, {1, 1, 1}, 1),
            2, ScalarKind::kFloat, kH100)
            .supported);
}
