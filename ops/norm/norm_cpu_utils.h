// CPU building blocks shared by the GroupNorm-family kernels (relu_group_norm_cpu.cpp,
// group_norm_mean_cpu.cpp): the vectorised loops they call (RowOps, written in
// norm_cpu_vec.h and compiled once per CPU capability), and how they split and order the
// work.
//
// Statistics come from sums of (v - shift) and (v - shift)^2 over a span of contiguous values
// (a group for relu_group_norm, a row (n, c) for group_norm_mean), around a shift close to
// the span's mean (sampled_shift): the "shifted data" method of group_norm_math.h, which
// keeps the variance accurate when |mean| >> std. RowOps accumulate the sums in float (double
// for double data) in short blocks that are totalled in double, so the rounding error does
// not grow with the span's length. A span is cut into chunks of kChunk elements, summed
// separately and added in double, in order; rows of a group are combined with the exact
// formula for equal-sized parts (combine_equal_parts). The chunks and the order of every
// addition depend on the sizes only, never on the number of threads or on which schedule
// runs: results are bitwise equal across runs and thread counts.
//
// Two schedules for the two-pass kernels (use_group_tasks picks one, run_two_passes runs it):
//   - one task per (n, g) group, which gathers the group's statistics and then makes its
//     second pass over the group while the group is still in cache; used when the groups
//     share out evenly between the threads (or there is one thread, or little work);
//   - otherwise (few or unevenly shared groups, e.g. N * G = 1 on 2 threads), a parallel
//     pass over all chunks, the per-group step, and a second parallel pass over all chunks.
//
// Fresh memory costs a page fault per page at its first write: the kernels ask for huge pages
// for large outputs (advise_huge_pages), which makes the faults 512 times fewer. What is left,
// Linux zeroing each fresh page before the first write, costs about as much as the write
// itself, and bounds a kernel that writes a fresh output at about half the bandwidth of a
// copy into an existing tensor; so the large outputs' memory is kept and reused once freed
// (common/cpu_output_memory.h), and the largest are written with streaming stores
// (kStreamingStoreBytes).
#pragma once

