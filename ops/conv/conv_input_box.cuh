// Device helpers shared by the one-pass conv3d_group_norm_mean kernels (forward and backward):
// loading a box of one sample's input channels into shared memory (the input footprint of a
// box of output positions, zero outside the input: the padding), and the offsets of the
// convolution's taps inside such a box.
#pragma once

#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "conv/conv_kernels.h"

#include <cstdint>
#include <type_traits>

namespace fused_ops {
namespace gpu {

// A box of `channels` input channels x FD x FH x FW positions of one sample whose first element
// is input position (id0, ih0, iw0) (negative where it starts in the padding), and its layout
// in shared memory: row (channel, fd, fh) starts at element channel * channel_pitch +
// fd * plane_pitch + fh * row_pitch; 0 means dense (FW, FH * FW, FD * FH * FW). (The
// tensor-core forward pads them against bank conflicts: conv::footprint_pitches.)
struct InputBox {
  int channels;
  int id0, ih0, iw0;
  int FD, FH, FW;
  int row_pitch = 0, plane_pitch = 0, channel_pitch = 0;

  __host__ __device__ int row_stride() const { return row_pitch > 0 ? row_pitch : FW; }
  __host__ __device__ int plane_stride() const { return plane_pitch > 0 ? plane_pitch : FH * FW; }
  __host__ __device__ int channel_stride() const {
    return channel_pitch > 0 ? channel_pitch : FD * FH * FW;
  }
  // Where row (channel, fd, fh) starts.
  __host__ __device__ int row_start(int channel, int fd, int fh) const {
    return channel * channel_stride() + fd * plane_stride() + fh * row_stride();
  }
};

// Moves row (ci, fd, fh) of a box `rows` rows on (row index (ci * FD + fd) * FH + fh), by
// carries, not divisions: the loaders walk a block's rows with a fixed stride.
__device__ __forceinline__ void advance_box_row(int& ci, int& fd, int& fh, int rows,
                                                const InputBox& box) {
  fh += rows;
  while (fh >= box.FH) {
    fh -= box.FH;
    if (++fd == box.FD) {
      fd = 0;
      ++ci;
    }
  }
}

// Row r = (hi * mids + mid) * los + lo of a walk that steps a fixed number of rows at a time (a
// thread's rows of a block-strided loop), its three digits kept as it steps: the step's own
// digits are found once, so that a step takes one carry per digit, never a division or a loop
// (carrying row by row looped ~10 times a step where the rows per plane are few: the Gram
// sums' 5-row windows, 63.7M -> 59.5M instructions a launch at the Conv3d headline, H100,
// 2026-11-26). (The walks below keep advance_box_row: the step's digits take registers, and
// in the tensor-core forward kernels they spilled.)
struct StridedRow {
  int hi, mid, lo;

  __device__ StridedRow(int first, int step, int mids, int los)
      : hi(first / (mids * los)),
        mid(first / los % mids),
        lo(first % los),
        step_hi_(step / (mids * los)),
        step_mid_(step / los % mids),
        step_lo_(step % los),
        mids_(mids),
        los_(los) {}

  __device__ void advance() {
    hi += step_hi_;
    mid += step_mid_;
    lo += step_lo_;
    if (lo >= los_) {
      lo -= los_;
      ++mid;
    }
    if (mid >= mids_) {
      mid -= mids_;
      ++hi;
    }
  }

 private:
  int step_hi_, step_mid_, step_lo_, mids_, los_;
};

// Walks the box by (channel, fd, fh) rows, rows along W so that warps read coalesced: a warp
// takes 32 / FW rows at a time where they are that short (FW <= 16; lane l takes element
// l % FW of row l / FW), else one, and the row indices advance by carries, not divisions.
// put(i, src, inside) for the box element at shared-memory index i (box.row_start(channel, fd,
// fh) + fw), whose input is *src where `inside` (else zero: the padding; src is then
// `sample`). `sample` points at the box's first channel.
template <typename T, typename Put>
__device__ __forceinline__ void walk_input_box(const T* __restrict__ sample,
                                               const conv::Conv3dShape& s, const InputBox& box,
                                               const Put& put) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int D = static_cast<int>(s.D), H = static_cast<int>(s.H), W = static_cast<int>(s.W);
  const int rows_per_warp = box.FW <= kWarpSize / 2 ? kWarpSize / box.FW : 1;
  const int sub_row = rows_per_warp > 1 ? lane / box.FW : 0;
  const int first_fw = rows_per_warp > 1 ? lane % box.FW : lane;
  if (sub_row >= rows_per_warp) {
    return;  // lanes left over when FW does not divide 32
  }
  const int step = kWarpsPerBlock * rows_per_warp;
  const int r = warp * rows_per_warp + sub_row;  // its first row
  int fh = r % box.FH;
  int plane = r / box.FH;  // channel * FD + fd
  int fd = plane % box.FD;
  int ci = plane / box.FD;
  while (ci < box.channels) {
    const int id = box.id0 + fd;
    const int ih = box.ih0 + fh;
    const bool row_inside = id >= 0 && id < D && ih >= 0 && ih < H;
    const T* src =
        sample + (static_cast<int64_t>(ci) * D + id) * H * W + static_cast<int64_t>(ih) * W;
    for (int fw = first_fw; fw < box.FW; fw += kWarpSize) {
      const int iw = box.iw0 + fw;
      const bool inside = row_inside && iw >= 0 && iw < W;
      put(box.row_start(ci, fd, fh) + fw, inside ? src + iw : sample, inside);
    }
    advance_box_row(ci, fd, fh, step, box);
  }
}

// The box into x_s through registers, converted to the accumulation type.
template <typename T, typename acc_t>
__device__ __forceinline__ void load_input_box(const T* __restrict__ sample, acc_t* x_s,
                                               const conv::Conv3dShape& s, const InputBox& box) {
  walk_input_box(sample, s, box, [&](int i, const T* src, bool inside) {
    x_s[i] = inside ? ScalarOps<T>::to_acc(*src) : acc_t(0);
  });
}

// One asynchronous copy of 4 (16) bytes from global src to shared dst, zero-filled where
// `inside` is false (src is then not read, but must be a valid address); where cp.async is not
// available (before sm_80), a plain load and store.
__device__ __forceinline__ void cp_async_4(float* dst, const float* src, bool inside) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(inside ? 4 : 0));
#else
  *dst = inside ? *src : 0.0f;
