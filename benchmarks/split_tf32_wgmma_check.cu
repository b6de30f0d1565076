// Checks and times the wgmma split-TF32 convolution (ops/conv/split_tf32_wgmma_conv3d.cuh)
// against CUTLASS's sm80 split-TF32 kernel (split_tf32_conv3d.cuh, what runs on other GPUs) on
// the same problems in one process, without PyTorch. Every output element is compared with a
// float64 convolution computed on the GPU (a direct kernel); the output is poisoned (NaN)
// before each run, so an element left unwritten fails.
//
//   tools/split_tf32_wgmma_check.sh             # builds for sm_90a, runs on the current GPU
//   tools/split_tf32_wgmma_check.sh "" --stress  # the small shapes, 300 runs each, compared
//                                                # bitwise with the first run and with float64
//   tools/split_tf32_wgmma_check.sh "" --wgrad        # the weight gradient's problems only
//   tools/split_tf32_wgmma_check.sh "" --wgrad-small  # ... without the (timed) headline
//   tools/split_tf32_wgmma_check.sh "" --moments-small  # the small problems' "+moments" and
//                                                # "tf32+moments" rows only
//   tools/split_tf32_wgmma_check.sh "" --ncdhw        # the NCDHW outputs' rows only
//   tools/split_tf32_wgmma_check.sh "" --ncdhw-small  # ... without the (timed) headline
//   tools/split_tf32_wgmma_check.sh "" --profile-tile-moments  # the plain TF32 256 x 128 tile at
//                                                # the headline timed without / with its moments
//
// Problems: the headline ConvTranspose3d(64 -> 128, k3) on (16, 64, 32^3) as the forward
// convolution the library runs (padding 2) and its input gradient (128 -> 64 channels on
// 34^3, padding 0), both timed; then small shapes over the parameter surface (C_in not a
// multiple of 32, C_out not a multiple of the tile, stride, dilation, asymmetric kernels,
// M not a multiple of the tile, N = 1, more tiles than SMs). Inputs: torch.rand-like x in
// [0, 1) (a common offset in y, which exposes cancellation), weights and bias N(0, 1/fan_in).
// Prints per problem and kernel: ms (median of 20, the weights' split included), TFLOP/s of
// useful work (2 * M * C_out * K), relative L2 and max error against float64 (max relative to
// the largest |y|); exits non-zero if a wgmma result is not finite or is more than twice as
// far from float64 as CUTLASS's (or, where CUTLASS cannot run the shape, above 1e-6).
// Where the kernel also computes the ReLU -> GroupNorm statistics (relu_channel_moments: at
// least 128 positions per sample), a "+moments" row: the time of the convolution with them
// (and their finalize), and in the error columns the worst relative errors of the per-(n, c)
// mean (relative to |mean| + std) and M2 of relu(y) against those of the run's own output y
// in float64 (what the GroupNorm's own statistics pass computes; y's error against float64 is
// the row above); fails above 1e-5 or if a second run differs bitwise. "ncdhw" rows: the
// library's launch writing y NCDHW (y_channels_first), split and plain TF32 ("tf32 ncdhw",
// beside the NDHWC "tf32" row), where the kernel takes it; fails unless it is bitwise the NDHWC
// output transposed.
#include "conv/split_tf32_conv3d.cuh"
#include "conv/split_tf32_wgmma_conv3d.cuh"
#include "conv/split_tf32_wgmma_wgrad.cuh"
#include "standalone_cuda.cuh"

#include <cmath>
#include <cstring>
#include <random>

namespace {
using namespace fused_ops;

struct Problem {
  const char* name;
  int64_t N, C_in, D, H, W, C_out, k[3], pad[3], stride[3], dil[3];
  bool timed;
};

conv::Conv3dShape shape_of(const Problem& q) {
  conv::Conv3dShape s{};
  s.N = q.N, s.C_in = q.C_in, s.D = q.D, s.H = q.H, s.W = q.W, s.C_out = q.C_out;
  s.kD = q.k[0], s.kH = q.k[1], s.kW = q.k[2];
  const int64_t in[3] = {q.D, q.H, q.W};
  int64_t* out[3] = {&s.Do, &s.Ho, &s.Wo};
  for (int i = 0; i < 3; ++i) {
    s.stride[i] = q.stride[i], s.padding[i] = q.pad[i], s.dilation[i] = q.dil[i];
    *out[i] = (in[i] + 2 * q.pad[i] - q.dil[i] * (q.k[i] - 1) - 1) / q.stride[i] + 1;
  }
  s.groups = 1;
  return s;
}

// One thread per output element, float64 products and sums.
__global__ void reference_conv3d_kernel(conv::Conv3dShape s, const float* x, const float* w,
                                        const float* b, double* y) {
  const int64_t total = s.N * s.Do * s.Ho * s.Wo * s.C_out;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i;
    const int64_t k = rest % s.C_out;
    rest /= s.C_out;
    const int64_t q = rest % s.Wo;
    rest /= s.Wo;
    const int64_t p = rest % s.Ho;
    rest /= s.Ho;
    const int64_t z = rest % s.Do, n = rest / s.Do;
    double acc = b[k];
    for (int64_t t = 0; t < s.kD; ++t) {
      const int64_t zi = z * s.stride[0] - s.padding[0] + t * s.dilation[0];
      if (zi < 0 || zi >= s.D) continue;
      for (int64_t r = 0; r < s.kH; ++r) {
        const int64_t yi = p * s.stride[1] - s.padding[1] + r * s.dilation[1];
        if (yi < 0 || yi >= s.H) continue;
        for (int64_t u = 0; u < s.kW; ++u) {
          const int64_t xi = q * s.stride[2] - s.padding[2] + u * s.dilation[2];
          if (xi < 0 || xi >= s.W) continue;
          const float* xr = x + (((n * s.D + zi) * s.H + yi) * s.W + xi) * s.C_in;
          const float* wr = w + (((k * s.kD + t) * s.kH + r) * s.kW + u) * s.C_in;
          for (int64_t c = 0; c < s.C_in; ++c) acc += double(xr[c]) * double(wr[c]);
        }
      }
    }
    y[i] = acc;
  }
}