#include "common/group_norm_shape.h"
#include "common/host_device.h"
#include "norm/group_norm_math.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace fused_ops {
namespace norm {
namespace cpu {

// The type arithmetic runs in: float for float, half and bfloat16; double for double.
template <typename scalar_t>
using acc_t = at::opmath_type<scalar_t>;

// Two sums over some values, in double.
struct Sums {
  double s1;
  double s2;
};

// The vectorised loops, for one element type. Each runs over `rows` consecutive rows of `n`
// elements (row r at x + r * n), with row r's parameters at index r. Sums are accumulated
// in acc_t<scalar_t> in blocks (norm_cpu_vec.h) and returned in double. The elementwise ones
// come twice: `*_streaming` writes with streaming stores (norm_cpu_vec.h), for outputs of at
// least kStreamingStoreBytes; the results are the same.
template <typename scalar_t>
struct RowOps {
  using acc = acc_t<scalar_t>;
  // sums[r] = {sum(v - shift[r]), sum((v - shift[r])^2)} over the row's v = x.
  void (*shifted_sums)(const scalar_t* x, int64_t rows, int64_t n, const acc* shift, Sums* sums);
  // The same over v = relu(x).
  void (*relu_shifted_sums)(const scalar_t* x, int64_t rows, int64_t n, const acc* shift,
                            Sums* sums);
  // sums[r] = {sum(dy * (relu(x) - center)), sum(dy)}.
  void (*relu_grad_sums)(const scalar_t* dy, const scalar_t* x, int64_t rows, int64_t n, acc center,
                         Sums* sums);
  // y = x * scale[r] + shift[r].
  void (*affine)(const scalar_t* x, scalar_t* y, int64_t rows, int64_t n, const acc* scale,
                 const acc* shift);
  void (*affine_streaming)(const scalar_t* x, scalar_t* y, int64_t rows, int64_t n,
                           const acc* scale, const acc* shift);
  // y = (relu(x) - a[r].center) * a[r].scale + a[r].shift (group_norm_math.h).
  void (*relu_affine)(const scalar_t* x, scalar_t* y, int64_t rows, int64_t n,
                      const CenteredAffine<acc>* a);
  void (*relu_affine_streaming)(const scalar_t* x, scalar_t* y, int64_t rows, int64_t n,
                                const CenteredAffine<acc>* a);
  // dx = x > 0 ? c1[r] * dy + c2[r] * x + c3[r] : 0.
  void (*relu_affine_backward)(const scalar_t* dy, const scalar_t* x, scalar_t* dx, int64_t rows,
                               int64_t n, const acc* c1, const acc* c2, const acc* c3);
  void (*relu_affine_backward_streaming)(const scalar_t* dy, const scalar_t* x, scalar_t* dx,
                                         int64_t rows, int64_t n, const acc* c1, const acc* c2,
                                         const acc* c3);
  // For x stored (positions, channels): s1[c] += sum_p (x[p, c] - shift[c]) and
  // s2[c] += sum_p (x[p, c] - shift[c])^2 over p in [0, positions).
  void (*channels_last_shifted_sums)(const scalar_t* x, int64_t positions, int64_t channels,
                                     const acc* shift, double* s1, double* s2);
};

// The fastest RowOps this CPU runs (norm_cpu_vec.cpp): the AVX2 build where ATen's own
// kernels use AVX2 or AVX-512, else the build with the library's default flags.
template <typename scalar_t>
const RowOps<scalar_t>& row_ops();

// Elements per chunk of a row: the unit of work of the parallel passes and of the
// statistics' summation order.
constexpr int64_t kChunk = 16384;
// The least work (elements) worth a parallel task of its own, for passes that write or read
// two tensors; a pass that only reads one takes twice as many (kMinReadTaskElements).
constexpr int64_t kMinTaskElements = 16384;
constexpr int64_t kMinReadTaskElements = 2 * kMinTaskElements;

inline int64_t chunks_per_row(int64_t row_length) { return (row_length + kChunk - 1) / kChunk; }

// The total of parts[0..count), count > 0, added in order (the order every schedule uses).
inline Sums add_in_order(const Sums* parts, int64_t count) {
  Sums total = parts[0];
  for (int64_t i = 1; i < count; ++i) {
    total.s1 += parts[i].s1;
    total.s2 += parts[i].s2;
  }
  return total;
}

// The pieces of a run of `rows` rows of `row_length` elements that a row pass works on, by
// index: runs of whole rows of about kChunk elements together when a row is at most one
// chunk, else the chunks of each row (as parallel_over_chunks cuts them). They depend on the
// sizes only.
struct RowPiece {
  int64_t first;   // first row, relative to the run
  int64_t count;   // rows
  int64_t begin;   // first element of each row
  int64_t length;  // elements of each row
};

class RowPieces {
 public:
  RowPieces(int64_t rows, int64_t row_length)
      : rows_(rows),
        row_length_(row_length),
        rows_per_piece_(row_length <= kChunk ? std::max<int64_t>(1, kChunk / row_length) : 1),
        chunks_(chunks_per_row(row_length)) {}
  int64_t size() const {
    return row_length_ <= kChunk ? (rows_ + rows_per_piece_ - 1) / rows_per_piece_
                                 : rows_ * chunks_;
  }
  // Elements of a piece (the last one may have fewer).
  int64_t piece_elements() const { return std::min(kChunk, rows_per_piece_ * row_length_); }
  RowPiece operator[](int64_t q) const {
    if (row_length_ <= kChunk) {
      const int64_t first = q * rows_per_piece_;
      return RowPiece{first, std::min(rows_per_piece_, rows_ - first), 0, row_length_};
    }
    const int64_t begin = (q % chunks_) * kChunk;
    return RowPiece{q / chunks_, 1, begin, std::min(kChunk, row_length_ - begin)};
  }

