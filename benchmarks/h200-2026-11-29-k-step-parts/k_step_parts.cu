// Microbenchmark: which part of the one-pass forward's k step keeps its wgmma products from
// the tensor pipe's rate? Each block's 2 warpgroups run `steps` steps of the forward's pattern
// (3 terms x 3 m64 tiles of wgmma m64n24k8 TF32, A from registers, B from shared memory, one
// commit group per term; then wait_group 2, the next step's A values, wait_group 0), with one
// part of the step's other work at a time (kPart below), 2 blocks per SM as the forward runs.
// The products-only and everything rows repeat section 7 of
// ../h200-2026-11-29-tile-barrier/notes.txt (wgmma_rate.cu, its modes 0 and 1, whose split
// used cvt.rna: 3 instructions on sm_90a, where cvt.rn is 1). Output: call1-k-step-parts*.txt
// (the parts up to kLowEarly), call2-k-step-parts.txt (all); notes.txt, section 1.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I.. \
//     -I../h200-2026-11-29-tile-barrier k_step_parts.cu -o k_step_parts && ./k_step_parts
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "standalone_cuda.cuh"
#include "wgmma_wrappers.inc"

__device__ __forceinline__ void split_cvt(float v, uint32_t& hi, uint32_t& lo) {
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(v));
  lo = __float_as_uint(v - __uint_as_float(hi));
}
__device__ __forceinline__ void split_int(float v, uint32_t& hi, uint32_t& lo) {
  hi = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(v - __uint_as_float(hi));
}

constexpr int MT = 3, R = 12;  // 3 m64 tiles, n24: 12 accumulators each
constexpr int kSmemBytes = 2 * 64 * 128 + 8192;

// The kernels' shared memory (smem, 1024-byte aligned, kSmemBytes): B's high and low tiles (64
// rows of 128 bytes each) and 8 KB of values to load, all small numbers; B's descriptors.
__device__ void fill_operands(unsigned char* smem, uint64_t& b_hi, uint64_t& b_lo) {
  for (int i = threadIdx.x; i < kSmemBytes / 4; i += 256)
    reinterpret_cast<float*>(smem)[i] = 1e-3f * (i % 7);
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  b_hi = desc(base);
  b_lo = desc(base + 64 * 128);
}

// A step's products: the 3 terms over the MT tiles (the small ones first), a commit group each.
__device__ __forceinline__ void issue_step(float (&acc)[MT][R], const uint32_t (&ah)[MT][4],
                                           const uint32_t (&al)[MT][4], uint64_t b_hi,
                                           uint64_t b_lo) {
#pragma unroll
  for (int m = 0; m < MT; ++m) facc(acc[m]);
  fence();
#pragma unroll
  for (int m = 0; m < MT; ++m) wgmma_tf32(acc[m], al[m], b_hi);
  commit();
#pragma unroll
  for (int m = 0; m < MT; ++m) wgmma_tf32(acc[m], ah[m], b_lo);
  commit();
#pragma unroll
  for (int m = 0; m < MT; ++m) wgmma_tf32(acc[m], ah[m], b_hi);
  commit();
}

// Keeps the sums alive (never true).
__device__ void keep(const float (&acc)[MT][R], float* out) {
  float t = 0.f;
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int i = 0; i < R; ++i) t += acc[m][i];
  if (t == 12345.f) out[threadIdx.x] = t;
}