// A problem's data on the device (x torch.rand-like in [0, 1): a common offset in y, which
// exposes cancellation; weights and bias N(0, 1/fan_in)), an output buffer, the float64
// reference, and the split weights' workspace of the wgmma kernel.
struct Prepared {
  conv::Conv3dShape s;
  size_t ny;
  conv::Conv3dChannelsLastParams p;
  std::vector<double> ref;
  void* workspace = nullptr;

  Prepared(const Problem& q, std::mt19937& rng) : s(shape_of(q)) {
    const size_t nx = s.N * s.D * s.H * s.W * s.C_in;
    const size_t nw = s.C_out * s.kD * s.kH * s.kW * s.C_in;
    ny = s.N * s.Do * s.Ho * s.Wo * s.C_out;
    std::uniform_real_distribution<float> uni(0.f, 1.f);
    std::normal_distribution<float> gauss(0.f, 1.f / std::sqrt(float(nw / s.C_out)));
    std::vector<float> x(nx), w(nw), b(s.C_out);
    for (auto& v : x) v = uni(rng);
    for (auto& v : w) v = gauss(rng);
    for (auto& v : b) v = gauss(rng);
    p = conv::Conv3dChannelsLastParams{s, to_device(x), to_device(w), to_device(b), nullptr};
    CHECK_CUDA(cudaMalloc(&p.y, ny * 4));
    double* dref = nullptr;
    CHECK_CUDA(cudaMalloc(&dref, ny * 8));
    reference_conv3d_kernel<<<4096, 256>>>(s, p.x, p.weight, p.bias, dref);
    CHECK_CUDA(cudaGetLastError());
    ref.resize(ny);
    CHECK_CUDA(cudaMemcpy(ref.data(), dref, ny * 8, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaFree(dref));
    if (gpu::wgmma_conv_supported(s)) {
      CHECK_CUDA(cudaMalloc(&workspace, gpu::wgmma_conv_workspace_bytes(p)));
    }
  }
  ~Prepared() {
    cudaFree(const_cast<float*>(p.x));
    cudaFree(const_cast<float*>(p.weight));
    cudaFree(const_cast<float*>(p.bias));
    cudaFree(p.y);
    cudaFree(workspace);
  }
  Prepared(const Prepared&) = delete;
  Prepared& operator=(const Prepared&) = delete;

  // `launch` (returns a cudaError_t) on a poisoned (NaN) output; the output.
  template <typename Launch>
  std::vector<float> run(Launch launch) const {
    CHECK_CUDA(cudaMemset(p.y, 0xff, ny * 4));
    CHECK_CUDA(launch());
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> out(ny);
    CHECK_CUDA(cudaMemcpy(out.data(), p.y, ny * 4, cudaMemcpyDeviceToHost));
    return out;
  }
  cudaError_t wgmma() const { return gpu::wgmma_conv_launch(p, workspace, nullptr); }
};

// v rounded to the nearest TF32 value (ties to even, as cvt.rn.tf32.f32; finite v).
float tf32_rounded_host(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits += 0xfffu + ((bits >> 13) & 1u);
  bits &= ~0x1fffu;
  std::memcpy(&v, &bits, 4);
  return v;
}

// d's parameters with x rounded to TF32 (the plain TF32 products' input, as the library's
// transpose rounds it) in a new device buffer, which the caller frees.
conv::Conv3dChannelsLastParams with_tf32_x(const Prepared& d) {
  std::vector<float> x_tf32(d.s.N * d.s.D * d.s.H * d.s.W * d.s.C_in);
  CHECK_CUDA(cudaMemcpy(x_tf32.data(), d.p.x, x_tf32.size() * 4, cudaMemcpyDeviceToHost));
  for (float& v : x_tf32) v = tf32_rounded_host(v);
  conv::Conv3dChannelsLastParams tp = d.p;
  tp.x = to_device(x_tf32);
  return tp;
}

struct Errors {
  double rel_l2 = 0, rel_max = 0;
  bool finite = true;
};

Errors errors(const std::vector<float>& y, const std::vector<double>& ref) {
  double num = 0, den = 0, mx = 0, scale = 0;
  Errors e;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) e.finite = false;
    const double d = double(y[i]) - ref[i];
    num += d * d, den += ref[i] * ref[i];
    mx = std::max(mx, std::fabs(d));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  e.rel_l2 = std::sqrt(num / den);
  e.rel_max = mx / scale;
  return e;
}

// One row of the table: `kernel`'s errors, and for the timed problems its time (`launch`,
// median of 20) and TFLOP/s of `flops` useful work.
template <typename Launch>
void report(const Problem& q, const char* kernel, double flops, const Errors& e, Launch launch) {
  if (q.timed) {
    const double ms = median_ms(launch);
    std::printf("%-42s %-10s %9.3f %9.1f %10.2e %10.2e\n", q.name, kernel, ms, flops / ms * 1e-9,
                e.rel_l2, e.rel_max);
  } else {
    std::printf("%-42s %-10s %9s %9s %10.2e %10.2e\n", q.name, kernel, "", "", e.rel_l2, e.rel_max);
  }
}

