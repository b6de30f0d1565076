// Microbenchmark: how fast do chains of wgmma m64nNk8 TF32 products (A from registers, B from
// shared memory) run per SM, with the one-pass forward's step pattern (3 terms x MT m64 tiles,
// one commit group per term) and without it. Every block runs `steps` steps on its 2 warpgroups;
// the grid is blocks/SM x the SMs. Build and run on an sm_90 device (notes.txt, section 7; its
// output: call2-wgmma-rate.txt):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a wgmma_rate.cu -o wgmma_rate
// wgmma_wrappers.inc holds one wrapper per N (the accumulators' registers listed out) and the
// other wgmma helpers (moved there on 2026-11-29 for k_step_parts.cu, unchanged).
// (Mode 2 is serialized by ptxas, C7511, for want of registers at 2 blocks per SM: it measures
// the products one after another, not two steps in flight.)
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                       \
  do {                                                                 \
    cudaError_t e = (x);                                               \
    if (e != cudaSuccess) {                                            \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      exit(1);                                                         \
    }                                                                  \
  } while (0)

#include "wgmma_wrappers.inc"

__device__ __forceinline__ void split(float v, uint32_t& hi, uint32_t& lo) {
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(v));
  lo = __float_as_uint(v - __uint_as_float(hi));
}

// kMode 0: wait<0> each step; 1: the forward's step (wait<2>, 4 * MT shared loads, wait<0>,
// split); 2: wait<3> each step (the previous step's products done: two steps in flight).
template <int N, int MT, int kMode, int BPS>
__global__ void __launch_bounds__(256, BPS) rate(float* out, int steps) {
  constexpr int R = N / 2;
  __shared__ __align__(1024) unsigned char smem[2 * 64 * 128 + 8192];
  for (int i = threadIdx.x; i < (int)sizeof(smem) / 4; i += 256)
    reinterpret_cast<float*>(smem)[i] = 1e-3f * (i % 7);
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint64_t b_hi = desc(base), b_lo = desc(base + 64 * 128);
  const float* xs = reinterpret_cast<const float*>(smem + 2 * 64 * 128);
  float acc[MT][R];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int i = 0; i < R; ++i) acc[m][i] = 0.f;
  uint32_t ah[MT][4], al[MT][4];
  float v[MT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[m][e] = 0.001f * (threadIdx.x + e + m);
      split(v[m][e], ah[m][e], al[m][e]);
    }
  const int lane = threadIdx.x & 31;
  for (int s = 0; s < steps; ++s) {
    if (kMode == 1) {
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) split(v[m][e], ah[m][e], al[m][e]);
    }
    if (kMode != 2) {
#pragma unroll
      for (int m = 0; m < MT; ++m) facc(acc[m]);
    }
    if (kMode != 2 || s == 0) fence();
#pragma unroll
    for (int m = 0; m < MT; ++m) wgmma_tf32(acc[m], al[m], b_hi);
    commit();
#pragma unroll
    for (int m = 0; m < MT; ++m) wgmma_tf32(acc[m], ah[m], b_lo);
    commit();
#pragma unroll
    for (int m = 0; m < MT; ++m) wgmma_tf32(acc[m], ah[m], b_hi);
    commit();
    if (kMode == 0) wait<0>();
    if (kMode == 2) wait<3>();
    if (kMode == 1) {
      wait<2>();
      const int off = (s * 36 + lane * 5) & 2047;
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) v[m][e] = xs[(off + m * 8 + e * 3) & 2047];
      wait<0>();
    }
    if (kMode != 2) {
#pragma unroll
      for (int m = 0; m < MT; ++m) facc(acc[m]);
    }
  }
  wait<0>();
  float t = 0.f;
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int i = 0; i < R; ++i) t += acc[m][i];
  if (t == 12345.f) out[threadIdx.x] = t;
}

template <int N, int MT, int kMode, int per_sm>
void run(int sms, int steps, float* out, double clock_ghz) {
  auto k = rate<N, MT, kMode, per_sm>;
  int fit = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k, 256, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  k<<<sms * per_sm, 256>>>(out, steps);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    CHECK(cudaEventRecord(a));
    k<<<sms * per_sm, 256>>>(out, steps);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (ms < best) best = ms;
  }
  // Per SM and step: per_sm blocks x 2 warpgroups, each 3 * MT products of 64 x N x 8.
  const double cycles = best * 1e-3 * clock_ghz * 1e9 / steps;
  const double fma = per_sm * 2.0 * 3 * MT * 64.0 * N * 8;
  printf(
      "N=%3d MT=%d mode=%d blocks/SM=%d (fit %d): %.3f ms, %7.1f cycles per step per SM, %6.1f "
      "FMA/cycle/SM (%.0f%% of 1024), %.1f cycles per product per SMSP\n",
      N, MT, kMode, per_sm, fit, best, cycles, fma / cycles, 100.0 * fma / cycles / 1024,
      cycles / (per_sm * 2.0 * 3 * MT));
}

int main() {
  int dev = 0, sms = 0, clk = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev));
  const double ghz = clk / 1e6;
  printf("SMs %d, clock %.3f GHz (attribute)\n", sms, ghz);
  float* out;
  CHECK(cudaMalloc(&out, 4096));
  const int steps = 20000;
  run<24, 3, 2, 2>(sms, steps, out, ghz);
  run<24, 3, 0, 2>(sms, steps, out, ghz);
  run<24, 3, 1, 2>(sms, steps, out, ghz);
  run<24, 3, 0, 1>(sms, steps, out, ghz);
  run<24, 3, 1, 1>(sms, steps, out, ghz);
  run<24, 3, 2, 1>(sms, steps, out, ghz);
  run<24, 2, 0, 3>(sms, steps, out, ghz);
  run<24, 2, 1, 3>(sms, steps, out, ghz);
  run<24, 2, 2, 3>(sms, steps, out, ghz);
  run<24, 1, 0, 4>(sms, steps, out, ghz);
  run<24, 1, 2, 4>(sms, steps, out, ghz);
  run<24, 1, 2, 2>(sms, steps, out, ghz);
  run<8, 3, 2, 2>(sms, steps, out, ghz);
  run<16, 3, 2, 2>(sms, steps, out, ghz);
  run<32, 3, 2, 2>(sms, steps, out, ghz);
  run<32, 3, 0, 2>(sms, steps, out, ghz);
  run<48, 3, 2, 2>(sms, steps, out, ghz);
  run<64, 3, 2, 2>(sms, steps, out, ghz);
  run<64, 3, 0, 2>(sms, steps, out, ghz);
  run<48, 2, 0, 2>(sms, steps, out, ghz);
  return 0;
}