// The parts of a step besides its products.
enum Part {
  kProductsOnly,    // nothing (wait_group 0 each step)
  kEverything,      // 12 32-bit shared loads after wait_group 2; the split (cvt.rn + FADD) after
                    // wait_group 0: the forward's step
  kLoadsOnly,       // the 12 loads; their bits go to the products unsplit
  kSplitOnly,       // the split of values the compiler cannot see (no loads)
  kIntegerSplit,    // the loads, and the split by IADD3 + LOP3 + FADD instead of cvt.rn
  kPairLoads,       // 6 64-bit loads (two rows' values each), then the split
  kPreSplitLoads,   // 24 32-bit loads, the high and the low parts already split: no split;
                    // the steps alternate between two sets of A registers, each step's loads
                    // going to the other set (kernel pre_split below; with one set, the loads'
                    // registers became the products' by moves and ptxas serialized the
                    // products, C7513)
  kLowEarly,        // the loads, each low part computed before wait_group 0, the high part
                    // (value - low, exact) after it
  kBroadcastLoads,  // the 12 loads and the split, every lane of a warp at one address
  kQuadLoads,       // 3 128-bit loads (4 values each), then the split
  kLateLoads,       // the 12 loads after wait_group 0 (nothing overlaps the products), the split
  kHalfLoads,       // 6 32-bit loads (each value used twice), the split
};

template <int kPart>
__global__ void __launch_bounds__(256, 2) parts(float* out, int steps) {
  __shared__ __align__(1024) unsigned char smem[kSmemBytes];
  uint64_t b_hi, b_lo;
  fill_operands(smem, b_hi, b_lo);
  const float* xs = reinterpret_cast<const float*>(smem + 2 * 64 * 128);
  const float2* xs2 = reinterpret_cast<const float2*>(xs);
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
      split_cvt(v[m][e], ah[m][e], al[m][e]);
    }
  const int lane = threadIdx.x & 31;
  for (int s = 0; s < steps; ++s) {
    if (kPart == kEverything || kPart == kPairLoads || kPart == kSplitOnly ||
        kPart == kBroadcastLoads || kPart == kQuadLoads || kPart == kLateLoads ||
        kPart == kHalfLoads) {
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (kPart == kSplitOnly) facc(v[m]);
#pragma unroll
        for (int e = 0; e < 4; ++e) split_cvt(v[m][e], ah[m][e], al[m][e]);
      }
    }
    if (kPart == kIntegerSplit) {
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) split_int(v[m][e], ah[m][e], al[m][e]);
    }
    if (kPart == kLowEarly) {
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) ah[m][e] = __float_as_uint(v[m][e] - __uint_as_float(al[m][e]));
    }
    issue_step(acc, ah, al, b_hi, b_lo);
    if (kPart == kProductsOnly || kPart == kSplitOnly) {
      wait<0>();
    } else {
      wait<2>();
      const int off = (s * 36 + lane * 5) & 2047;
      if (kPart == kPairLoads) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float2 p = xs2[(off / 2 + lane + m * 64 + e * 32) & 1023];
            v[m][e] = p.x;
            v[m][e + 2] = p.y;
          }
      } else if (kPart == kBroadcastLoads) {
        const int at = (s * 36) & 2047;
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int e = 0; e < 4; ++e) v[m][e] = xs[(at + m * 8 + e * 3) & 2047];
      } else if (kPart == kQuadLoads) {
        const float4* xs4 = reinterpret_cast<const float4*>(xs);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const float4 p = xs4[(off / 4 + lane + m * 32) & 511];
          v[m][0] = p.x;
          v[m][1] = p.y;
          v[m][2] = p.z;
          v[m][3] = p.w;
        }
      } else if (kPart == kHalfLoads) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int e = 0; e < 2; ++e) v[m][e] = v[m][e + 2] = xs[(off + m * 8 + e * 3) & 2047];
      } else if (kPart != kLateLoads) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int e = 0; e < 4; ++e) v[m][e] = xs[(off + m * 8 + e * 3) & 2047];
      }
      if (kPart == kLowEarly) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            uint32_t hi;
            split_cvt(v[m][e], hi, al[m][e]);
          }
      }
      wait<0>();
      if (kPart == kLateLoads) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int e = 0; e < 4; ++e) v[m][e] = xs[(off + m * 8 + e * 3) & 2047];
      }
      if (kPart == kLoadsOnly) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int e = 0; e < 4; ++e) ah[m][e] = al[m][e] = __float_as_uint(v[m][e]);
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) facc(acc[m]);
  }
  wait<0>();
  keep(acc, out);
}

