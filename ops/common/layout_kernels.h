// Layout changes between channels-first and channels-last tensors: a batched matrix transpose
// out[b, j, i] = in[b, i, j] (in: batches x rows x cols, row-major; out: batches x cols x rows).
// NCDHW -> NDHWC is (N, C, D*H*W) -> (N, D*H*W, C), and back. Plain types (kernel_types.h).
#pragma once

#include "common/kernel_types.h"

#include <cstdint>

namespace fused_ops {

struct BatchedTransposeParams {
  const float* in;
  float* out;
  int64_t batches, rows, cols;
  // Each value rounded to the nearest TF32 value on the way (ties to even; infinities and NaN
  // kept): the input of a convolution whose tensor cores read it as TF32, which would
  // otherwise drop its low bits (a bias toward zero).
  bool round_to_tf32 = false;
};

// CUDA (defined only in builds with CUDA): 32 x 32 tiles through shared memory, so that both
// the reads and the writes are coalesced (ATen's strided copy, which .contiguous(memory_format)
// runs, reaches about half the copy bandwidth on these shapes).
extern const CudaKernel<BatchedTransposeParams> batched_transpose_cuda;

}  // namespace fused_ops
