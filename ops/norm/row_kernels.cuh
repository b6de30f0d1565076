// The two generic row kernels of the GroupNorm-family operators (nvcc only: no ATen, no
// torch), which the operators instantiate with small functors:
//   * segment_pair_sums_kernel: two double sums per (segment, chunk) of a tensor viewed as
//     num_segments contiguous segments (a partial-reduction pass), and
//     sum_chunk_partials_kernel, which adds the chunk partials of each segment;
//   * row_map_kernel: an elementwise pass over rows, with per-row parameters;
//   * affine_param_grads_kernel: GroupNorm's weight and bias gradients from per-(n, c) sums;
// their host-side tiling and launchers, and ShiftedMomentsOp, the statistics functor.
//
// Tiling of the row kernels (both kernels; all grids are 1-D, so no 65535 limit applies):
//   A tensor is viewed as `num_rows` contiguous rows of `row_len` elements, processed in
//   "vectors" of kVec elements (kVec = 16 / sizeof(T) on the 128-bit path, 1 on the scalar
//   fallback). Each row is served by T = 2^k threads (T <= 32 or T = 256) and, when long, cut
//   into chunks (tiles):
//     * long rows (at least kThreads * kUnroll natural vectors): T = 256, one block per
//       (row, chunk); block b handles row b / chunks, chunk b % chunks (one division per
//       block, none per element; row_map_kernel numbers its blocks from the end);
//     * short rows: T = next_pow2(ceil(vectors / kUnroll)), one chunk per row, and a block of
//       256 threads serves 256 / T consecutive rows, thread t serving row (t >> k) with lane
//       (t & (T - 1)): shifts and masks only.
//   Within its chunk a thread takes the vectors lane, lane + T, lane + 2T, ..., kUnroll at a
//   time: consecutive threads touch consecutive 16-byte vectors (coalesced), and each thread
//   has kUnroll independent loads (2 * kUnroll with two inputs) in flight before it uses the
//   first. Offsets are 64-bit everywhere.
#pragma once

#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "norm/group_norm_math.h"

#include <climits>
#include <cstdint>