#endif
}
__device__ __forceinline__ void cp_async_16(float* dst, const float* src, bool inside) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(inside ? 16 : 0));
#else
  *reinterpret_cast<float4*>(dst) =
      inside ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
#endif
}

// A float box into x_s by asynchronous copies (cp.async, zero-filled outside the input): every
// load of a warp is in flight at once, none waits in a register for its store. The caller
// waits (cp_async_wait_all) before the barrier that publishes x_s.
__device__ __forceinline__ void load_input_box_async(const float* __restrict__ sample, float* x_s,
                                                     const conv::Conv3dShape& s,
                                                     const InputBox& box) {
  walk_input_box(sample, s, box,
                 [&](int i, const float* src, bool inside) { cp_async_4(x_s + i, src, inside); });
}

// The same where every box row is a whole input row, 16-byte aligned: FW == W, iw0 == 0, W a
// multiple of 4 and at most 128, rows 16-byte aligned (the caller checks: full_input_rows; the
// box's pitches are multiples of 4).
// A row takes W / 4 lanes, each one 16-byte copy, so a warp moves 32 / (W / 4) rows per
// instruction instead of one element per lane (the walk above issues ~75-90 instructions per
// row). The plan prefers boxes that allow it (conv3d_group_norm_mean_onepass_plan.cpp):
// measured at the Conv3d headline (H100, 2026-11-23), the tensor-core forward 0.419 -> 0.324
// ms (benchmarks/h100-2026-11-23-whole-rows).
__device__ __forceinline__ void load_full_input_rows_async(const float* __restrict__ sample,
                                                           float* x_s, const conv::Conv3dShape& s,
                                                           const InputBox& box) {
  const int D = static_cast<int>(s.D), H = static_cast<int>(s.H), W = static_cast<int>(s.W);
  const int vectors_per_row = W / 4;
  const int rows_per_warp_step = kWarpSize / vectors_per_row;
  const int lane = threadIdx.x % kWarpSize;
  const int sub_row = lane / vectors_per_row;
  const int v = lane % vectors_per_row;
  if (sub_row >= rows_per_warp_step) {
    return;  // lanes left over when W / 4 does not divide 32
  }
  // Row r = (ci * FD + fd) * FH + fh, its indices advanced by carries (two divisions per
  // row were most of this loop's instructions).
  const int step = kWarpsPerBlock * rows_per_warp_step;
  const int r0 = (threadIdx.x / kWarpSize) * rows_per_warp_step + sub_row;
  int fh = r0 % box.FH;
  int fd = (r0 / box.FH) % box.FD;
  int ci = r0 / (box.FH * box.FD);
  while (ci < box.channels) {
    const int id = box.id0 + fd;
    const int ih = box.ih0 + fh;
    const bool inside = id >= 0 && id < D && ih >= 0 && ih < H;
    const float* src = inside ? sample + (static_cast<int64_t>(ci) * D + id) * H * W +
                                    static_cast<int64_t>(ih) * W + 4 * v
                              : sample;
    cp_async_16(x_s + box.row_start(ci, fd, fh) + 4 * v, src, inside);
    advance_box_row(ci, fd, fh, step, box);
  }
}