// The library's launch of `cp` (d.p's problem; split or plain TF32 products) writing y NCDHW
// (y_channels_first: staged transposed, stored by tensor-map copies) against its NDHWC output:
// the same products in the same order, so bitwise the same values once transposed back.
// Reports the NCDHW launch's row as `kernel` (errors against float64; its time where q.timed),
// and the NDHWC launch's as `ndhwc_kernel` where given. Returns 0 if they match.
int check_channels_first(const Problem& q, const Prepared& d, conv::Conv3dChannelsLastParams cp,
                         const char* kernel, const char* ndhwc_kernel, double flops) {
  const conv::Conv3dShape& s = d.s;
  const auto launch_ndhwc = [&] { return gpu::wgmma_conv_launch(cp, d.workspace, nullptr); };
  const std::vector<float> ndhwc = d.run(launch_ndhwc);
  if (ndhwc_kernel != nullptr) {
    report(q, ndhwc_kernel, flops, errors(ndhwc, d.ref), launch_ndhwc);
  }
  conv::Conv3dChannelsLastParams channels_first = cp;
  channels_first.y_channels_first = true;
  const auto launch = [&] { return gpu::wgmma_conv_launch(channels_first, d.workspace, nullptr); };
  const std::vector<float> ncdhw = d.run(launch);
  const int64_t spatial = s.Do * s.Ho * s.Wo;
  std::vector<float> back(d.ny);
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t c = 0; c < s.C_out; ++c) {
      for (int64_t i = 0; i < spatial; ++i) {
        back[(n * spatial + i) * s.C_out + c] = ncdhw[(n * s.C_out + c) * spatial + i];
      }
    }
  }
  report(q, kernel, flops, errors(back, d.ref), launch);
  if (std::memcmp(back.data(), ndhwc.data(), d.ny * 4) != 0) {
    std::printf("%-42s %s FAIL (differs from the NDHWC output)\n", q.name, kernel);
    return 2;
  }
  return 0;
}

// Every problem's NCDHW outputs (check_channels_first) where the kernel writes them: split TF32,
// and plain TF32 where the kernel takes it (x as given: the tensor cores drop its low bits).
// For compute-sanitizer without the `timed` ones.
int check_channels_first_problems(const std::vector<Problem>& problems, std::mt19937& rng,
                                  bool small_only) {
  int status = 0;
  for (const Problem& q : problems) {
    if (small_only && q.timed) continue;
    const Prepared d(q, rng);
    const conv::Conv3dShape& s = d.s;
    const double flops = 2.0 * double(s.N * s.Do * s.Ho * s.Wo) * double(s.C_out) *
                         double(s.C_in * s.kD * s.kH * s.kW);
    if (!gpu::wgmma_conv_channels_first_supported(s)) continue;
    status |= check_channels_first(q, d, d.p, "ncdhw", "wgmma", flops);
    if (gpu::wgmma_conv_tf32_supported(s)) {
      conv::Conv3dChannelsLastParams tp = d.p;
      tp.tf32_products = true;
      status |= check_channels_first(q, d, tp, "tf32 ncdhw", "tf32", flops);
    }
  }
  return status;
}

// The small shapes run `reps` times each by the library's launch, every run compared bitwise
// with the first (a race or an unwritten element shows as a difference) and with float64.
int stress(const std::vector<Problem>& problems, int reps) {
  std::mt19937 rng(1);
  int status = 0;
  for (const Problem& q : problems) {
    const Prepared d(q, rng);
    std::vector<float> first;
    int differing = 0;
    double worst = 0;
    for (int r = 0; r < reps; ++r) {
      const std::vector<float> y = d.run([&] { return d.wgmma(); });
      worst = std::max(worst, errors(y, d.ref).rel_max);
      if (r == 0) {
        first = y;
      } else if (std::memcmp(y.data(), first.data(), d.ny * 4) != 0 && differing++ == 0) {
        for (size_t i = 0; i < d.ny; ++i) {
          if (std::memcmp(&y[i], &first[i], 4) != 0) {
            std::printf(
                "%-42s run %d differs first at element %zu (row %zu, channel %zu): "
                "%g vs %g (float64 %g)\n",
                q.name, r, i, i / d.s.C_out, i % d.s.C_out, y[i], first[i], d.ref[i]);
            break;
          }
        }
      }
    }
    std::printf("%-42s %d runs: %d differ from the first; worst rel max %.2e\n", q.name, reps,
                differing, worst);
    if (differing != 0 || worst > 1e-5) status = 2;
  }
  std::printf(status == 0 ? "stress passed\n" : "stress FAILED\n");
  return status;
}

// Weight gradient, float64: dw[k, tap, c] = sum over (n, outputs) of dy * x (x NDHWC), one
// thread per element of `which` (indices into dw).
__global__ void reference_wgrad_kernel(conv::Conv3dShape s, const float* x, const float* dy,
                                       const int64_t* which, int64_t count, double* dw) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < count;
       j += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = which[j];
    const int64_t c = i % s.C_in;
    int64_t rest = i / s.C_in;
    const int64_t u = rest % s.kW;
    rest /= s.kW;
    const int64_t r = rest % s.kH;
    rest /= s.kH;
    const int64_t t = rest % s.kD, k = rest / s.kD;
    double acc = 0;
    for (int64_t n = 0; n < s.N; ++n) {
      for (int64_t z = 0; z < s.Do; ++z) {
        const int64_t zi = z * s.stride[0] - s.padding[0] + t * s.dilation[0];
        if (zi < 0 || zi >= s.D) continue;
        for (int64_t p = 0; p < s.Ho; ++p) {
          const int64_t yi = p * s.stride[1] - s.padding[1] + r * s.dilation[1];
          if (yi < 0 || yi >= s.H) continue;
          for (int64_t q = 0; q < s.Wo; ++q) {
            const int64_t xi = q * s.stride[2] - s.padding[2] + u * s.dilation[2];
            if (xi < 0 || xi >= s.W) continue;
            acc += double(dy[(((n * s.Do + z) * s.Ho + p) * s.Wo + q) * s.C_out + k]) *
                   double(x[(((n * s.D + zi) * s.H + yi) * s.W + xi) * s.C_in + c]);
          }
        }
      }
    }
    dw[j] = acc;
  }
}