namespace fused_ops {
namespace gpu {

constexpr int kUnroll = 4;  // independent vectors per thread per step
// Partial reductions: a chunk aims at kTargetChunkVectors 16-byte vectors (32 KB, two steps
// of the block), and a segment is cut into at most kMaxChunksPerSegment chunks (which bounds
// the partials a combining warp adds up).
constexpr int64_t kTargetChunkVectors = 2 * kThreads * kUnroll;
constexpr int64_t kMaxChunksPerSegment = 4096;

// ---------------------------------------------------------------------------------------
// Host-side tiling.

// How segment_pair_sums_kernel cuts segments of `segment_len` elements. Chunk boundaries are
// in elements and multiples of the natural vector (16 bytes), so the chunk count, and with it
// the partials' layout and size, does not depend on which kernel (128-bit or scalar) runs.
struct ReducePlan {
  int64_t chunks_per_segment;  // 1 on the short-segment path
  int64_t chunk_len;           // elements per chunk (the last one of a segment may be shorter)
  int log2_threads;            // log2 of the threads per segment: kLog2Threads, or <= 5
};

inline ReducePlan make_reduce_plan(int64_t segment_len, int natural_vec) {
  ReducePlan plan;
  const int64_t vectors = ceil_div(segment_len, natural_vec);
  if (vectors >= int64_t{kThreads} * kUnroll) {
    int64_t chunks = ceil_div(vectors, kTargetChunkVectors);
    chunks = chunks < kMaxChunksPerSegment ? chunks : kMaxChunksPerSegment;
    const int64_t chunk_vectors = ceil_div(vectors, chunks);
    plan.chunks_per_segment = ceil_div(vectors, chunk_vectors);  // <= chunks, none empty
    plan.chunk_len = chunk_vectors * natural_vec;
    plan.log2_threads = kLog2Threads;
  } else {
    const int k = ceil_log2(ceil_div(vectors, kUnroll));
    plan.chunks_per_segment = 1;
    plan.chunk_len = segment_len;
    plan.log2_threads = k < 5 ? k : 5;
  }
  return plan;
}

// The same plan in units of a kernel's vectors of kVec elements (kVec divides segment_len on
// the vectorised path, and always divides chunk_len on the chunked path).
struct ReduceTiling {
  int64_t num_segments;
  int64_t segment_vecs;
  int64_t chunk_vecs;
  uint32_t chunks_per_segment;
  int log2_threads;
};

// Elementwise tiling of num_rows rows of row_vecs vectors; see the comment at the top.
struct MapTiling {
  int64_t num_rows;
  int64_t row_vecs;
  int64_t tile_vecs;       // vectors per (row, tile); tiles are balanced, the last may be shorter
  uint32_t tiles_per_row;  // 1 unless log2_threads == kLog2Threads
  int log2_threads;        // log2 of the threads per row, 0..8
  int64_t num_blocks;
};

inline MapTiling make_map_tiling(int64_t num_rows, int64_t row_vecs) {
  MapTiling t;
  t.num_rows = num_rows;
  t.row_vecs = row_vecs;
  const int64_t per_block_step = int64_t{kThreads} * kUnroll;
  if (row_vecs > per_block_step) {
    const int64_t balanced_tiles = ceil_div(row_vecs, per_block_step);
    t.tile_vecs = ceil_div(row_vecs, balanced_tiles);
    const int64_t tiles = ceil_div(row_vecs, t.tile_vecs);  // <= balanced_tiles, none empty
    t.log2_threads = kLog2Threads;
    t.num_blocks = num_rows * tiles;
    // The launcher refuses grids over INT_MAX blocks, so a count that does not fit 32 bits
    // never reaches the kernel.
    t.tiles_per_row = static_cast<uint32_t>(tiles <= INT_MAX ? tiles : INT_MAX);
    if (tiles > INT_MAX) {
      t.num_blocks = int64_t{INT_MAX} + 1;
    }
  } else {
    t.tile_vecs = row_vecs;
    t.tiles_per_row = 1;
    t.log2_threads = ceil_log2(ceil_div(row_vecs, kUnroll));  // <= 8
    t.num_blocks = ceil_div(num_rows, int64_t{kThreads} >> t.log2_threads);
  }
  return t;
}

// ---------------------------------------------------------------------------------------
// Generic kernels.

// One step of a thread in the row kernels: up to kUnroll vectors of one input (two when
// kTwoInputs), vectors v0, v0 + stride, ... below `end`; the rest are neither loaded nor used.
template <typename T, int kVec, bool kTwoInputs>
struct VectorBatch {
  using acc_t = typename ScalarOps<T>::acc_t;  // exact: every T value is an acc_t value
  using Vector = AlignedVector<T, kVec>;
  Vector a[kUnroll];
  Vector b[kUnroll];

  // Issues every load before any use.
  __device__ __forceinline__ void load(const T* in0, const T* in1, int64_t v0, int stride,
                                       int64_t end) {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = v0 + static_cast<int64_t>(j) * stride;
      if (v < end) {
        a[j] = load_vector<T, kVec>(in0, v);
        if constexpr (kTwoInputs) {
          b[j] = load_vector<T, kVec>(in1, v);
        }
      }
    }
  }