 private:
  int64_t rows_;
  int64_t row_length_;
  int64_t rows_per_piece_;
  int64_t chunks_;
};

// Whether a two-pass kernel (sums over each group, then an elementwise pass over the group
// that needs them: relu_group_norm forward and backward) runs one task per group (see the top
// of this file): true when the work is too small to share, or when `groups` tasks share out
// between the threads with at most 25% imbalance.
inline bool use_group_tasks(int64_t groups, int64_t group_size) {
  const int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  if (threads <= 1 || groups * group_size < 2 * kMinTaskElements) {
    return true;
  }
  const int64_t rounds = (groups + threads - 1) / threads;
  return groups >= threads && 4 * rounds * threads <= 5 * groups;
}

// Runs a two-pass kernel over `groups` groups of `group_size` elements: sum(ng, p) for the
// group's sum_pieces pieces, then finish(ng), then write(ng, q) for its write_pieces pieces,
// each piece of at most kChunk elements (sum_piece_elements, write_piece_elements: their
// usual size, for the task sizes). With group_tasks, one task per group does all three; else
// each of the passes is shared between the threads over all the pieces of all the groups,
// with the finish steps in between. Pieces write disjoint results and what a call computes
// does not depend on the schedule (which only orders and shares the calls): results are the
// same for every thread count. The write pieces of a task run last to first, so that the data
// read last by the sums, still in the nearest cache, is read again first.
template <typename Sum, typename Finish, typename Write>
void run_two_passes(bool group_tasks, int64_t groups, int64_t group_size, int64_t sum_pieces,
                    int64_t sum_piece_elements, int64_t write_pieces, int64_t write_piece_elements,
                    const Sum& sum, const Finish& finish, const Write& write) {
  auto grain_of = [](int64_t elements) {
    return std::max<int64_t>(1, kMinTaskElements / std::max<int64_t>(elements, 1));
  };
  if (group_tasks) {
    at::parallel_for(0, groups, grain_of(group_size), [&](int64_t begin, int64_t end) {
      for (int64_t ng = begin; ng < end; ++ng) {
        for (int64_t p = 0; p < sum_pieces; ++p) {
          sum(ng, p);
        }
        finish(ng);
        for (int64_t q = write_pieces - 1; q >= 0; --q) {
          write(ng, q);
        }
      }
    });
    return;
  }
  at::parallel_for(0, groups * sum_pieces, grain_of(sum_piece_elements),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = begin; i < end; ++i) {
                       sum(i / sum_pieces, i % sum_pieces);
                     }
                   });
  for (int64_t ng = 0; ng < groups; ++ng) {
    finish(ng);
  }
  at::parallel_for(0, groups * write_pieces, grain_of(write_piece_elements),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = end - 1; i >= begin; --i) {
                       write(i / write_pieces, i % write_pieces);
                     }
                   });
}

// Calls f(row, rows, begin, length) in parallel over `rows` rows of `row_length` elements:
// for rows [row, row + rows) whole (begin = 0, length = row_length) when a row is at most
// one chunk, else for one chunk [begin, begin + length) of one row (rows = 1). A task does at
// least min_task_elements elements when there is that much work.
template <typename F>
void parallel_over_chunks(int64_t rows, int64_t row_length, const F& f,
                          int64_t min_task_elements = kMinTaskElements) {
  if (row_length <= kChunk) {
    const int64_t grain =
        std::max<int64_t>(1, min_task_elements / std::max<int64_t>(row_length, 1));
    at::parallel_for(0, rows, grain,
                     [&](int64_t first, int64_t last) { f(first, last - first, 0, row_length); });
    return;
  }
  const int64_t chunks = chunks_per_row(row_length);
  const int64_t grain = std::max<int64_t>(1, min_task_elements / kChunk);
  at::parallel_for(0, rows * chunks, grain, [&](int64_t first, int64_t last) {
    for (int64_t item = first; item < last; ++item) {
      const int64_t row = item / chunks;
      const int64_t begin = (item % chunks) * kChunk;
      f(row, 1, begin, std::min(kChunk, row_length - begin));
    }
  });
}

// The shift of the sums over x[0], x[stride], ..., x[(n - 1) * stride] (of their relu when
// kRelu): the mean of up to kShiftSamples of those values, evenly spaced. The
// closer the shift is to the mean, in units of the standard deviation, the less rounding
// the variance from shifted sums suffers (M2 = s2 - s1^2 / n loses about
// 1 + ((mean - shift) / std)^2 times the rounding error of the sums); a single value of the
// data can be several deviations off, a mean of samples is off by about std / sqrt(samples).
constexpr int64_t kShiftSamples = 8;

template <bool kRelu, typename scalar_t>
acc_t<scalar_t> sampled_shift(const scalar_t* x, int64_t n, int64_t stride = 1) {
  const int64_t samples = std::min(n, kShiftSamples);
  const int64_t step = n / samples * stride;
  double total[2] = {0.0, 0.0};
  for (int64_t i = 0; i < samples; ++i) {
    const double v = static_cast<double>(x[i * step]);
    total[i % 2] += kRelu ? relu_keep_nan(v) : v;
  }
  return static_cast<acc_t<scalar_t>>((total[0] + total[1]) / static_cast<double>(samples));
}

