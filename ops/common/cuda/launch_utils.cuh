// Launch constants, host-side launch helpers and fixed-order sums shared by the CUDA kernels
// (nvcc only: no ATen, no torch).
//
//   * kThreads (every kernel's block size), warp constants, ceil_div, grid checks;
//   * FUSED_OPS_RETURN_IF_CUDA_ERROR / FUSED_OPS_RETURN_IF_LAUNCH_FAILED: launchers report
//     errors as cudaError_t and never throw (the host side turns them into exceptions);
//   * WorkspaceCarver: one layout function both sizes and carves a workspace;
//   * block_copy: a block's staging of values into shared memory, loads in flight together;
//   * named_barrier_sync: a barrier of part of a block;
//   * allow_dependent_grid, wait_for_prerequisite_grid: programmatic dependent launch;
//   * warp and block sums of doubles in a fixed order (deterministic: the result depends on
//     the launch shape only, never on timing).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>

namespace fused_ops {
namespace gpu {

// ---------------------------------------------------------------------------------------
// Launch constants.

constexpr int kThreads = 256;  // threads per block, every kernel
constexpr int kLog2Threads = 8;
constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

// ---------------------------------------------------------------------------------------
// Host-side helpers.

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Smallest k with 2^k >= v (v >= 1).
inline int ceil_log2(int64_t v) {
  int k = 0;
  while ((int64_t{1} << k) < v) {
    ++k;
  }
  return k;
}

inline bool is_aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Blocks for `items` warp-sized work items, kWarpsPerBlock per block.
inline int64_t blocks_for_warp_items(int64_t items) { return ceil_div(items, kWarpsPerBlock); }

// Whether a 1-D grid of `blocks` blocks can be launched (and indexed with 32-bit blockIdx).
inline bool grid_fits(int64_t blocks) { return blocks > 0 && blocks <= INT_MAX; }

// Returns from the enclosing launcher with the error of the last launch, if any. Launchers
// report errors as cudaError_t and never throw; the host wrappers turn them into exceptions.
#define FUSED_OPS_RETURN_IF_CUDA_ERROR(expr)      \
  do {                                            \
    const cudaError_t fused_ops_status_ = (expr); \
    if (fused_ops_status_ != cudaSuccess) {       \
      return fused_ops_status_;                   \
    }                                             \
  } while (0)

#define FUSED_OPS_RETURN_IF_LAUNCH_FAILED() FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaGetLastError())

// Carves 256-byte-aligned sub-buffers out of one workspace. With a null base it only counts
// bytes, so that sizing (on the host, before the allocation) and carving share one layout.
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename U>
  U* take(int64_t count) {
    const size_t offset = offset_;
    offset_ += (static_cast<size_t>(count) * sizeof(U) + 255) / 256 * 256;
    return base_ == nullptr ? nullptr : reinterpret_cast<U*>(base_ + offset);
  }
  size_t bytes() const { return offset_; }

 private:
  char* base_;
  size_t offset_ = 0;
};

// Programmatic dependent launch (sm_90+; elsewhere both are no-ops, and a dependent launch is
// an ordinary one). allow_dependent_grid: the kernel launched after this one with
// cudaLaunchAttributeProgrammaticStreamSerialization may start once a thread of every block of
// this one has called it (or the block ended). wait_for_prerequisite_grid: in such a dependent
// kernel, waits until the kernel before it has ended and its memory writes are visible;
// returns at once in a kernel launched as usual.
__device__ __forceinline__ void allow_dependent_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// The `threads` threads (whole warps) that reach named barrier `id` (1 .. 15: 0 is
// __syncthreads') wait for each other. (With `id` not a compile-time constant ptxas reserves
// all 16 of the block's barriers.)
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// A block's copy of `count` values: store(i, load(i)) for i < count, each thread's loads
// kLoads at a time, all issued before their stores. For a block whose work waits on staging
// tens of KB (a plain loop paid one load's latency per value of a thread: the lag constants
// kernel's weights, 0.014 -> 0.009 ms with its sums spread over warps, H100, 2026-11-26).
template <int kLoads = 8, typename Load, typename Store>
__device__ __forceinline__ void block_copy(int count, const Load& load, const Store& store) {
  using Value = decltype(load(0));
  for (int i0 = static_cast<int>(threadIdx.x); i0 < count; i0 += kThreads * kLoads) {
    Value v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int i = i0 + u * kThreads;
      v[u] = i < count ? load(i) : Value{};
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int i = i0 + u * kThreads;
      if (i < count) {
        store(i, v[u]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Fixed-order sums.

// Sum over the aligned groups of `width` lanes (a power of two <= 32) that hold the calling
// lane, by xor butterfly: every lane of a group ends with the same value (IEEE addition is
// commutative), and the order of the additions is fixed. All 32 lanes must call it.
__device__ __forceinline__ double subwarp_allreduce_sum(double v, int width) {
  for (int offset = width >> 1; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

__device__ __forceinline__ double warp_allreduce_sum(double v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Sum of a pair over the kThreads threads of the block; the result is valid in thread 0.
// Every thread of the block must call it (it holds a __syncthreads). `scratch` (kWarpsPerBlock
// entries of shared memory) is written once and read once: a kernel that calls this a second
// time must __syncthreads() in between.
__device__ __forceinline__ double2 block_reduce_sum(double2 v, double2* scratch) {
  v.x = warp_allreduce_sum(v.x);
  v.y = warp_allreduce_sum(v.y);
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (lane == 0) {
    scratch[warp] = v;
  }
  __syncthreads();
  double2 total = make_double2(0.0, 0.0);
  if (warp == 0) {
    if (lane < kWarpsPerBlock) {
      total = scratch[lane];
    }
    total.x = warp_allreduce_sum(total.x);
    total.y = warp_allreduce_sum(total.y);
  }
  return total;
}

}  // namespace gpu
}  // namespace fused_ops