// The "+moments" row (see the top of the file) of the library's launch with `base`'s
// parameters (d.p, or the plain TF32 products' on x rounded to TF32: `label` "tf32+moments");
// returns non-zero on a failure.
int check_relu_moments(const Problem& q, const Prepared& d, double flops,
                       const conv::Conv3dChannelsLastParams& base, const char* label = "+moments") {
  const conv::Conv3dShape& s = d.s;
  const int64_t spatial = s.Do * s.Ho * s.Wo, items = s.N * s.C_out;
  conv::Conv3dChannelsLastParams p = base;
  CHECK_CUDA(cudaMalloc(&p.relu_channel_moments, items * sizeof(norm::Moments)));
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, gpu::wgmma_conv_workspace_bytes(p)));
  const auto launch = [&] { return gpu::wgmma_conv_launch(p, workspace, nullptr); };
  std::vector<norm::Moments> got[2];
  std::vector<float> y;
  for (auto& g : got) {
    g.resize(items);
    CHECK_CUDA(cudaMemset(p.relu_channel_moments, 0xff, items * sizeof(norm::Moments)));
    y = d.run(launch);
    CHECK_CUDA(cudaMemcpy(g.data(), p.relu_channel_moments, items * sizeof(norm::Moments),
                          cudaMemcpyDeviceToHost));
  }
  const bool same = std::memcmp(got[0].data(), got[1].data(), items * sizeof(norm::Moments)) == 0;
  Errors e;
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t c = 0; c < s.C_out; ++c) {
      double sum = 0, m2 = 0;
      const auto relu_y = [&](int64_t i) {
        return std::max(double(y[(n * spatial + i) * s.C_out + c]), 0.0);
      };
      for (int64_t i = 0; i < spatial; ++i) sum += relu_y(i);
      const double mean = sum / double(spatial);
      for (int64_t i = 0; i < spatial; ++i) m2 += (relu_y(i) - mean) * (relu_y(i) - mean);
      const norm::Moments& g = got[0][n * s.C_out + c];
      const double mean_err =
          std::fabs(g.mean - mean) / (std::fabs(mean) + std::sqrt(m2 / spatial) + 1e-30);
      const double m2_err = std::fabs(g.m2 - m2) / (m2 + 1e-30);
      if (!std::isfinite(g.mean) || !std::isfinite(g.m2)) e.finite = false;
      e.rel_l2 = std::max(e.rel_l2, mean_err);  // (the columns: mean, M2)
      e.rel_max = std::max(e.rel_max, m2_err);
    }
  }
  report(q, label, flops, e, launch);
  CHECK_CUDA(cudaFree(p.relu_channel_moments));
  CHECK_CUDA(cudaFree(workspace));
  if (!e.finite || !same || e.rel_l2 > 1e-5 || e.rel_max > 1e-5) {
    std::printf("%-42s %s FAIL%s\n", q.name, label, same ? "" : " (runs differ)");
    return 2;
  }
  return 0;
}

