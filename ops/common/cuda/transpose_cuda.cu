// Batched transpose (layout_kernels.h): each 256-thread block moves one 32 x 32 tile of one
// matrix: 32 x 8 threads read it row by row (coalesced along cols), write it through a padded
// shared-memory tile (no bank conflicts) column by column (coalesced along rows).
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/tf32_rounding.cuh"
#include "common/layout_kernels.h"

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

}  // namespace
}  // namespace gpu

const CudaKernel<BatchedTransposeParams> batched_transpose_cuda{gpu::transpose_workspace_bytes,
                                                                gpu::transpose_launch};

}  // namespace fused_ops
