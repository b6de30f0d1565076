// Batched transpose (layout_kernels.h), through a padded shared-memory tile so that both the
// reads (along cols) and the writes (along rows) are coalesced:
//   - where rows and cols are multiples of 4 and both pointers 16-byte aligned (e.g. an NCDHW
//     activation of 64 channels to NDHWC), each 256-thread block moves one 64 x 64 tile: every
//     thread loads 4 float4s of the input's rows (16 values in flight), then stores 4 float4s
//     of the output's rows. (The ConvTranspose3d headline's input, 16 x 64 x 32^3, on an H200,
//     2026-11-28: 84 us with the 32 x 32 tiles below, 81 us with these, 3.3 TB/s against a
//     copy ceiling of 4.2: benchmarks/h200-2026-11-28-patch-gram/notes.txt.)
//   - otherwise each block moves one 32 x 32 tile: 32 x 8 threads read it row by row, write it
//     column by column, 4 scalar values each.
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/tf32_rounding.cuh"
#include "common/layout_kernels.h"

#include <cstdint>

namespace fused_ops {
namespace gpu {
namespace {

// The tile this block moves: blocks run along a matrix's column tiles, then its row tiles,
// then the matrices.
struct TileOfBlock {
  const float* in;  // its matrix
  float* out;
  int64_t row0, col0;  // its first row and column
};

__device__ TileOfBlock tile_of_block(const BatchedTransposeParams& p, int64_t row_tiles,
                                     int64_t col_tiles, int tile) {
  int64_t block = blockIdx.x;
  const int64_t col_tile = block % col_tiles;
  block /= col_tiles;
  const int64_t row_tile = block % row_tiles;
  const int64_t batch = block / row_tiles;
  const int64_t offset = batch * p.rows * p.cols;
  return {p.in + offset, p.out + offset, row_tile * tile, col_tile * tile};
}

constexpr int kTile = 32;
constexpr int kTileRows = kThreads / kTile;  // 8: each thread moves 4 elements

__global__ void batched_transpose_kernel(BatchedTransposeParams p, int64_t row_tiles,
                                         int64_t col_tiles) {
  __shared__ float tile[kTile][kTile + 1];
  const auto [in, out, row0, col0] = tile_of_block(p, row_tiles, col_tiles, kTile);
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

constexpr int kVecTile = 64;
constexpr int kVecLanes = kVecTile / 4;          // 16 threads per tile row of float4s
constexpr int kVecRows = kThreads / kVecLanes;   // 16 tile rows per pass
constexpr int kVecPasses = kVecTile / kVecRows;  // 4 float4s a thread
static_assert(kVecPasses * kVecRows == kVecTile, "the passes cover the tile");

__global__ void __launch_bounds__(kThreads)
    batched_transpose_vec4_kernel(BatchedTransposeParams p, int64_t row_tiles, int64_t col_tiles) {
  __shared__ float tile[kVecTile][kVecTile + 1];
  const auto [in, out, row0, col0] = tile_of_block(p, row_tiles, col_tiles, kVecTile);
  const int lane = static_cast<int>(threadIdx.x) % kVecLanes;
  const int sub = static_cast<int>(threadIdx.x) / kVecLanes;
  // (rows and cols are multiples of 4: a float4 that starts inside lies inside.)
  float4 v[kVecPasses];
#pragma unroll
  for (int i = 0; i < kVecPasses; ++i) {
    const int64_t row = row0 + sub + i * kVecRows, col = col0 + 4 * lane;
    v[i] = row < p.rows && col < p.cols ? *reinterpret_cast<const float4*>(in + row * p.cols + col)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int i = 0; i < kVecPasses; ++i) {
    float* t = &tile[sub + i * kVecRows][4 * lane];
    t[0] = p.round_to_tf32 ? tf32_rounded(v[i].x) : v[i].x;
    t[1] = p.round_to_tf32 ? tf32_rounded(v[i].y) : v[i].y;
    t[2] = p.round_to_tf32 ? tf32_rounded(v[i].z) : v[i].z;
    t[3] = p.round_to_tf32 ? tf32_rounded(v[i].w) : v[i].w;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kVecPasses; ++i) {
    const int c = sub + i * kVecRows;
    const int64_t col = col0 + c, row = row0 + 4 * lane;
    if (col < p.cols && row < p.rows) {
      const float4 o = make_float4(tile[4 * lane][c], tile[4 * lane + 1][c], tile[4 * lane + 2][c],
                                   tile[4 * lane + 3][c]);
      *reinterpret_cast<float4*>(out + col * p.rows + row) = o;
    }
  }
}

bool vec4_transposable(const BatchedTransposeParams& p) {
  return p.rows % 4 == 0 && p.cols % 4 == 0 && reinterpret_cast<uintptr_t>(p.in) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
}

size_t transpose_workspace_bytes(const BatchedTransposeParams&) { return 0; }

// Launches `kernel` with one block per tile x tile piece of every matrix.
template <typename Kernel>
int launch_tiles(Kernel kernel, int64_t tile, const BatchedTransposeParams& p,
                 cudaStream_t stream) {
  const int64_t row_tiles = ceil_div(p.rows, tile), col_tiles = ceil_div(p.cols, tile);
  const int64_t blocks = p.batches * row_tiles * col_tiles;
  if (blocks == 0) {
    return cudaSuccess;
  }
  if (!grid_fits(blocks)) {
    return cudaErrorInvalidConfiguration;
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, row_tiles, col_tiles);
  return cudaGetLastError();
}

int transpose_launch(const BatchedTransposeParams& p, void* /*workspace*/, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  return vec4_transposable(p) ? launch_tiles(batched_transpose_vec4_kernel, kVecTile, p, s)
                              : launch_tiles(batched_transpose_kernel, kTile, p, s);
}

}  // namespace
}  // namespace gpu

const CudaKernel<BatchedTransposeParams> batched_transpose_cuda{gpu::transpose_workspace_bytes,
                                                                gpu::transpose_launch};

}  // namespace fused_ops