  // Vector j in acc_t: first from in0; second from in1 when kTwoInputs (else not written:
  // the kernels then pass acc_t(0) in its place).
  __device__ __forceinline__ void to_acc(int j, acc_t (&first)[kVec], acc_t (&second)[kVec]) const {
    vector_to_acc<T, kVec>(a[j], first);
    if constexpr (kTwoInputs) {
      vector_to_acc<T, kVec>(b[j], second);
    }
  }
};

// kPairs pairs of double sums per (segment, chunk): pair i of (segment, chunk) at
// partials[i * num_segments * chunks_per_segment + segment * chunks_per_segment + chunk] =
// (sum of first, sum of second) of op.accumulate over the chunk's elements, where
// `state = op.segment_state(segment)` is computed once per thread and `accumulate(state, a,
// b, s0, s1)` adds one element (a from in0, b from in1, or 0 when !kTwoInputs; both given in
// ScalarOps<T>::acc_t, which holds every T value exactly); with kPairs > 1,
// `accumulate(state, a, b, s)` adds to the 2 kPairs sums s[].
// kBlockPerSegment: one block per (segment, chunk) (log2_threads == 8); otherwise 256 / T
// segments per block, reduced within their lanes by shuffles (no shared memory, no barrier).
template <typename T, int kVec, bool kBlockPerSegment, bool kTwoInputs, typename Op, int kPairs = 1>
__global__ void __launch_bounds__(kThreads)
    segment_pair_sums_kernel(const T* __restrict__ in0, const T* __restrict__ in1,
                             double2* __restrict__ partials, ReduceTiling tiling, Op op) {
  using acc_t = typename ScalarOps<T>::acc_t;  // exact: every T value is an acc_t value
  int64_t segment;
  int64_t chunk;
  int lane;
  int threads_per_segment;
  if constexpr (kBlockPerSegment) {
    // The grid has exactly num_segments * chunks_per_segment blocks.
    const uint32_t block = blockIdx.x;
    const uint32_t seg32 = block / tiling.chunks_per_segment;
    segment = seg32;
    chunk = block - seg32 * tiling.chunks_per_segment;
    lane = threadIdx.x;
    threads_per_segment = kThreads;
  } else {
    const int k = tiling.log2_threads;
    segment = (static_cast<int64_t>(blockIdx.x) << (kLog2Threads - k)) + (threadIdx.x >> k);
    chunk = 0;
    lane = threadIdx.x & ((1 << k) - 1);
    threads_per_segment = 1 << k;
  }

  // Threads past the last segment (short-segment path only) add nothing, but stay for the
  // shuffles below.
  double sums[2 * kPairs];
#pragma unroll
  for (int i = 0; i < 2 * kPairs; ++i) {
    sums[i] = 0.0;
  }
  if (segment < tiling.num_segments) {
    const int64_t begin = chunk * tiling.chunk_vecs;
    const int64_t chunk_end = begin + tiling.chunk_vecs;
    const int64_t end = chunk_end < tiling.segment_vecs ? chunk_end : tiling.segment_vecs;
    const T* seg0 = in0 + segment * tiling.segment_vecs * kVec;
    const T* seg1 = kTwoInputs ? in1 + segment * tiling.segment_vecs * kVec : nullptr;
    const int64_t step = static_cast<int64_t>(threads_per_segment) * kUnroll;
    VectorBatch<T, kVec, kTwoInputs> batch;
    int64_t v0 = begin + lane;
    if (v0 < end) {
      // The first batch is issued before the segment state (which may be a load, e.g. the
      // shift) so that the two latencies overlap instead of adding up.
      batch.load(seg0, seg1, v0, threads_per_segment, end);
      const auto state = op.segment_state(segment);
      while (true) {
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          const int64_t v = v0 + static_cast<int64_t>(j) * threads_per_segment;
          if (v < end) {
            acc_t first[kVec];
            acc_t second[kVec];
            batch.to_acc(j, first, second);
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
              if constexpr (kPairs == 1) {
                op.accumulate(state, first[e], kTwoInputs ? second[e] : acc_t(0), sums[0], sums[1]);
              } else {
                op.accumulate(state, first[e], kTwoInputs ? second[e] : acc_t(0), sums);
              }
            }
          }
        }
        v0 += step;
        if (v0 >= end) {
          break;
        }
        batch.load(seg0, seg1, v0, threads_per_segment, end);
      }
    }
  }

  const int64_t pair_stride = tiling.num_segments * tiling.chunks_per_segment;
  if constexpr (kBlockPerSegment) {
    __shared__ double2 scratch[kPairs][kWarpsPerBlock];
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const double2 total =
          block_reduce_sum(make_double2(sums[2 * i], sums[2 * i + 1]), scratch[i]);
      if (threadIdx.x == 0) {
        partials[i * pair_stride + segment * tiling.chunks_per_segment + chunk] = total;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 2 * kPairs; ++i) {
      sums[i] = subwarp_allreduce_sum(sums[i], threads_per_segment);
    }
    if (lane == 0 && segment < tiling.num_segments) {
#pragma unroll
      for (int i = 0; i < kPairs; ++i) {
        partials[i * pair_stride + segment] = make_double2(sums[2 * i], sums[2 * i + 1]);
      }
    }
  }
}