// The weight gradients (wgmma, x NCDHW; CUTLASS's sm80, x NDHWC) of the stride-1 problems,
// against float64 on every element (at most 8192 sampled ones for the timed problems).
int check_wgrad(const std::vector<Problem>& problems, std::mt19937& rng) {
  using Wgrad = gpu::SplitTf32Conv3dWgrad<gpu::SplitTf32WideTile>;
  int status = 0;
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (const Problem& q : problems) {
    const conv::Conv3dShape s = shape_of(q);
    if (!gpu::wgmma_wgrad_supported(s)) {
      std::printf("%-42s wgrad: shape not supported (stride, kW, W)\n", q.name);
      continue;
    }
    const size_t nx = s.N * s.D * s.H * s.W * s.C_in, ny = s.N * s.Do * s.Ho * s.Wo * s.C_out;
    const size_t nw = s.C_out * s.kD * s.kH * s.kW * s.C_in;
    std::uniform_real_distribution<float> uni(0.f, 1.f);
    std::normal_distribution<float> gauss(0.f, 1.f);
    std::vector<float> x(nx), x_ncdhw(nx), dy(ny);
    for (auto& v : x) v = uni(rng);
    for (auto& v : dy) v = gauss(rng);
    const int64_t spatial = s.D * s.H * s.W;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t i = 0; i < spatial; ++i)
        for (int64_t c = 0; c < s.C_in; ++c)
          x_ncdhw[(n * s.C_in + c) * spatial + i] = x[(n * spatial + i) * s.C_in + c];
    float* dx = to_device(x);
    float* dx_ncdhw = to_device(x_ncdhw);
    float* ddy = to_device(dy);
    float* dw = nullptr;
    CHECK_CUDA(cudaMalloc(&dw, nw * 4));
    // Sampled elements and their float64 values.
    std::vector<int64_t> which;
    const size_t step = std::max<size_t>(1, nw / 8192);
    for (size_t i = 0; i < nw; i += step) which.push_back(static_cast<int64_t>(i));
    int64_t* dwhich = to_device(which);
    double* dref = nullptr;
    CHECK_CUDA(cudaMalloc(&dref, which.size() * 8));
    reference_wgrad_kernel<<<256, 64>>>(s, dx, ddy, dwhich, which.size(), dref);
    CHECK_CUDA(cudaGetLastError());
    std::vector<double> ref(which.size());
    CHECK_CUDA(cudaMemcpy(ref.data(), dref, which.size() * 8, cudaMemcpyDeviceToHost));
    const double flops = 2.0 * double(ny) * double(s.kD * s.kH * s.kW * s.C_in);
    auto measure = [&](const char* kernel, auto launch) {
      CHECK_CUDA(cudaMemset(dw, 0xff, nw * 4));
      CHECK_CUDA(launch());
      CHECK_CUDA(cudaDeviceSynchronize());
      std::vector<float> out(nw), picked;
      CHECK_CUDA(cudaMemcpy(out.data(), dw, nw * 4, cudaMemcpyDeviceToHost));
      for (int64_t i : which) picked.push_back(out[i]);
      const Errors e = errors(picked, ref);
      report(q, kernel, flops, e, launch);
      return e;
    };
    const conv::Conv3dWeightGradChannelsLastParams cp{s, dx, ddy, dw};
    const int slices = Wgrad::slices(s, sms);
    Errors sm80{};
    bool have_sm80 = false;
    if (Wgrad::can_implement(cp, slices)) {
      void* ws = nullptr;
      CHECK_CUDA(cudaMalloc(&ws, std::max<size_t>(1, Wgrad::workspace_bytes(cp, slices))));
      sm80 = measure("sm80 wgrad", [&] { return Wgrad::launch(cp, slices, ws, nullptr); });
      have_sm80 = true;
      CHECK_CUDA(cudaFree(ws));
    }
    void* ws = nullptr;
    CHECK_CUDA(cudaMalloc(&ws, gpu::wgmma_wgrad_workspace_bytes(s)));
    const Errors e = measure("wgmma wgrad", [&] {
      return gpu::wgmma_wgrad_launch(s, dx_ncdhw, ddy, {}, dw, ws, /*split=*/true, nullptr);
    });
    // Plain TF32 products (the library's allow_tf32 mode): time and error, for the record.
    const Errors tf32 = measure("wgmma tf32", [&] {
      return gpu::wgmma_wgrad_launch(s, dx_ncdhw, ddy, {}, dw, ws, /*split=*/false, nullptr);
    });
    if (!tf32.finite || tf32.rel_l2 > 1e-3) {
      std::printf("%-42s wgmma tf32 wgrad FAIL\n", q.name);
      status = 2;
    }
    const bool ok =
        e.finite && (have_sm80 ? e.rel_l2 <= 2 * sm80.rel_l2 && e.rel_max <= 2 * sm80.rel_max
                               : e.rel_l2 <= 1e-6 && e.rel_max <= 1e-6);
    if (!ok) {
      std::printf("%-42s wgmma wgrad FAIL\n", q.name);
      status = 2;
    }
    for (void* ptr :
         {static_cast<void*>(dx), static_cast<void*>(dx_ncdhw), static_cast<void*>(ddy),
          static_cast<void*>(dw), static_cast<void*>(dwhich), static_cast<void*>(dref), ws}) {
      CHECK_CUDA(cudaFree(ptr));
    }
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  using Wide = gpu::SplitTf32Conv3dFprop<gpu::SplitTf32WideTile>;
  using Narrow = gpu::SplitTf32Conv3dFprop<gpu::SplitTf32NarrowTile>;
  // clang-format off
  const std::vector<Problem> problems = {
    {"headline forward (transposed as forward)", 16, 64, 32, 32, 32, 128, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, true},
    {"headline input gradient",                  16, 128, 34, 34, 34, 64, {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, true},
    {"C_in 36, C_out 200",                        2, 36, 7, 9, 11, 200,  {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false},
    {"C_in 4, C_out 12, dilation 2",              1, 4, 5, 6, 7, 12,     {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {2, 2, 2}, false},
    {"kernel 3x1x2, N 3",                         3, 8, 9, 10, 11, 16,   {3, 1, 2}, {1, 0, 1}, {1, 1, 1}, {1, 1, 1}, false},
    {"stride 2",                                  2, 16, 12, 12, 13, 32, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}, {1, 1, 1}, false},
    {"C_in 100, C_out 68",                        1, 100, 4, 5, 6, 68,   {3, 3, 3}, {2, 1, 0}, {1, 1, 1}, {1, 2, 1}, false},
    {"C_out 256, 1x1x1",                          2, 32, 6, 7, 8, 256,   {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, false},
    // 167 row tiles x 2 channel tiles (128 + 72): more tiles than SMs, a partial last one.
    {"C_in 8, C_out 200 on 22^3, N 2",            2, 8, 22, 22, 22, 200, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false},
    // 4 positions a sample: a box of 32 rows of the NCDHW stores spans 8 samples.
    {"N 7 of 4 positions (1x2x2), C_out 12",      7, 8, 1, 2, 2, 12,     {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, false},
    // Unpadded 3x3x3 (an input gradient's family) on odd sizes: rows of 9, samples of 315.
    {"36 -> 20 on 5x7x9, N 3, no padding",        3, 36, 5, 7, 9, 20,    {3, 3, 3}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, false},
  };
  // The weight gradient's (stride 1, W a multiple of 4), besides the headline forward's.
  const std::vector<Problem> wgrad_problems = {
    problems[0],
    {"wgrad C_in 36, C_out 200, pad 1",           2, 36, 7, 9, 12, 200,  {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false},
    {"wgrad 3x3x2, dilation 2, pad 2",            1, 8, 5, 6, 8, 12,     {3, 3, 2}, {2, 2, 2}, {1, 1, 1}, {2, 2, 2}, false},
    {"wgrad W 40, C_in 100, C_out 68",            1, 100, 3, 4, 40, 68,  {3, 3, 3}, {2, 1, 0}, {1, 1, 1}, {1, 2, 1}, false},
    {"wgrad k2 (16 -> 32 on 6x6x8, pad 1)",       1, 16, 6, 6, 8, 32,    {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false},
    // Every (kW, dilation_w) the kernel specialises: 1x1x1; 3 taps dilated 2; 2 taps dilated 3, 4.
    {"wgrad 1x1x1 (16 -> 24)",                    2, 16, 4, 5, 8, 24,    {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, false},
    {"wgrad 3x3x3, dilation 2",                   1, 8, 6, 6, 12, 16,    {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {2, 2, 2}, false},
    {"wgrad 1x1x2, dilation 3",                   2, 8, 3, 4, 8, 8,      {1, 1, 2}, {0, 0, 1}, {1, 1, 1}, {1, 1, 3}, false},
    {"wgrad 2x2x2, dilation (1, 3, 4)",           1, 12, 5, 7, 16, 20,   {2, 2, 2}, {0, 1, 2}, {1, 1, 1}, {1, 3, 4}, false},
    // 35 K blocks per pair of taps, 3 per block on 132 SMs: blocks that end one pair and start the next.
    {"wgrad 3x3x3 on 5x7x8 (blocks across pairs)", 1, 8, 5, 7, 8, 16,     {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false},
    problems[7],
  };
  const std::vector<Problem> small = {
    {"k2 input gradient (32 -> 16 on 7^3)",       1, 32, 7, 7, 7, 16,    {2, 2, 2}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, false},
    {"k2 forward (16 -> 32 on 6^3, pad 1)",       1, 16, 6, 6, 6, 32,    {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false},
    {"k3 wide (64 -> 128 on 6^3, pad 2)",         2, 64, 6, 6, 6, 128,   {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, false},
    problems[2],
  };
  // clang-format on
  if (!gpu::wgmma_conv_available()) {
    std::printf(
        "the wgmma convolution does not run on this device (needs sm_90 and sm_90a code)\n");
    return 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "--stress") == 0) {
    return stress(small, argc > 2 ? std::atoi(argv[2]) : 300);
  }
  if (argc > 1 && std::strcmp(argv[1], "--moments-small") == 0) {  // (for compute-sanitizer)
    std::mt19937 rng(0);
    int status = 0;
    for (const Problem& q : problems) {
      if (q.timed) continue;
      const Prepared d(q, rng);
      if (gpu::wgmma_conv_relu_moments_supported(d.s) && check_relu_moments(q, d, 0, d.p) != 0) {
        status = 2;
      }
      // With plain TF32 products (the im2col tiles, whose 128-channel tiles' epilogue walks
      // the staged columns for the moments), on x rounded to TF32.
      if (gpu::wgmma_conv_tf32_supported(d.s)) {
        conv::Conv3dChannelsLastParams tp = with_tf32_x(d);
        tp.tf32_products = true;
        if (check_relu_moments(q, d, 0, tp, "tf32+moments") != 0) {
          status = 2;
        }
        CHECK_CUDA(cudaFree(const_cast<float*>(tp.x)));
      }
    }
    std::printf(status == 0 ? "all passed\n" : "FAILED\n");
    return status;
  }
  if (argc > 1 && std::strcmp(argv[1], "--profile-tile-moments") == 0) {
    // The headline forward's plain TF32 256 x 128 tile (a block per SM) without the moments,
    // then with them (tile_moments): the median of 20 times each (median_ms), after one launch
    // each for Nsight Compute (--kernel-name regex:split_tf32_wgmma_conv3d_kernel ...).
    std::mt19937 rng(0);
    const Prepared d(problems[0], rng);
    gpu::WgmmaConvParams wp = gpu::wgmma_conv_params(d.p, d.workspace);
    wp.b_bn = 128;
    wp.b_parts = 1;
    wp.b_k_permuted = false;
    CHECK_CUDA(gpu::split_tf32_weights(d.p, wp, nullptr));
    using Tile = gpu::WgmmaConvTile<128, 4, false, true, 1, 2>;
    const auto launch = [&] { return gpu::launch_split_tf32_wgmma_conv3d<Tile>(wp, nullptr); };
    float2* tile_moments = nullptr;
    CHECK_CUDA(cudaMalloc(&tile_moments, (d.ny / d.s.C_out + 63) / 64 * 2 * d.s.C_out * 8));
    for (const bool moments : {false, true}) {
      wp.tile_moments = moments ? tile_moments : nullptr;
      wp.spatial = d.s.Do * d.s.Ho * d.s.Wo;
      CHECK_CUDA(launch());  // (the one for Nsight Compute)
      std::printf("256 x 128 tile%s: %.3f ms (median of 20)\n", moments ? " +tile moments" : "",
                  median_ms(launch));
    }
    CHECK_CUDA(cudaFree(tile_moments));
    return 0;
  }
  if (argc > 1 &&
      (std::strcmp(argv[1], "--ncdhw") == 0 || std::strcmp(argv[1], "--ncdhw-small") == 0)) {
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    std::mt19937 rng(0);
    const int status =
        check_channels_first_problems(problems, rng, std::strcmp(argv[1], "--ncdhw-small") == 0);
    std::printf(status == 0 ? "all passed\n" : "FAILED\n");
    return status;
  }
  const bool wgrad_only = argc > 1 && std::strcmp(argv[1], "--wgrad") == 0;
  if (wgrad_only || (argc > 1 && std::strcmp(argv[1], "--wgrad-small") == 0)) {
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    std::mt19937 rng(0);
    std::vector<Problem> chosen;
    for (const Problem& q : wgrad_problems) {
      if (wgrad_only || !q.timed) chosen.push_back(q);
    }
    const int status = check_wgrad(chosen, rng);
    std::printf(status == 0 ? "all passed\n" : "FAILED\n");
    return status;
  }
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // (rows as they come: a run cut short keeps them)
  std::mt19937 rng(0);
  int status = 0;
  std::printf("%-42s %-10s %9s %9s %10s %10s\n", "problem", "kernel", "ms", "TFLOP/s", "rel L2",
              "rel max");
  for (const Problem& q : problems) {
    const Prepared d(q, rng);
    const conv::Conv3dShape& s = d.s;
    const double flops = 2.0 * double(s.N * s.Do * s.Ho * s.Wo) * double(s.C_out) *
                         double(s.C_in * s.kD * s.kH * s.kW);
    // Runs `launch`, reports its errors (and time, for the timed problems).
    auto measure = [&](const char* kernel, auto launch) {
      const Errors e = errors(d.run(launch), d.ref);
      report(q, kernel, flops, e, launch);
      return e;
    };

    // CUTLASS sm80 (where it can run the shape)
    Errors cutlass_err;
    bool have_cutlass = false;
    const bool narrow = s.C_out <= 64;
    if (narrow ? Narrow::can_implement(d.p) : Wide::can_implement(d.p)) {
      cutlass_err = measure("sm80", [&] {
        return narrow ? Narrow::launch(d.p, nullptr) : Wide::launch(d.p, nullptr);
      });
      have_cutlass = true;
    }

    // wgmma: the library's choice (wgmma_conv_launch), then each tile alone
    if (!gpu::wgmma_conv_supported(s)) {
      std::printf("%-42s wgmma: shape not supported\n", q.name);
      status = 1;
      continue;
    }
    auto check = [&](const char* kernel, auto launch) {
      const Errors e = measure(kernel, launch);
      const bool ok = e.finite && (have_cutlass ? e.rel_l2 <= 2 * cutlass_err.rel_l2 &&
                                                      e.rel_max <= 2 * cutlass_err.rel_max
                                                : e.rel_l2 <= 1e-6 && e.rel_max <= 1e-6);
      if (!ok) {
        std::printf("%-42s %s FAIL\n", q.name, kernel);
        status = 2;
      }
    };
    check("wgmma", [&] { return d.wgmma(); });
    if (gpu::wgmma_conv_channels_first_supported(s) &&
        check_channels_first(q, d, d.p, "ncdhw", nullptr, flops) != 0) {
      status = 2;
    }
    if (gpu::wgmma_conv_relu_moments_supported(s) && check_relu_moments(q, d, flops, d.p) != 0) {
      status = 2;
    }
    // The tiles alone, each on the weights split beforehand for its width and products (2
    // parts: split TF32, 1: plain TF32; their times exclude the split), in d.workspace.
    const auto tile_params = [&](const conv::Conv3dChannelsLastParams& cp, int bn, int parts) {
      gpu::WgmmaConvParams wp = gpu::wgmma_conv_params(cp, d.workspace);
      wp.b_bn = bn;
      wp.b_parts = parts;
      wp.b_k_permuted = parts == 2;
      CHECK_CUDA(gpu::split_tf32_weights(cp, wp, nullptr));
      return wp;
    };
    const gpu::WgmmaConvParams wp128 = tile_params(d.p, 128, 2);
    check("128x128/3", [&] {
      return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<128, 3>>(wp128, nullptr);
    });
    const gpu::WgmmaConvParams wp64 = tile_params(d.p, 64, 2);
    check("128x64/4", [&] {
      return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<64, 4>>(wp64, nullptr);
    });
    check("128x64/5", [&] {
      return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<64, 5>>(wp64, nullptr);
    });
    // Plain TF32 products (one per product, as cuDNN's with TF32 allowed; x rounded to TF32
    // first, the weights by the split): the kernel's other mode, measured against cuDNN's
    // TF32 convolution (benchmarks/conv_variants.py) and not used by the library; errors of
    // TF32's order, bounded loosely here.
    conv::Conv3dChannelsLastParams tp = with_tf32_x(d);
    auto check_tf32 = [&](const char* kernel, auto launch) {
      const Errors e = measure(kernel, launch);
      if (!e.finite || e.rel_l2 > 1e-3 || e.rel_max > 4e-3) {
        std::printf("%-42s %s FAIL\n", q.name, kernel);
        status = 2;
      }
    };
    // The activations by the producer warpgroup's copies, then by the im2col copies of the
    // tensor memory accelerator: the same products in the same order, so bitwise the same.
    const auto check_tma_same = [&](const char* kernel, auto copies, auto tma) {
      check_tf32(kernel, tma);
      const std::vector<float> by_copies = d.run(copies), by_tma = d.run(tma);
      if (std::memcmp(by_copies.data(), by_tma.data(), d.ny * 4) != 0) {
        std::printf("%-42s %s FAIL (differs from the producer's copies)\n", q.name, kernel);
        status = 2;
      }
    };
    const gpu::WgmmaConvParams tw128 = tile_params(tp, 128, 1);
    const auto tf32_128 = [&] {
      return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<128, 4, false>>(tw128, nullptr);
    };
    check_tf32("tf32 128x128/4", tf32_128);
    if (gpu::x_im2col_map_supported(tw128)) {
      check_tma_same("tf32 tma 128x128/4", tf32_128, [&] {
        return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<128, 4, false, true>>(
            tw128, nullptr);
      });
      // Clusters of 4 blocks sharing each weight tile (multicast copies; 2: below).
      check_tma_same("tf32 tma 128x128/4 c4", tf32_128, [&] {
        return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<128, 4, false, true, 4>>(
            tw128, nullptr);
      });
      // Tiles of 256 rows: each weight tile serves twice the products.
      check_tma_same("tf32 tma 256x128/4", tf32_128, [&] {
        return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<128, 4, false, true, 1, 2>>(
            tw128, nullptr);
      });
      check_tma_same("tf32 tma 256x128/4 c2", tf32_128, [&] {
        return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<128, 4, false, true, 2, 2>>(
            tw128, nullptr);
      });
      // The same with the pipelined forward's side work (conv_side_work.cuh) for the whole
      // batch in one launch: x's transpose and the normalisation (a zero affine) into scratch
      // buffers beside the products (the library's pipeline spreads 3/4 of it over its
      // launches). The time says what the side work costs the convolution; its output must not
      // change.
      const int64_t in_spatial = s.D * s.H * s.W, out_spatial = s.Do * s.Ho * s.Wo;
      if (gpu::conv_side_work_supported(s.C_in, in_spatial) &&
          gpu::conv_side_work_supported(s.C_out, out_spatial)) {
        const size_t nx = static_cast<size_t>(s.N * in_spatial * s.C_in);
        float *x_ncdhw = nullptr, *x_ndhwc = nullptr, *out = nullptr;
        norm::CenteredAffine<float>* affine = nullptr;
        CHECK_CUDA(cudaMalloc(&x_ncdhw, nx * 4));
        CHECK_CUDA(cudaMalloc(&x_ndhwc, nx * 4));
        CHECK_CUDA(cudaMalloc(&out, d.ny * 4));
        CHECK_CUDA(cudaMalloc(&affine, s.N * s.C_out * sizeof(*affine)));
        CHECK_CUDA(cudaMemcpy(x_ncdhw, tp.x, nx * 4, cudaMemcpyDeviceToDevice));
        CHECK_CUDA(cudaMemset(affine, 0, s.N * s.C_out * sizeof(*affine)));
        gpu::WgmmaConvParams with_side = tw128;
        with_side.side = gpu::ConvSideWork{x_ncdhw, x_ndhwc, s.C_in,  in_spatial,  0, s.N, tw128.y,
                                           affine,  out,     s.C_out, out_spatial, 0, s.N};
        check_tma_same("tf32 tma 256x128/4 c2 +side", tf32_128, [&] {
          return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<128, 4, false, true, 2, 2>>(
              with_side, nullptr);
        });
        CHECK_CUDA(cudaFree(x_ncdhw));
        CHECK_CUDA(cudaFree(x_ndhwc));
        CHECK_CUDA(cudaFree(out));
        CHECK_CUDA(cudaFree(affine));
      }
      check_tma_same("tf32 tma 256x128/4 c4", tf32_128, [&] {
        return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<128, 4, false, true, 4, 2>>(
            tw128, nullptr);
      });
      // The staged output in two buffers (one per consumer warpgroup), which leaves room for 3
      // stages: alone, and both layouts with the moments of their parts (tile_moments; the
      // kernel only, without relu_moments_of_tiles_kernel after it, where the staging in one
      // buffer serializes the consumer warpgroups).
      check_tma_same("tf32 tma 256x128/3 c2 2buf", tf32_128, [&] {
        return gpu::launch_split_tf32_wgmma_conv3d<
            gpu::WgmmaConvTile<128, 3, false, true, 2, 2, 2>>(tw128, nullptr);
      });
      if (out_spatial >= 128) {
        float2* tile_moments = nullptr;
        const int64_t parts = (d.ny / s.C_out + 63) / 64;
        CHECK_CUDA(cudaMalloc(&tile_moments, parts * 2 * s.C_out * sizeof(float2)));
        gpu::WgmmaConvParams with_moments = tw128;
        with_moments.tile_moments = tile_moments;
        with_moments.spatial = out_spatial;
        check_tma_same("tf32 tma 256x128/4 c2 +tile moments", tf32_128, [&] {
          return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<128, 4, false, true, 2, 2>>(
              with_moments, nullptr);
        });
        std::vector<float2> one(parts * 2 * s.C_out);
        CHECK_CUDA(cudaMemcpy(one.data(), tile_moments, one.size() * sizeof(float2),
                              cudaMemcpyDeviceToHost));
        // Another tiling's moments, bitwise the same as the first's (segment 1 of a part that
        // does not straddle samples is never written: the rest compared).
        const auto check_same_moments = [&](const char* kernel) {
          std::vector<float2> two(one.size());
          CHECK_CUDA(cudaMemcpy(two.data(), tile_moments, two.size() * sizeof(float2),
                                cudaMemcpyDeviceToHost));
          bool same = true;
          for (int64_t part = 0; part < parts; ++part) {
            const int64_t m0 = part * 64, rows = std::min<int64_t>(64, d.ny / s.C_out - m0);
            const bool straddles = (m0 / out_spatial + 1) * out_spatial - m0 < rows;
            for (int seg = 0; seg < (straddles ? 2 : 1); ++seg) {
              same = same &&
                     std::memcmp(&one[(part * 2 + seg) * s.C_out], &two[(part * 2 + seg) * s.C_out],
                                 s.C_out * sizeof(float2)) == 0;
            }
          }
          if (!same) {
            std::printf("%-42s %s FAIL (moments differ from c2's)\n", q.name, kernel);
            status = 2;
          }
        };
        check_tma_same("tf32 tma 256x128/3 c2 2buf +tile moments", tf32_128, [&] {
          return gpu::launch_split_tf32_wgmma_conv3d<
              gpu::WgmmaConvTile<128, 3, false, true, 2, 2, 2>>(with_moments, nullptr);
        });
        check_same_moments("tf32 tma 256x128/3 c2 2buf +tile moments");
        check_tma_same("tf32 tma 256x128/4 +tile moments", tf32_128, [&] {
          return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<128, 4, false, true, 1, 2>>(
              with_moments, nullptr);
        });
        check_same_moments("tf32 tma 256x128/4 +tile moments");
        CHECK_CUDA(cudaFree(tile_moments));
      }
    }
    const gpu::WgmmaConvParams tw64 = tile_params(tp, 64, 1);
    const auto tf32_64 = [&] {
      return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<64, 6, false>>(tw64, nullptr);
    };
    check_tf32("tf32 128x64/6", tf32_64);
    if (gpu::x_im2col_map_supported(tw64)) {
      check_tma_same("tf32 tma 128x64/8 c4", tf32_64, [&] {
        return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<64, 8, false, true, 4>>(
            tw64, nullptr);
      });
      check_tma_same("tf32 tma 256x64/5 c2", tf32_64, [&] {
        return gpu::launch_split_tf32_wgmma_conv3d<gpu::WgmmaConvTile<64, 5, false, true, 2, 2>>(
            tw64, nullptr);
      });
    }
    // The library's plain TF32 launch (tf32_products: the tiles above of 256 rows in clusters
    // of 2), with the moments (parts of 64 rows).
    tp.tf32_products = true;
    if (gpu::wgmma_conv_tf32_supported(s) &&
        (check_relu_moments(q, d, flops, tp, "tf32+moments") != 0 ||
         (gpu::wgmma_conv_channels_first_supported(s) &&
          check_channels_first(q, d, tp, "tf32 ncdhw", "tf32", flops) != 0))) {
      status = 2;
    }
    CHECK_CUDA(cudaFree(const_cast<float*>(tp.x)));
  }
  const int wgrad_status = check_wgrad(wgrad_problems, rng);
  status = status != 0 ? status : wgrad_status;
  std::printf(status == 0 ? "all passed\n" : "FAILED\n");
  return status;
}