// Outputs of at least this many bytes are written with streaming stores (RowOps): half the
// last-level cache of the benchmarks' CPU (32 MiB, shared with the input the kernel reads):
// an output that size would mostly be evicted before its reader comes, and its lines would
// first be read from memory by plain stores (read-for-ownership). relu_group_norm forward,
// one thread, output memory already mapped (common/cpu_output_memory.h), plain vs streaming
// stores (2026-11-22, benchmarks/cpu_norm_timing.py, median of 7): (4, 64, 24^3), 14 MB:
// 2.21 vs 1.59 ms; (8, 128, 24^3), 57 MB: 9.47 vs 8.38 ms; (1, 8, 128^3), 67 MB: 11.4 vs
// 9.8 ms. Into fresh memory (zeroed by the kernel at the first write, so already in cache)
// they gain nothing: 13.5 vs 14.8 ms at (8, 128, 24^3).
constexpr int64_t kStreamingStoreBytes = int64_t{16} << 20;

// Which of an elementwise RowOps loop's two variants writes an output of `bytes` bytes: the
// streaming one from kStreamingStoreBytes on.
template <typename Loop>
Loop loop_for_output(int64_t bytes, Loop plain, Loop streaming) {
  return bytes >= kStreamingStoreBytes ? streaming : plain;
}

// Outputs of at least this many bytes are backed by transparent huge pages where the system
// allows it (advise_huge_pages).
constexpr int64_t kHugePageAdviceBytes = int64_t{2} << 20;

// Asks Linux to back the 2 MiB-aligned part of a kernel's output, of `bytes` bytes, with
// transparent huge pages (a hint: without THP, or on other systems, nothing happens). A
// large output is often fresh memory (glibc maps allocations over 32 MiB anew each time, and
// smaller ones too until its threshold has grown, or after it has given the top of its heap
// back): the first write to each 4 KiB page then faults, and the faults cost more than the
// kernel's whole pass over its data (on the 2-core VM of the benchmarks, 16 M float elements:
// ~120 ms of faults against ~13 ms for the write; a 3 MB output: ~1 ms); with 2 MiB pages
// there are 512 times fewer. Memory that is already mapped keeps its pages (the hint applies
// to later faults).
inline void advise_huge_pages(void* data, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < kHugePageAdviceBytes) {
    return;
  }
  constexpr uintptr_t kHugePage = uintptr_t{1} << 21;
  const uintptr_t first = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (first + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (first + static_cast<uintptr_t>(bytes)) & ~(kHugePage - 1);
  if (end > begin) {
    (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // hint only
  }
#else
  (void)data;
  (void)bytes;
#endif
}

// Optional per-channel parameter as double (1 or 0 when absent).
template <typename scalar_t>
inline double param_or(const scalar_t* p, int64_t c, double absent) {
  return p != nullptr ? static_cast<double>(p[c]) : absent;
}

// The GroupNorm affine gradients (group_norm_math.h), channel by channel, samples in order:
// dweight[c] = sum_n weight_grad_term(ds, db, mean, rstd, center) and dbias[c] = sum_n db,
// with {ds, db} = sums(n, c) the channel's sums of dy * (x - center) and dy in sample n, center
// the group's saved mean when `sums_around_mean`, else 0. dweight and dbias may be null (not
// written).
template <typename scalar_t, typename stat_t, typename SumsOf>
void affine_param_grads(const GroupNormShape& s, const stat_t* mean, const stat_t* rstd,
                        bool sums_around_mean, const SumsOf& sums, scalar_t* dweight,
                        scalar_t* dbias) {
  if (dweight == nullptr && dbias == nullptr) {
    return;
  }
  const int64_t Cg = s.channels_per_group();
  for (int64_t c = 0; c < s.C; ++c) {
    const int64_t g = c / Cg;
    double dw = 0.0;
    double db = 0.0;
    for (int64_t n = 0; n < s.N; ++n) {
      const int64_t ng = n * s.G + g;
      const auto [ds_nc, db_nc] = sums(n, c);
      const double mean_ng = static_cast<double>(mean[ng]);
      dw += weight_grad_term(ds_nc, db_nc, mean_ng, static_cast<double>(rstd[ng]),
                             sums_around_mean ? mean_ng : 0.0);
      db += db_nc;
    }
    if (dweight != nullptr) dweight[c] = static_cast<scalar_t>(dw);
    if (dbias != nullptr) dbias[c] = static_cast<scalar_t>(db);
  }
}

}  // namespace cpu
}  // namespace norm
}  // namespace fused_ops