// The sum of pairs[0..count) by the calling warp: lanes take pairs lane, lane + 32, ..., then a
// butterfly (a fixed order); every lane gets the result.
__device__ __forceinline__ double2 warp_sum_pairs(const double2* __restrict__ pairs, int64_t count,
                                                  int lane) {
  double s0 = 0.0;
  double s1 = 0.0;
  for (int64_t k = lane; k < count; k += kWarpSize) {
    const double2 p = pairs[k];
    s0 += p.x;
    s1 += p.y;
  }
  return make_double2(warp_allreduce_sum(s0), warp_allreduce_sum(s1));
}

// sums[s] = sum over c < chunks of partials[s * chunks + c], one warp per segment
// (warp_sum_pairs).
static __global__ void __launch_bounds__(kThreads)
    sum_chunk_partials_kernel(const double2* __restrict__ partials, int64_t chunks,
                              int64_t num_segments, double2* __restrict__ sums) {
  const int64_t segment =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (segment >= num_segments) {
    return;  // whole warps only
  }
  const double2 total = warp_sum_pairs(partials + segment * chunks, chunks, lane);
  if (lane == 0) {
    sums[segment] = total;
  }
}

// The GroupNorm affine gradients, one warp per channel c, lanes over the samples n in a fixed
// order (group_norm_math.h): dweight[c] = sum_n weight_grad_term(ds, db, mean, rstd) and
// dbias[c] = sum_n db, with (ds, db) = sums(n, c) the channel's sums of dy * x and dy in
// sample n. dweight and dbias may be null (not written).
template <typename T, typename S, typename Sums>
__global__ void __launch_bounds__(kThreads)
    affine_param_grads_kernel(Sums sums, const S* __restrict__ mean, const S* __restrict__ rstd,
                              int64_t N, int64_t C, int64_t G, int64_t Cg, T* __restrict__ dweight,
                              T* __restrict__ dbias) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (c >= C) {
    return;  // whole warps only
  }
  const int64_t g = c / Cg;
  double dw = 0.0;
  double db = 0.0;
  for (int64_t n = lane; n < N; n += kWarpSize) {
    const double2 s = sums(n, c);
    const int64_t ng = n * G + g;
    dw += norm::weight_grad_term(s.x, s.y, static_cast<double>(mean[ng]),
                                 static_cast<double>(rstd[ng]));
    db += s.y;
  }
  dw = warp_allreduce_sum(dw);
  db = warp_allreduce_sum(db);
  if (lane == 0) {
    if (dweight != nullptr) {
      dweight[c] = ScalarOps<T>::from_double(dw);
    }
    if (dbias != nullptr) {
      dbias[c] = ScalarOps<T>::from_double(db);
    }
  }
}

