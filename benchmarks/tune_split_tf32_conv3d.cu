// Chooses the tiles of the split-TF32 convolution (ops/conv/split_tf32_conv3d.cuh) by
// measurement: times one candidate tile (FUSED_OPS_TUNE_TILE, 0..kTiles-1, one per binary so
// that they compile in parallel) on a forward 3-d convolution and, built with
// -DFUSED_OPS_TUNE_WGRAD, on its weight gradient; by default the forward rewrite of the
// headline ConvTranspose3d(64 -> 128, k3) on (16, 64, 32^3) (stride 1, padding 2). Checks
// sampled results (4096 outputs, 64 weight-gradient entries) against a float64 host
// reference. No PyTorch.
//
//   tools/tune_split_tf32_conv3d.sh    # builds every candidate for sm_90a and runs each
//
// Prints: tile, ms (median of 20), TFLOP/s (2 * M * N * K useful flops), max |error| of the
// samples relative to the largest |result|.
#include "conv/split_tf32_conv3d.cuh"
#include "standalone_cuda.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#ifndef FUSED_OPS_TUNE_TILE
#define FUSED_OPS_TUNE_TILE 0
#endif

namespace {
using namespace fused_ops;
using gpu::SplitTf32Tile;

// clang-format off
template <int I> struct Candidate;
template <> struct Candidate<0>  { using T = SplitTf32Tile<128, 128, 16, 32, 64, 4>; };
template <> struct Candidate<1>  { using T = SplitTf32Tile<128, 128, 16, 32, 64, 3>; };
template <> struct Candidate<2>  { using T = SplitTf32Tile<256,  64, 16, 64, 32, 3>; };
template <> struct Candidate<3>  { using T = SplitTf32Tile<128,  64, 16, 64, 32, 4>; };
template <> struct Candidate<4>  { using T = SplitTf32Tile< 64, 128, 16, 32, 64, 4>; };
template <> struct Candidate<5>  { using T = SplitTf32Tile<128, 128, 32, 32, 64, 3>; };
template <> struct Candidate<6>  { using T = SplitTf32Tile<256,  64, 32, 64, 32, 3>; };
template <> struct Candidate<7>  { using T = SplitTf32Tile<128,  64, 32, 64, 32, 3>; };
template <> struct Candidate<8>  { using T = SplitTf32Tile< 64,  64, 32, 32, 32, 3>; };
template <> struct Candidate<9>  { using T = SplitTf32Tile<128, 128, 16, 64, 64, 4>; };
template <> struct Candidate<10> { using T = SplitTf32Tile<256, 128, 16, 64, 64, 3>; };
template <> struct Candidate<11> { using T = SplitTf32Tile<256,  64, 16, 64, 32, 3, 2>; };
template <> struct Candidate<12> { using T = SplitTf32Tile<128, 128, 16, 32, 64, 5>; };
template <> struct Candidate<13> { using T = SplitTf32Tile<128,  64, 16, 64, 32, 6>; };
// clang-format on
using Tile = Candidate<FUSED_OPS_TUNE_TILE>::T;
using Conv = gpu::SplitTf32Conv3dFprop<Tile>;
using Wgrad = gpu::SplitTf32Conv3dWgrad<Tile>;

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float e : v) m = std::max(m, std::fabs(double(e)));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  // N C D H W K k pad [split-K slices] (default: the headline ConvTranspose3d's rewrite)
  int64_t a[8] = {16, 64, 32, 32, 32, 128, 3, 2};
  for (int i = 1; i < argc && i <= 8; ++i) a[i - 1] = std::atoll(argv[i]);
  conv::Conv3dShape s{};
  s.N = a[0], s.C_in = a[1], s.D = a[2], s.H = a[3], s.W = a[4], s.C_out = a[5];
  s.kD = s.kH = s.kW = a[6];
  for (int i = 0; i < 3; ++i) s.stride[i] = 1, s.padding[i] = a[7], s.dilation[i] = 1;
  s.Do = s.D + 2 * a[7] - a[6] + 1, s.Ho = s.H + 2 * a[7] - a[6] + 1;
  s.Wo = s.W + 2 * a[7] - a[6] + 1;
  s.groups = 1;
  const int64_t nx = s.N * s.D * s.H * s.W * s.C_in, nw = s.C_out * s.kD * s.kH * s.kW * s.C_in;
  const int64_t ny = s.N * s.Do * s.Ho * s.Wo * s.C_out;
  auto x_at = [&](const std::vector<float>& x, int64_t n, int64_t d, int64_t h, int64_t w,
                  int64_t c) -> double {
    if (d < 0 || d >= s.D || h < 0 || h >= s.H || w < 0 || w >= s.W) return 0.0;
    return x[(((n * s.D + d) * s.H + h) * s.W + w) * s.C_in + c];
  };

  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uni(0.f, 1.f), sym(-0.05f, 0.05f);
  std::normal_distribution<float> gauss;
  std::vector<float> x(nx), w(nw), b(s.C_out);
  for (auto& v : x) v = uni(rng);  // non-negative, as torch.rand: a common offset in y
  for (auto& v : w) v = sym(rng);
  for (auto& v : b) v = sym(rng);
  const double flops = 2.0 * double(s.N * s.Do * s.Ho * s.Wo) * double(s.C_out) *
                       double(s.C_in * s.kD * s.kH * s.kW);
  double median = 0, max_err = 0, scale = 0;
  const char* what = "fprop";
  int slices = 1;

