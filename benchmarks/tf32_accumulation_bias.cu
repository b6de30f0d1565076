// Does the tensor cores' float32 accumulation round toward zero? Each thread of a warp chains
// `steps` mma.sync m16n8k8 TF32 products into its float32 accumulators, as the one-pass Conv3d
// forward chains its split-TF32 terms (33 products per output at the Conv3d headline), on
// operands with at most 11 significant bits (exact in TF32, so every product is exact and only
// the accumulation rounds). The sums are compared with float64 sums of the same products, and
// with float32 FFMA chains in the same order (rounding to nearest, on the host). Printed: the mean
// signed and the RMS relative error of the sums, per operand distribution: a mean near -RMS says
// "toward zero", a mean near 0 says "to nearest". (The one-pass forward's scale-test miss is
// modelled by a uniform shrink of ~4.5e-7 of the convolution output:
// benchmarks/h200-2026-11-29-tile-barrier/notes.txt, section 4.) Run on an H200 on 2026-11-29:
// toward zero (benchmarks/h200-2026-11-29-k-step-parts/, section 2).
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a tf32_accumulation_bias.cu \
//     -o tf32_accumulation_bias && ./tf32_accumulation_bias
#include "standalone_cuda.cuh"

#include <cmath>
#include <cstdint>
#include <random>

// a: [warps][steps][32 lanes][4], b: [warps][steps][32 lanes][2] (mma.sync fragments, TF32
// values stored as float), d: [warps][32 lanes][4], the sums.
__global__ void chains(const float* a, const float* b, int steps, float* d) {
  const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s = 0; s < steps; ++s) {
    const float* as = a + ((static_cast<size_t>(warp) * steps + s) * 32 + lane) * 4;
    const float* bs = b + ((static_cast<size_t>(warp) * steps + s) * 32 + lane) * 2;
    const uint32_t a0 = __float_as_uint(as[0]), a1 = __float_as_uint(as[1]);
    const uint32_t a2 = __float_as_uint(as[2]), a3 = __float_as_uint(as[3]);
    const uint32_t b0 = __float_as_uint(bs[0]), b1 = __float_as_uint(bs[1]);
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  for (int e = 0; e < 4; ++e) {
    d[(static_cast<size_t>(warp) * 32 + lane) * 4 + e] = acc[e];
  }
}

// Fragment layouts of mma.m16n8k8 (PTX ISA), lane = 4 * group + quad:
//   A (16 x 8): a0 (row group, col quad), a1 (group + 8, quad), a2 (group, quad + 4),
//               a3 (group + 8, quad + 4);
//   B (8 x 8):  b0 (k quad, n group), b1 (k quad + 4, n group);
//   D (16 x 8): d0 (row group, col 2 quad), d1 (group, 2 quad + 1), d2 (group + 8, 2 quad),
//               d3 (group + 8, 2 quad + 1).
struct Fragments {
  std::vector<float> a, b;  // as the kernel reads them
  int warps, steps;
  float A(int w, int s, int row, int k) const {
    const int lane = 4 * (row % 8) + k % 4;
    const int e = (row >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0);
    return a[((static_cast<size_t>(w) * steps + s) * 32 + lane) * 4 + e];
  }
  float B(int w, int s, int k, int col) const {
    const int lane = 4 * col + k % 4;
    return b[((static_cast<size_t>(w) * steps + s) * 32 + lane) * 2 + (k >= 4 ? 1 : 0)];
  }
};

// A value with at most 11 significant bits (exact in TF32): an integer in [512, 1024) times a
// power of two, with the sign given.
float eleven_bits(std::mt19937& rng, int exponent, bool negative) {
  const int m = 512 + static_cast<int>(rng() % 512);
  const float v = std::ldexp(static_cast<float>(m), exponent - 10);
  return negative ? -v : v;
}

void run(const char* name, bool mixed_signs, int steps, int warps) {
  std::mt19937 rng(1234);
  Fragments f{std::vector<float>(static_cast<size_t>(warps) * steps * 32 * 4),
              std::vector<float>(static_cast<size_t>(warps) * steps * 32 * 2), warps, steps};
  // The one-pass forward's magnitudes: x ~ U(0, 1), weights ~ 0.1, the split's small terms
  // ~2^-11 of them; here the exponents vary over 6 octaves.
  for (float& v : f.a) {
    v = eleven_bits(rng, -static_cast<int>(rng() % 6), mixed_signs && (rng() & 1));
  }
  for (float& v : f.b) {
    v = eleven_bits(rng, -3 - static_cast<int>(rng() % 6), mixed_signs && (rng() & 1));
  }
  float* const a = to_device(f.a);
  float* const b = to_device(f.b);
  float* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, static_cast<size_t>(warps) * 32 * 4 * sizeof(float)));
  chains<<<warps / 4, 128>>>(a, b, steps, d);
  CHECK_CUDA(cudaGetLastError());
  std::vector<float> out(static_cast<size_t>(warps) * 32 * 4);
  CHECK_CUDA(cudaMemcpy(out.data(), d, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double mma_mean = 0.0, mma_sq = 0.0, ffma_mean = 0.0, ffma_sq = 0.0;
  size_t count = 0;
  for (int w = 0; w < warps; ++w) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int e = 0; e < 4; ++e) {
        const int row = lane / 4 + (e >= 2 ? 8 : 0);
        const int col = 2 * (lane % 4) + (e & 1);
        double exact = 0.0;
        float ffma = 0.0f;
        for (int s = 0; s < steps; ++s) {
          for (int k = 0; k < 8; ++k) {
            const float p = f.A(w, s, row, k) * f.B(w, s, k, col);  // exact: 22 bits
            exact += static_cast<double>(p);
            ffma = std::fmaf(f.A(w, s, row, k), f.B(w, s, k, col), ffma);
          }
        }
        if (exact == 0.0) {
          continue;
        }
        const double got = out[(static_cast<size_t>(w) * 32 + lane) * 4 + e];
        const double r_mma = (got - exact) / std::fabs(exact);
        const double r_ffma = (static_cast<double>(ffma) - exact) / std::fabs(exact);
        // (Signed toward the exact value's sign: negative = smaller in magnitude.)
        const double sign = exact > 0.0 ? 1.0 : -1.0;
        mma_mean += sign * r_mma;
        mma_sq += r_mma * r_mma;
        ffma_mean += sign * r_ffma;
        ffma_sq += r_ffma * r_ffma;
        ++count;
      }
    }
  }
  std::printf(
      "%-22s %2d steps: tensor cores mean %+.3e rms %.3e | float32 FFMA mean %+.3e rms %.3e "
      "(%zu sums; mean < 0: smaller in magnitude)\n",
      name, steps, mma_mean / count, std::sqrt(mma_sq / count), ffma_mean / count,
      std::sqrt(ffma_sq / count), count);
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  CHECK_CUDA(cudaFree(d));
}

int main() {
  const int warps = 4 * 512;
  for (const int steps : {1, 11, 33, 64}) {
    run("positive operands", false, steps, warps);
  }
  for (const int steps : {11, 33}) {
    run("mixed signs", true, steps, warps);
  }
  return 0;
}
