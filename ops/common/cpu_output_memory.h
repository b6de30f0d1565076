// Memory for the operators' large CPU outputs (y of relu_group_norm, the backwards' grad_input,
// ConvTranspose3dReLUGroupNorm's output), kept and handed out again once freed.
//
// Why: glibc maps every allocation over 32 MiB anew (and smaller ones until its threshold has
// grown), and Linux zeroes each page of fresh memory at its first write. For an output the
// size of its input, that costs about as much as the kernel's whole pass: relu_group_norm
// forward on (8, 128, 24^3) floats (57 MB), one thread, measured 13.5 ms writing a fresh
// (huge-page) output, 9.5 ms writing memory that is already mapped, 8.4 ms with streaming
// stores there (norm_cpu_utils.h), against 6.4 ms for a copy_ of x into an existing tensor
// (2026-11-22, benchmarks/cpu_norm_timing.py, median of 5). An output the caller has freed
// (a loop's previous iteration, a layer's previous call) is kept mapped here, up to a bound,
// and the next output of the same rounded size reuses it: no fault, no zeroing.
//
// What is kept: at most kMaxCachedBlocks freed blocks of at least kMinCachedBytes, together
// at most FUSED_OPS_CPU_OUTPUT_CACHE_MB MiB (environment variable, read once; default 512;
// 0 keeps nothing); the oldest go first. Blocks are sized in whole 2 MiB pages, 2 MiB-aligned,
// and given transparent huge pages (madvise; a hint). Smaller outputs come from ATen's CPU
// allocator as usual. Tensors made here are ordinary resizable CPU tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>

namespace fused_ops {

// Outputs of fewer bytes come from ATen's allocator (glibc's heap reuses such blocks itself).
constexpr int64_t kMinCachedBytes = int64_t{2} << 20;
constexpr int kMaxCachedBlocks = 4;

// An uninitialised contiguous CPU tensor of `sizes` and `dtype`, its memory from the cache
// above when it is large.
at::Tensor empty_cpu_output(c10::IntArrayRef sizes, c10::ScalarType dtype);

// An uninitialised contiguous tensor shaped like `input`, with its dtype and device: from
// empty_cpu_output for a CPU input with concrete sizes, else at::empty.
at::Tensor empty_output_like(const at::Tensor& input);

// The bytes of freed blocks kept now (for tests).
int64_t cpu_output_cache_bytes();

}  // namespace fused_ops
