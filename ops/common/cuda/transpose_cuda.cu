// Batched transpose (layout_kernels.h): each 256-thread block moves one 32 x 32 tile of one
// matrix: 32 x 8 threads read it row by row (coalesced along cols), write it through a padded
// shared-memory tile (no bank conflicts) column by column (coalesced along rows). And the
// in-place TF32 rounding: 16-byte vectors where the data is 16-byte aligned, a grid-stride loop.
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/tf32_rounding.cuh"
#include "common/layout_kernels.h"

#include <algorithm>

namespace fused_ops {
namespace gpu {
namespace {

constexpr int kTile = 32;
constexpr int kTileRows = kThreads / kTile;  // 8: each thread moves 4 elements

__global__ void batched_transpose_kernel(BatchedTransposeParams p, int64_t row_tiles,
                                         int64_t col_tiles) {
  __shared__ float tile[kTile][kTile + 1];
  int64_t block = blockIdx.x;
  const int64_t col_tile = block % col_tiles;
  block /= col_tiles;
  const int64_t row_tile = block % row_tiles;
  const int64_t batch = block / row_tiles;
  const float* in = p.in + batch * p.rows * p.cols;
  float* out = p.out + batch * p.rows * p.cols;
  const int64_t row0 = row_tile * kTile, col0 = col_tile * kTile;
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  for (int r = ty; r < kTile; r += kTileRows) {
    const int64_t row = row0 + r, col = col0 + tx;
    if (row < p.rows && col < p.cols) {
      const float v = in[row * p.cols + col];
      tile[r][tx] = p.round_to_tf32 ? tf32_rounded(v) : v;
    }
  }
  __syncthreads();
  for (int c = ty; c < kTile; c += kTileRows) {
    const int64_t col = col0 + c, row = row0 + tx;
    if (row < p.rows && col < p.cols) {
      out[col * p.rows + row] = tile[tx][c];
    }
  }
}

size_t transpose_workspace_bytes(const BatchedTransposeParams&) { return 0; }

int transpose_launch(const BatchedTransposeParams& p, void* /*workspace*/, void* stream) {
  const int64_t row_tiles = ceil_div(p.rows, kTile), col_tiles = ceil_div(p.cols, kTile);
  const int64_t blocks = p.batches * row_tiles * col_tiles;
  if (blocks == 0) {
    return cudaSuccess;
  }
  if (!grid_fits(blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  batched_transpose_kernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                             static_cast<cudaStream_t>(stream)>>>(p, row_tiles, col_tiles);
  return cudaGetLastError();
}

__global__ void round_to_tf32_kernel(Tf32RoundParams p) {
  const int64_t vectors = reinterpret_cast<uintptr_t>(p.data) % 16 == 0 ? p.count / 4 : 0;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  float4* const v = reinterpret_cast<float4*>(p.data);
  for (int64_t i = first; i < vectors; i += step) {
    float4 a = v[i];
    a.x = tf32_rounded(a.x), a.y = tf32_rounded(a.y);
    a.z = tf32_rounded(a.z), a.w = tf32_rounded(a.w);
    v[i] = a;
  }
  for (int64_t i = 4 * vectors + first; i < p.count; i += step) {
    p.data[i] = tf32_rounded(p.data[i]);
  }
}

size_t round_workspace_bytes(const Tf32RoundParams&) { return 0; }

int round_launch(const Tf32RoundParams& p, void* /*workspace*/, void* stream) {
  if (p.count == 0) {
    return cudaSuccess;
  }
  // (a grid-stride loop over at most 4096 blocks: a few rounds of the resident ones)
  const int64_t blocks = std::min<int64_t>(ceil_div(ceil_div(p.count, 4), kThreads), 4096);
  round_to_tf32_kernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                         static_cast<cudaStream_t>(stream)>>>(p);
  return cudaGetLastError();
}

}  // namespace
}  // namespace gpu

const CudaKernel<BatchedTransposeParams> batched_transpose_cuda{gpu::transpose_workspace_bytes,
                                                                gpu::transpose_launch};
const CudaKernel<Tf32RoundParams> round_to_tf32_cuda{gpu::round_workspace_bytes, gpu::round_launch};

}  // namespace fused_ops