// The same with the rows' index arithmetic done once per block instead of per box: every box
// of a plan has the same shape, only its corner moves, so row r's (start in the box's layout,
// offset in x from the box's corner, fd, fh) go to a table in shared memory
// (fill_full_row_table, once; `table` rows = channels * FD * FH int4s), and each box's copies
// read them back (the per-box row walk was ~20% of the tensor-core forward's instructions,
// Nsight Compute at the Conv3d headline, H100, 2026-11-26). x offsets within the box's
// channels in 32 bits (the plan checks them: OnePassPlan::row_table_offset).
__device__ __forceinline__ void fill_full_row_table(int4* table, const conv::Conv3dShape& s,
                                                    const InputBox& shape) {
  const int D = static_cast<int>(s.D), H = static_cast<int>(s.H), W = static_cast<int>(s.W);
  const int rows = shape.channels * shape.FD * shape.FH;
  for (int r = threadIdx.x; r < rows; r += kThreads) {
    const int fh = r % shape.FH;
    const int fd = (r / shape.FH) % shape.FD;
    const int ci = r / (shape.FH * shape.FD);
    table[r] = make_int4(shape.row_start(ci, fd, fh), ((ci * D + fd) * H + fh) * W, fd, fh);
  }
}

// A thread's share of those copies: rows first_row, first_row + step, ... of a box, its 16-byte
// vector of each (the same for every box: set up once).
struct FullRowCopies {
  int first_row = 0, step = 1, vector = 0;
  bool active = false;  // (lanes left over when W / 4 does not divide 32 copy nothing)

  __device__ explicit FullRowCopies(const conv::Conv3dShape& s) {
    // (Meaningful where boxes are whole input rows: W a multiple of 4, at most 128.)
    const int vectors_per_row = max(static_cast<int>(s.W) / 4, 1);
    const int rows_per_warp_step = max(kWarpSize / vectors_per_row, 1);
    const int lane = threadIdx.x % kWarpSize;
    const int sub_row = lane / vectors_per_row;
    vector = lane % vectors_per_row;
    active = sub_row < rows_per_warp_step;
    step = kWarpsPerBlock * rows_per_warp_step;
    first_row = (threadIdx.x / kWarpSize) * rows_per_warp_step + sub_row;
  }

  __device__ void load(const float* __restrict__ sample, float* x_s, const conv::Conv3dShape& s,
                       const InputBox& box, const int4* table) const {
    if (!active) {
      return;
    }
    const int D = static_cast<int>(s.D), H = static_cast<int>(s.H), W = static_cast<int>(s.W);
    const int rows = box.channels * box.FD * box.FH;
    // The box's corner row (input (id0, ih0), column 0 of its first channel), in x.
    const int64_t corner = (static_cast<int64_t>(box.id0) * H + box.ih0) * W + 4 * vector;
    for (int r = first_row; r < rows; r += step) {
      const int4 row = table[r];
      const bool inside = static_cast<unsigned>(box.id0 + row.z) < static_cast<unsigned>(D) &&
                          static_cast<unsigned>(box.ih0 + row.w) < static_cast<unsigned>(H);
      const float* src = inside ? sample + (corner + row.y) : sample;
      cp_async_16(x_s + row.x + 4 * vector, src, inside);
    }
  }
};

// Whether load_full_input_rows_async can load every tile's box of a plan whose boxes have
// FW x positions starting at input column iw0 (the same for every tile when one box spans the
// output's width): x's data 16-byte aligned, the shared box too (its offset a multiple of 16).
__host__ __device__ inline bool full_input_rows(const conv::Conv3dShape& s, int64_t FW,
                                                int64_t boxes_w, const void* x) {
  return conv::boxes_are_whole_input_rows(s, FW, boxes_w) &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// A box into x_s the fastest way its type allows: float32 by asynchronous copies (whole rows
// by 16-byte copies where `full_rows`: see full_input_rows), other types through registers,
// converted to the accumulation type. The caller waits (cp_async_wait_all) before the barrier
// that publishes x_s.
template <typename T, typename acc_t>
__device__ __forceinline__ void load_footprint(const T* __restrict__ sample, acc_t* x_s,
                                               const conv::Conv3dShape& s, const InputBox& box,
                                               bool full_rows) {
  if constexpr (std::is_same_v<T, float>) {
    if (full_rows) {
      load_full_input_rows_async(sample, x_s, s, box);
    } else {
      load_input_box_async(sample, x_s, s, box);
    }
  } else {
    load_input_box(sample, x_s, s, box);
  }
}

// Offset of tap k = (ci, kd, kh, kw) (k < K) in an input box laid out with these pitches
// (InputBox), relative to the box element of an output position's first tap.
__device__ __forceinline__ int tap_offset_in_layout(int k, const conv::Conv3dShape& s,
                                                    int64_t row_pitch, int64_t plane_pitch,
                                                    int64_t channel_pitch) {
  const int64_t ci = k / (s.kD * s.kH * s.kW);
  const int64_t kd = (k / (s.kH * s.kW)) % s.kD;
  const int64_t kh = (k / s.kW) % s.kH;
  const int64_t kw = k % s.kW;
  return static_cast<int>(ci * channel_pitch + kd * s.dilation[0] * plane_pitch +
                          kh * s.dilation[1] * row_pitch + kw * s.dilation[2]);
}

// The same in a dense box of FD x FH x FW positions per channel.
__device__ __forceinline__ int tap_offset_in_box(int k, const conv::Conv3dShape& s, int64_t FD,
                                                 int64_t FH, int64_t FW) {
  return tap_offset_in_layout(k, s, FW, FH * FW, FD * FH * FW);
}

}  // namespace gpu
}  // namespace fused_ops