// kPreSplitLoads: two steps per iteration, each step's products reading one set of A
// registers while its loads fill the other.
__global__ void __launch_bounds__(256, 2) pre_split(float* out, int steps) {
  __shared__ __align__(1024) unsigned char smem[kSmemBytes];
  uint64_t b_hi, b_lo;
  fill_operands(smem, b_hi, b_lo);
  const uint32_t* xs = reinterpret_cast<const uint32_t*>(smem + 2 * 64 * 128);
  float acc[MT][R];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int i = 0; i < R; ++i) acc[m][i] = 0.f;
  uint32_t ah[2][MT][4], al[2][MT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int e = 0; e < 4; ++e) split_cvt(0.001f * (threadIdx.x + e + m), ah[0][m][e], al[0][m][e]);
  const int lane = threadIdx.x & 31;
  const auto step = [&](int s, uint32_t (&h)[MT][4], uint32_t (&l)[MT][4], uint32_t (&hn)[MT][4],
                        uint32_t (&ln)[MT][4]) {
    issue_step(acc, h, l, b_hi, b_lo);
    wait<2>();
    const int off = (s * 36 + lane * 5) & 2047;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        hn[m][e] = xs[(off + m * 8 + e * 3) & 2047];
        ln[m][e] = xs[(off + m * 8 + e * 3 + 1024) & 2047];
      }
    wait<0>();
#pragma unroll
    for (int m = 0; m < MT; ++m) facc(acc[m]);
  };
  for (int s = 0; s < steps; s += 2) {
    step(s, ah[0], al[0], ah[1], al[1]);
    step(s + 1, ah[1], al[1], ah[0], al[0]);
  }
  wait<0>();
  keep(acc, out);
}

template <int kPart>
void run(const char* name, int sms, int steps, float* out, double clock_ghz) {
  void (*k)(float*, int) = nullptr;
  if constexpr (kPart == kPreSplitLoads) {
    k = pre_split;
  } else {
    k = parts<kPart>;
  }
  int fit = 0;
  CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k, 256, 0));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  k<<<sms * 2, 256>>>(out, steps);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    CHECK_CUDA(cudaEventRecord(a));
    k<<<sms * 2, 256>>>(out, steps);
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (ms < best) best = ms;
  }
  // Per SM and step: 2 blocks x 2 warpgroups, each 9 products of 64 x 24 x 8.
  const double cycles = best * 1e-3 * clock_ghz * 1e9 / steps;
  const double fma = 2 * 2.0 * 9 * 64.0 * 24 * 8;
  printf("%-16s (fit %d): %.3f ms, %7.1f cycles per step per SM, %4.0f%% of the TF32 peak\n", name,
         fit, best, cycles, 100.0 * fma / cycles / 1024);
}

int main() {
  int dev = 0, sms = 0, clk = 0;
  CHECK_CUDA(cudaGetDevice(&dev));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK_CUDA(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev));
  const double ghz = clk / 1e6;
  printf("SMs %d, clock %.3f GHz (attribute); N = 24, 3 m64 tiles, 2 blocks per SM\n", sms, ghz);
  float* out;
  CHECK_CUDA(cudaMalloc(&out, 4096));
  const int steps = 20000;
  run<kProductsOnly>("products only", sms, steps, out, ghz);
  run<kEverything>("everything", sms, steps, out, ghz);
  run<kLoadsOnly>("loads only", sms, steps, out, ghz);
  run<kSplitOnly>("split only", sms, steps, out, ghz);
  run<kIntegerSplit>("integer split", sms, steps, out, ghz);
  run<kPairLoads>("pair loads", sms, steps, out, ghz);
  run<kPreSplitLoads>("pre-split loads", sms, steps, out, ghz);
  run<kLowEarly>("low part early", sms, steps, out, ghz);
  run<kBroadcastLoads>("broadcast loads", sms, steps, out, ghz);
  run<kQuadLoads>("128-bit loads", sms, steps, out, ghz);
  run<kLateLoads>("late loads", sms, steps, out, ghz);
  run<kHalfLoads>("half the loads", sms, steps, out, ghz);
  return 0;
}