#ifndef FUSED_OPS_TUNE_WGRAD
  std::vector<float> y(ny);
  conv::Conv3dChannelsLastParams p{s, to_device(x), to_device(w), to_device(b), nullptr};
  CHECK_CUDA(cudaMalloc(&p.y, ny * 4));
  if (!Conv::can_implement(p)) {
    std::printf("tile %d: CUTLASS cannot implement this problem\n", FUSED_OPS_TUNE_TILE);
    return 1;
  }
  median = median_ms([&] { return Conv::launch(p, nullptr); });
  CHECK_CUDA(cudaMemcpy(y.data(), p.y, ny * 4, cudaMemcpyDeviceToHost));
  scale = max_abs(y);
  std::uniform_int_distribution<int64_t> pick(0, ny - 1);
  for (int sample = 0; sample < 4096; ++sample) {
    int64_t i = pick(rng), rest = i;
    const int64_t k = rest % s.C_out;
    rest /= s.C_out;
    const int64_t q = rest % s.Wo;
    rest /= s.Wo;
    const int64_t pp = rest % s.Ho;
    rest /= s.Ho;
    const int64_t z = rest % s.Do, n = rest / s.Do;
    double acc = b[k];
    for (int64_t t = 0; t < s.kD; ++t)
      for (int64_t r = 0; r < s.kH; ++r)
        for (int64_t u = 0; u < s.kW; ++u)
          for (int64_t c = 0; c < s.C_in; ++c)
            acc +=
                x_at(x, n, z - s.padding[0] + t, pp - s.padding[1] + r, q - s.padding[2] + u, c) *
                double(w[(((k * s.kD + t) * s.kH + r) * s.kW + u) * s.C_in + c]);
    max_err = std::max(max_err, std::fabs(acc - double(y[i])));
  }
#else
  what = "wgrad";
  std::vector<float> dy(ny), dw(nw);
  for (auto& v : dy) v = gauss(rng);
  conv::Conv3dWeightGradChannelsLastParams p{s, to_device(x), to_device(dy), nullptr};
  CHECK_CUDA(cudaMalloc(&p.grad_weight, nw * 4));
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  slices = argc > 9 ? std::atoi(argv[9]) : Wgrad::slices(s, sms);
  if (!Wgrad::can_implement(p, slices)) {
    std::printf("tile %d: CUTLASS cannot implement this problem\n", FUSED_OPS_TUNE_TILE);
    return 1;
  }
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, std::max<size_t>(Wgrad::workspace_bytes(p, slices), 256)));
  median = median_ms([&] { return Wgrad::launch(p, slices, workspace, nullptr); });
  CHECK_CUDA(cudaMemcpy(dw.data(), p.grad_weight, nw * 4, cudaMemcpyDeviceToHost));
  scale = max_abs(dw);
  std::uniform_int_distribution<int64_t> pick(0, nw - 1);
  for (int sample = 0; sample < 64; ++sample) {
    int64_t i = pick(rng), rest = i;
    const int64_t c = rest % s.C_in;
    rest /= s.C_in;
    const int64_t u = rest % s.kW;
    rest /= s.kW;
    const int64_t r = rest % s.kH;
    rest /= s.kH;
    const int64_t t = rest % s.kD, k = rest / s.kD;
    double acc = 0;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t z = 0; z < s.Do; ++z)
        for (int64_t pp = 0; pp < s.Ho; ++pp)
          for (int64_t q = 0; q < s.Wo; ++q)
            acc += double(dy[(((n * s.Do + z) * s.Ho + pp) * s.Wo + q) * s.C_out + k]) *
                   x_at(x, n, z - s.padding[0] + t, pp - s.padding[1] + r, q - s.padding[2] + u, c);
    max_err = std::max(max_err, std::fabs(acc - double(dw[i])));
  }
#endif
  std::printf(
      "%s tile %2d  %3dx%3dx%2d warp %2dx%2d stages %d swizzle %d slices %3d  %.3f ms  "
      "%.1f TFLOP/s  max err %.2e of max |result| %.3g\n",
      what, FUSED_OPS_TUNE_TILE, Tile::Threadblock::kM, Tile::Threadblock::kN,
      Tile::Threadblock::kK, Tile::Warp::kM, Tile::Warp::kN, Tile::kStages, Tile::kSwizzle, slices,
      median, flops / median * 1e-9, max_err / scale, scale);
  return max_err / scale < 1e-5 ? 0 : 2;
}