// Launches affine_param_grads_kernel (nothing when neither gradient is asked for).
template <typename T, typename S, typename Sums>
cudaError_t launch_affine_param_grads(const Sums& sums, const S* mean, const S* rstd, int64_t N,
                                      int64_t C, int64_t G, T* dweight, T* dbias,
                                      cudaStream_t stream) {
  if (dweight == nullptr && dbias == nullptr) {
    return cudaSuccess;
  }
  const int64_t blocks = blocks_for_warp_items(C);
  if (!grid_fits(blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  affine_param_grads_kernel<T, S, Sums><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      sums, mean, rstd, N, C, G, C / G, dweight, dbias);
  return cudaGetLastError();
}

// out[row, i] = op(op.row_params(row), in0[row, i], in1[row, i]) for num_rows rows, computed
// in ScalarOps<T>::acc_t; in1 is read only when kTwoInputs. See the tiling at the top.
template <typename T, int kVec, bool kTwoInputs, typename Op>
__global__ void __launch_bounds__(kThreads)
    row_map_kernel(const T* __restrict__ in0, const T* __restrict__ in1, T* __restrict__ out,
                   MapTiling tiling, Op op) {
  using S = ScalarOps<T>;
  using acc_t = typename S::acc_t;
  using Vector = AlignedVector<T, kVec>;
  const int k = tiling.log2_threads;
  // Blocks run from the end of the tensor backwards: the operators run this pass right after
  // a reduction pass over the same input that went forwards, so its first blocks read what
  // that pass left in L2.
  const uint32_t block = gridDim.x - 1 - blockIdx.x;
  const uint32_t row_block = block / tiling.tiles_per_row;
  const uint32_t tile = block - row_block * tiling.tiles_per_row;
  const int64_t row = (static_cast<int64_t>(row_block) << (kLog2Threads - k)) + (threadIdx.x >> k);
  if (row >= tiling.num_rows) {
    return;  // no barrier in this kernel
  }
  const int lane = threadIdx.x & ((1 << k) - 1);
  const int threads_per_row = 1 << k;
  const auto params = op.row_params(row);
  const int64_t begin = static_cast<int64_t>(tile) * tiling.tile_vecs;
  const int64_t tile_end = begin + tiling.tile_vecs;
  const int64_t end = tile_end < tiling.row_vecs ? tile_end : tiling.row_vecs;
  const int64_t row_offset = row * tiling.row_vecs;  // in vectors
  const T* row0 = in0 + row_offset * kVec;
  const T* row1 = kTwoInputs ? in1 + row_offset * kVec : nullptr;
  T* row_out = out + row_offset * kVec;
  const int64_t step = static_cast<int64_t>(threads_per_row) * kUnroll;
  // tile_vecs <= threads_per_row * kUnroll, so this loop runs once; it stays a loop so that
  // the kernel is correct for any tiling.
  for (int64_t v0 = begin + lane; v0 < end; v0 += step) {
    VectorBatch<T, kVec, kTwoInputs> batch;
    batch.load(row0, row1, v0, threads_per_row, end);
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = v0 + static_cast<int64_t>(j) * threads_per_row;
      if (v < end) {
        acc_t first[kVec];
        acc_t second[kVec];
        batch.to_acc(j, first, second);
        Vector result;
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          result.val[e] = S::from_acc(op(params, first[e], kTwoInputs ? second[e] : acc_t(0)));
        }
        store_vector<T, kVec>(row_out, v, result);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Host-side launchers of the generic kernels.

// Launches segment_pair_sums_kernel over num_segments segments of segment_len elements
// (partials: kPairs * num_segments * plan.chunks_per_segment entries), on the 128-bit path when
// `vectorized` (segment_len a multiple of the natural vector, inputs 16-byte aligned).
template <typename T, bool kTwoInputs, typename Op, int kPairs = 1>
cudaError_t launch_segment_pair_sums(const T* in0, const T* in1, double2* partials,
                                     int64_t num_segments, int64_t segment_len,
                                     const ReducePlan& plan, bool vectorized, const Op& op,
                                     cudaStream_t stream) {
  constexpr int kNatural = ScalarOps<T>::kVecElems;
  const int vec = vectorized ? kNatural : 1;
  ReduceTiling tiling;
  tiling.num_segments = num_segments;
  tiling.segment_vecs = segment_len / vec;
  tiling.chunk_vecs = plan.chunk_len / vec;
  tiling.chunks_per_segment = static_cast<uint32_t>(plan.chunks_per_segment);
  tiling.log2_threads = plan.log2_threads;
  const bool block_per_segment = plan.log2_threads == kLog2Threads;
  const int64_t blocks = block_per_segment
                             ? num_segments * plan.chunks_per_segment
                             : ceil_div(num_segments, int64_t{kThreads} >> plan.log2_threads);
  if (!grid_fits(blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  const dim3 grid(static_cast<unsigned>(blocks));
  if (vectorized) {
    if (block_per_segment) {
      segment_pair_sums_kernel<T, kNatural, true, kTwoInputs, Op, kPairs>
          <<<grid, kThreads, 0, stream>>>(in0, in1, partials, tiling, op);
    } else {
      segment_pair_sums_kernel<T, kNatural, false, kTwoInputs, Op, kPairs>
          <<<grid, kThreads, 0, stream>>>(in0, in1, partials, tiling, op);
    }
  } else {
    if (block_per_segment) {
      segment_pair_sums_kernel<T, 1, true, kTwoInputs, Op, kPairs>
          <<<grid, kThreads, 0, stream>>>(in0, in1, partials, tiling, op);
    } else {
      segment_pair_sums_kernel<T, 1, false, kTwoInputs, Op, kPairs>
          <<<grid, kThreads, 0, stream>>>(in0, in1, partials, tiling, op);
    }
  }
  return cudaGetLastError();
}

// Launches sum_chunk_partials_kernel when chunks > 1 and returns the per-segment sums:
// `partials` itself when chunks == 1 (then nothing is launched), else `sums`.
inline cudaError_t reduce_chunk_partials(const double2* partials, int64_t chunks,
                                         int64_t num_segments, double2* sums,
                                         const double2** result, cudaStream_t stream) {
  if (chunks == 1) {
    *result = partials;
    return cudaSuccess;
  }
  const int64_t blocks = blocks_for_warp_items(num_segments);
  if (!grid_fits(blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  sum_chunk_partials_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      partials, chunks, num_segments, sums);
  *result = sums;
  return cudaGetLastError();
}

// Launches row_map_kernel over num_rows rows of row_len elements; `vectorized`: row_len a
// multiple of the natural vector and every pointer 16-byte aligned.
template <typename T, bool kTwoInputs, typename Op>
cudaError_t launch_row_map(const T* in0, const T* in1, T* out, int64_t num_rows, int64_t row_len,
                           bool vectorized, const Op& op, cudaStream_t stream) {
  constexpr int kNatural = ScalarOps<T>::kVecElems;
  const MapTiling tiling = make_map_tiling(num_rows, vectorized ? row_len / kNatural : row_len);
  if (!grid_fits(tiling.num_blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  const dim3 grid(static_cast<unsigned>(tiling.num_blocks));
  if (vectorized) {
    row_map_kernel<T, kNatural, kTwoInputs, Op>
        <<<grid, kThreads, 0, stream>>>(in0, in1, out, tiling, op);
  } else {
    row_map_kernel<T, 1, kTwoInputs, Op><<<grid, kThreads, 0, stream>>>(in0, in1, out, tiling, op);
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------
// Partial-sum functors shared by the operators.

// Shifted moments: (sum of d, sum of d^2) with d = value - shift, value = x (relu(x) when
// kRelu), and shift the value of the first element of the segment's "shift group" (the
// segments_per_shift consecutive segments that form one (n, g)). Summing in double around a
// value of the same group keeps the variance exact enough even when |mean| >> std; all chunks
// of a group share the shift, so their partials simply add.
template <typename T, bool kRelu>
struct ShiftedMomentsOp {
  const T* x;
  int64_t segments_per_shift;
  int64_t segment_len;  // elements

  using acc_t = typename ScalarOps<T>::acc_t;

  __device__ __forceinline__ double segment_state(int64_t segment) const {
    const int64_t first =
        segments_per_shift == 1 ? segment : segment / segments_per_shift * segments_per_shift;
    const acc_t v = ScalarOps<T>::to_acc(x[first * segment_len]);
    return static_cast<double>(kRelu ? relu_keep_nan(v) : v);
  }
  // a: one input value (exact in acc_t); the relu is taken before the (exact) widening.
  __device__ __forceinline__ void accumulate(double shift, acc_t a, acc_t /*b*/, double& s0,
                                             double& s1) const {
    const double d = static_cast<double>(kRelu ? relu_keep_nan(a) : a) - shift;
    s0 += d;
    s1 = fma(d, d, s1);
  }
};

}  // namespace gpu
}  // namespace fused_ops
