// The vectorised loops of the GroupNorm-family CPU kernels (RowOps, norm_cpu_utils.h),
// written once with at::vec::Vectorized and compiled once per CPU capability, each copy in its
// own namespace CPU_CAPABILITY as ATen's kernels are: by norm_cpu_vec.cpp (the library's
// default flags) and norm_cpu_vec_avx2.cpp (AVX2, FMA, F16C). Include only from those files.
//
// Values are loaded as vectors of acc_t (float for float, half and bfloat16, which are
// converted on load and store; double for double). Sums are accumulated in vectors over
// blocks of at most kBlock elements, with four independent accumulators (so that each lane
// adds at most kBlock / (4 * vector width) values: 8 for float with AVX2), and each block's
// total (its lanes added pairwise) is added to a double: the rounding error of a sum does not
// grow with its length. (Short blocks measured more accurate than long ones: relu_group_norm's
// rstd on relu(randn) groups is within float rounding of float64 with 8 values a lane, and was
// about twice as far as eager's with 32.)
#pragma once

#include "common/host_device.h"
#include "norm/norm_cpu_utils.h"

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#ifndef CPU_CAPABILITY
#error "norm_cpu_vec.h: define CPU_CAPABILITY (see norm_cpu_vec.cpp)"
#endif

namespace fused_ops {
namespace norm {
namespace cpu {
inline namespace CPU_CAPABILITY {

using at::vec::Vectorized;

// Elements per float-accumulated block of a sum.
constexpr int64_t kBlock = 256;
// Accumulator vectors (and vectors per step of the main loops).
constexpr int kVecsPerStep = 4;

// Loads and stores of one "unit" of scalar_t data as vectors of acc_t: one vector for float
// and double, two float vectors for half and bfloat16 (one Vectorized<scalar_t>).
template <typename scalar_t, bool kReduced = !std::is_same_v<scalar_t, acc_t<scalar_t>>>
struct VecIo {
  using Vec = Vectorized<acc_t<scalar_t>>;
  static constexpr int kVecs = 1;
  static constexpr int64_t kUnit = Vec::size();
  static void load(const scalar_t* p, Vec* v) { v[0] = Vec::loadu(p); }
  static void store(scalar_t* p, const Vec* v) { v[0].store(p); }
};

template <typename scalar_t>
struct VecIo<scalar_t, true> {
  using Vec = Vectorized<float>;
  static constexpr int kVecs = 2;
  static constexpr int64_t kUnit = Vectorized<scalar_t>::size();
  static_assert(kUnit == 2 * Vec::size());
  static void load(const scalar_t* p, Vec* v) {
    auto [lo, hi] = at::vec::convert_to_float<scalar_t>(Vectorized<scalar_t>::loadu(p));
    v[0] = lo;
    v[1] = hi;
  }
  static void store(scalar_t* p, const Vec* v) {
    at::vec::convert_from_float<scalar_t>(v[0], v[1]).store(p);
  }
};

// Non-temporal ("streaming") stores of one unit to 32-byte-aligned memory, with AVX2: they
// write whole cache lines to memory without first reading them (a plain store's
// read-for-ownership) and without evicting the data the kernel still reads. Worth it only
// for outputs too large to stay in cache for whoever reads them next (kStreamingStoreBytes).
// Other builds store plainly. A pass that streams ends with stream_fence(), so that its
// stores are visible to the threads that go on after the parallel region.
#if defined(CPU_CAPABILITY_AVX2)
constexpr bool kHasStreamingStores = true;
inline void stream_vec(float* p, const Vectorized<float>& v) { _mm256_stream_ps(p, v); }
inline void stream_vec(double* p, const Vectorized<double>& v) { _mm256_stream_pd(p, v); }
template <typename T>
inline void stream_vec(T* p, const Vectorized<T>& v) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), static_cast<__m256i>(v));
}
inline void stream_fence() { _mm_sfence(); }
#else
constexpr bool kHasStreamingStores = false;
template <typename T, typename V>
inline void stream_vec(T* p, const V& v) {
  v.store(p);
}
inline void stream_fence() {}
#endif

template <typename scalar_t>
inline void stream_unit(scalar_t* p, const typename VecIo<scalar_t>::Vec* v) {
  if constexpr (VecIo<scalar_t>::kVecs == 1) {
    stream_vec(p, v[0]);
  } else {
    stream_vec(p, at::vec::convert_from_float<scalar_t>(v[0], v[1]));
  }
}

// relu_keep_nan on a vector: clamp_min(v, 0) is `v < 0 ? 0 : v` lane by lane (one max
// instruction with AVX2), which keeps NaN and -0.0 as relu_keep_nan does.
template <typename Vec>
inline Vec relu_vec(const Vec& v) {
  return at::vec::clamp_min(v, Vec(0));
}

// The sum of a vector's lanes, pairwise (lane j + lane j + width / 2, and so on down): in
// registers with AVX2 (vec_reduce_all), through memory and in double otherwise.
template <typename Vec>
inline double lane_sum(const Vec& v) {
#if defined(CPU_CAPABILITY_AVX2)
  return static_cast<double>(at::vec::vec_reduce_all<typename Vec::value_type>(
      [](const Vec& a, const Vec& b) { return a + b; }, v));
#else
  typename Vec::value_type lanes[Vec::size()];
  v.store(lanes);
  double sums[Vec::size()];
  for (int64_t j = 0; j < Vec::size(); ++j) {
    sums[j] = static_cast<double>(lanes[j]);
  }
  for (int64_t width = Vec::size() / 2; width >= 1; width /= 2) {
    for (int64_t j = 0; j < width; ++j) {
      sums[j] += sums[j + width];
    }
  }
  return sums[0];
#endif
}

// Two blocked sums over a[0..n) and b[0..n) (b may alias a): vec(va, vb, acc1, acc2)
// accumulates one vector of each, scalar(a, b, acc1, acc2) one element.
template <typename scalar_t, typename VecFn, typename ScalarFn>
C10_ALWAYS_INLINE Sums blocked_sums(const scalar_t* a, const scalar_t* b, int64_t n,
                                    const VecFn& vec, const ScalarFn& scalar) {
  using Io = VecIo<scalar_t>;
  using Vec = typename Io::Vec;
  using acc = acc_t<scalar_t>;
  constexpr int64_t kUnitsPerStep = kVecsPerStep / Io::kVecs;
  constexpr int64_t kStep = kUnitsPerStep * Io::kUnit;
  static_assert(kBlock % kStep == 0);
  Sums total{0.0, 0.0};
  int64_t i = 0;
  const int64_t steps_end = n - n % kStep;
  while (i < steps_end) {
    const int64_t block_end = std::min(i + kBlock, steps_end);
    Vec s1[kVecsPerStep] = {Vec(0), Vec(0), Vec(0), Vec(0)};
    Vec s2[kVecsPerStep] = {Vec(0), Vec(0), Vec(0), Vec(0)};
    for (; i < block_end; i += kStep) {
      Vec va[kVecsPerStep];
      Vec vb[kVecsPerStep];
      for (int64_t u = 0; u < kUnitsPerStep; ++u) {
        Io::load(a + i + u * Io::kUnit, va + u * Io::kVecs);
        Io::load(b + i + u * Io::kUnit, vb + u * Io::kVecs);
      }
      for (int j = 0; j < kVecsPerStep; ++j) {
        vec(va[j], vb[j], s1[j], s2[j]);
      }
    }
    total.s1 += lane_sum((s1[0] + s1[1]) + (s1[2] + s1[3]));
    total.s2 += lane_sum((s2[0] + s2[1]) + (s2[2] + s2[3]));
  }
  if (i + Io::kUnit <= n) {  // fewer than kUnitsPerStep whole units left
    Vec s1[Io::kVecs];
    Vec s2[Io::kVecs];
    for (int j = 0; j < Io::kVecs; ++j) {
      s1[j] = Vec(0);
      s2[j] = Vec(0);
    }
    for (; i + Io::kUnit <= n; i += Io::kUnit) {
      Vec va[Io::kVecs];
      Vec vb[Io::kVecs];
      Io::load(a + i, va);
      Io::load(b + i, vb);
      for (int j = 0; j < Io::kVecs; ++j) {
        vec(va[j], vb[j], s1[j], s2[j]);
      }
    }
    for (int j = 0; j < Io::kVecs; ++j) {
      total.s1 += lane_sum(s1[j]);
      total.s2 += lane_sum(s2[j]);
    }
  }
  acc t1 = 0;
  acc t2 = 0;
  for (; i < n; ++i) {
    scalar(static_cast<acc>(a[i]), static_cast<acc>(b[i]), t1, t2);
  }
  total.s1 += static_cast<double>(t1);
  total.s2 += static_cast<double>(t2);
  return total;
}

// out[i] = f(a[i], b[i]) for i in [0, n) (b may alias a), as vectors where it can; with
// kStream, the whole steps from the first 32-byte-aligned element of out on stored with
// streaming stores (the caller fences).
template <bool kStream = false, typename scalar_t, typename VecFn, typename ScalarFn>
C10_ALWAYS_INLINE void map2(const scalar_t* a, const scalar_t* b, scalar_t* out, int64_t n,
                            const VecFn& vec, const ScalarFn& scalar) {
  using Io = VecIo<scalar_t>;
  using Vec = typename Io::Vec;
  using acc = acc_t<scalar_t>;
  constexpr int64_t kUnitsPerStep = kVecsPerStep / Io::kVecs;
  constexpr int64_t kStep = kUnitsPerStep * Io::kUnit;
  // One step of f(a, b) from element i into va.
  const auto step = [&](int64_t i, Vec(&va)[kVecsPerStep]) {
    Vec vb[kVecsPerStep];
    for (int64_t u = 0; u < kUnitsPerStep; ++u) {
      Io::load(a + i + u * Io::kUnit, va + u * Io::kVecs);
      Io::load(b + i + u * Io::kUnit, vb + u * Io::kVecs);
    }
    for (int j = 0; j < kVecsPerStep; ++j) {
      va[j] = vec(va[j], vb[j]);
    }
  };
  int64_t i = 0;
  if constexpr (kStream && kHasStreamingStores) {
    // The elements before out's first 32-byte boundary, one by one (out is aligned to its
    // element size, as tensors are); then the aligned steps.
    const int64_t misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out) % 32);
    const int64_t head =
        std::min<int64_t>(n, misaligned == 0 ? 0 : (32 - misaligned) / sizeof(scalar_t));
    for (; i < head; ++i) {
      out[i] = static_cast<scalar_t>(scalar(static_cast<acc>(a[i]), static_cast<acc>(b[i])));
    }
    for (; i + kStep <= n; i += kStep) {
      Vec va[kVecsPerStep];
      step(i, va);
      for (int64_t u = 0; u < kUnitsPerStep; ++u) {
        stream_unit(out + i + u * Io::kUnit, va + u * Io::kVecs);
      }
    }
  }
  for (; i + kStep <= n; i += kStep) {
    Vec va[kVecsPerStep];
    step(i, va);
    for (int64_t u = 0; u < kUnitsPerStep; ++u) {
      Io::store(out + i + u * Io::kUnit, va + u * Io::kVecs);
    }
  }
  for (; i + Io::kUnit <= n; i += Io::kUnit) {
    Vec va[Io::kVecs];
    Vec vb[Io::kVecs];
    Io::load(a + i, va);
    Io::load(b + i, vb);
    for (int j = 0; j < Io::kVecs; ++j) {
      va[j] = vec(va[j], vb[j]);
    }
    Io::store(out + i, va);
  }
  for (; i < n; ++i) {
    out[i] = static_cast<scalar_t>(scalar(static_cast<acc>(a[i]), static_cast<acc>(b[i])));
  }
}

// The RowOps (norm_cpu_utils.h): each runs over `rows` consecutive rows of n elements.

template <bool kRelu, typename scalar_t>
void shifted_sums(const scalar_t* x, int64_t rows, int64_t n, const acc_t<scalar_t>* shift,
                  Sums* sums) {
  using Vec = typename VecIo<scalar_t>::Vec;
  using acc = acc_t<scalar_t>;
  for (int64_t r = 0; r < rows; ++r) {
    const acc sh = shift[r];
    const Vec vshift(sh);
    sums[r] = blocked_sums(
        x + r * n, x + r * n, n,
        [vshift](const Vec& v, const Vec&, Vec& s1, Vec& s2) {
          const Vec d = (kRelu ? relu_vec(v) : v) - vshift;
          s1 = s1 + d;
          s2 = at::vec::fmadd(d, d, s2);
        },
        [sh](acc v, acc, acc& s1, acc& s2) {
          const acc d = (kRelu ? relu_keep_nan(v) : v) - sh;
          s1 += d;
          s2 += d * d;
        });
  }
}

template <typename scalar_t>
void relu_grad_sums(const scalar_t* dy, const scalar_t* x, int64_t rows, int64_t n,
                    acc_t<scalar_t> center, Sums* sums) {
  using Vec = typename VecIo<scalar_t>::Vec;
  using acc = acc_t<scalar_t>;
  const Vec vcenter(center);
  for (int64_t r = 0; r < rows; ++r) {
    sums[r] = blocked_sums(
        dy + r * n, x + r * n, n,
        [vcenter](const Vec& g, const Vec& v, Vec& ds, Vec& db) {
          ds = at::vec::fmadd(g, relu_vec(v) - vcenter, ds);
          db = db + g;
        },
        [center](acc g, acc v, acc& ds, acc& db) {
          ds += g * (relu_keep_nan(v) - center);
          db += g;
        });
  }
}

template <bool kStream, typename scalar_t>
void affine(const scalar_t* x, scalar_t* y, int64_t rows, int64_t n, const acc_t<scalar_t>* scale,
            const acc_t<scalar_t>* shift) {
  using Vec = typename VecIo<scalar_t>::Vec;
  using acc = acc_t<scalar_t>;
  for (int64_t r = 0; r < rows; ++r) {
    const acc a = scale[r];
    const acc b = shift[r];
    const Vec va(a);
    const Vec vb(b);
    map2<kStream>(
        x + r * n, x + r * n, y + r * n, n,
        [va, vb](const Vec& v, const Vec&) { return at::vec::fmadd(v, va, vb); },
        [a, b](acc v, acc) { return v * a + b; });
  }
  if constexpr (kStream) {
    stream_fence();
  }
}

template <bool kStream, typename scalar_t>
void relu_affine(const scalar_t* x, scalar_t* y, int64_t rows, int64_t n,
                 const CenteredAffine<acc_t<scalar_t>>* params) {
  using Vec = typename VecIo<scalar_t>::Vec;
  using acc = acc_t<scalar_t>;
  for (int64_t r = 0; r < rows; ++r) {
    const CenteredAffine<acc> a = params[r];
    const Vec center(a.center);
    const Vec scale(a.scale);
    const Vec shift(a.shift);
    map2<kStream>(
        x + r * n, x + r * n, y + r * n, n,
        [center, scale, shift](const Vec& v, const Vec&) {
          return at::vec::fmadd(relu_vec(v) - center, scale, shift);
        },
        [a](acc v, acc) { return (relu_keep_nan(v) - a.center) * a.scale + a.shift; });
  }
  if constexpr (kStream) {
    stream_fence();
  }
}

template <bool kStream, typename scalar_t>
void relu_affine_backward(const scalar_t* dy, const scalar_t* x, scalar_t* dx, int64_t rows,
                          int64_t n, const acc_t<scalar_t>* c1, const acc_t<scalar_t>* c2,
                          const acc_t<scalar_t>* c3) {
  using Vec = typename VecIo<scalar_t>::Vec;
  using acc = acc_t<scalar_t>;
  const Vec zero(0);
  for (int64_t r = 0; r < rows; ++r) {
    const acc a1 = c1[r];
    const acc a2 = c2[r];
    const acc a3 = c3[r];
    const Vec v1(a1);
    const Vec v2(a2);
    const Vec v3(a3);
    map2<kStream>(
        dy + r * n, x + r * n, dx + r * n, n,
        [v1, v2, v3, zero](const Vec& g, const Vec& v) {
          const Vec dr = at::vec::fmadd(v1, g, at::vec::fmadd(v2, v, v3));
          return Vec::blendv(zero, dr, v > zero);
        },
        [a1, a2, a3](acc g, acc v) { return v > acc(0) ? a1 * g + (a2 * v + a3) : acc(0); });
  }
  if constexpr (kStream) {
    stream_fence();
  }
}

// Channels-last sums. The data of a run of positions, (positions, channels) row-major, is a
// flat stream in which the channel repeats every `channels` elements; so with a period of
// lcm(channels, unit) elements, lane l of the period's vector j always holds channel
// (j * width + l) % channels. Where the period has at most kMaxPeriodVecs vectors (every
// channel count up to 8, and multiples of 8 up to 256, with float and AVX2) the stream is
// summed lane-wise, a strip of up to kStripVecs vectors of the period at a time with its
// accumulators in registers; other channel counts accumulate per channel in a buffer,
// position by position. Either way each lane adds at most kBlockPositions values in acc_t
// before they go to double sums.
constexpr int64_t kBlockPositions = 16;
constexpr int64_t kMaxPeriodVecs = 32;
constexpr int64_t kStripVecs = 4;

// Vectors [first, first + kVecs) of periods [q0, q1) of x (periods of `period` elements):
// their shifted sums, added lane-wise to d1 and d2 (indexed by lane of the period).
template <typename scalar_t, int64_t kVecs>
void strip_sums(const scalar_t* x, int64_t period, int64_t q0, int64_t q1, int64_t first,
                const typename VecIo<scalar_t>::Vec* vshift, double* d1, double* d2) {
  using Io = VecIo<scalar_t>;
  using Vec = typename Io::Vec;
  using acc = acc_t<scalar_t>;
  constexpr int64_t kWidth = Vec::size();
  static_assert(kVecs % Io::kVecs == 0);
  Vec a1[kVecs];
  Vec a2[kVecs];
  for (int64_t j = 0; j < kVecs; ++j) {
    a1[j] = Vec(0);
    a2[j] = Vec(0);
  }
  const scalar_t* xs = x + first * kWidth;
  for (int64_t q = q0; q < q1; ++q) {
    Vec v[kVecs];
    for (int64_t u = 0; u < kVecs / Io::kVecs; ++u) {
      Io::load(xs + q * period + u * Io::kUnit, v + u * Io::kVecs);
    }
    for (int64_t j = 0; j < kVecs; ++j) {
      const Vec d = v[j] - vshift[first + j];
      a1[j] = a1[j] + d;
      a2[j] = at::vec::fmadd(d, d, a2[j]);
    }
  }
  acc lanes[kWidth];
  for (int64_t j = 0; j < kVecs; ++j) {
    double* l1 = d1 + (first + j) * kWidth;
    double* l2 = d2 + (first + j) * kWidth;
    a1[j].store(lanes);
    for (int64_t l = 0; l < kWidth; ++l) {
      l1[l] += static_cast<double>(lanes[l]);
    }
    a2[j].store(lanes);
    for (int64_t l = 0; l < kWidth; ++l) {
      l2[l] += static_cast<double>(lanes[l]);
    }
  }
}

template <typename scalar_t>
void periodic_channels_last_sums(const scalar_t* x, int64_t positions, int64_t channels,
                                 int64_t period_vecs, const acc_t<scalar_t>* shift, double* s1,
                                 double* s2) {
  using Io = VecIo<scalar_t>;
  using Vec = typename Io::Vec;
  using acc = acc_t<scalar_t>;
  constexpr int64_t kWidth = Vec::size();
  const int64_t period = period_vecs * kWidth;  // elements
  // The shifts in the layout of the period's lanes; lane-wise double sums.
  acc lane_shift[kMaxPeriodVecs * kWidth];
  for (int64_t l = 0; l < period; ++l) {
    lane_shift[l] = shift[l % channels];
  }
  Vec vshift[kMaxPeriodVecs];
  for (int64_t j = 0; j < period_vecs; ++j) {
    vshift[j] = Vec::loadu(lane_shift + j * kWidth);
  }
  double d1[kMaxPeriodVecs * kWidth] = {};
  double d2[kMaxPeriodVecs * kWidth] = {};
  const int64_t count = positions * channels;
  const int64_t periods = count / period;
  for (int64_t q0 = 0; q0 < periods; q0 += kBlockPositions) {
    const int64_t q1 = std::min(periods, q0 + kBlockPositions);
    int64_t j = 0;
    for (; j + kStripVecs <= period_vecs; j += kStripVecs) {
      strip_sums<scalar_t, kStripVecs>(x, period, q0, q1, j, vshift, d1, d2);
    }
    const int64_t rest = period_vecs - j;  // a multiple of Io::kVecs
    if (rest == 3) {
      strip_sums<scalar_t, (Io::kVecs == 1 ? 3 : 2)>(x, period, q0, q1, j, vshift, d1, d2);
    } else if (rest == 2) {
      strip_sums<scalar_t, 2>(x, period, q0, q1, j, vshift, d1, d2);
    } else if (rest == 1) {
      strip_sums<scalar_t, Io::kVecs>(x, period, q0, q1, j, vshift, d1, d2);
    }
  }
  for (int64_t l = 0; l < period; ++l) {
    s1[l % channels] += d1[l];
    s2[l % channels] += d2[l];
  }
  for (int64_t i = periods * period; i < count; ++i) {  // the last positions, less than a period
    const int64_t c = i % channels;
    const acc d = static_cast<acc>(x[i]) - shift[c];
    s1[c] += static_cast<double>(d);
    s2[c] += static_cast<double>(d * d);
  }
}

template <typename scalar_t>
void buffered_channels_last_sums(const scalar_t* x, int64_t positions, int64_t channels,
                                 const acc_t<scalar_t>* shift, double* s1, double* s2) {
  using Io = VecIo<scalar_t>;
  using Vec = typename Io::Vec;
  using acc = acc_t<scalar_t>;
  constexpr int64_t kWidth = Vec::size();
  const int64_t vec_channels = channels - channels % Io::kUnit;
  // The block's sums, channel by channel.
  std::vector<acc> b1(channels);
  std::vector<acc> b2(channels);
  for (int64_t p0 = 0; p0 < positions; p0 += kBlockPositions) {
    const int64_t p1 = std::min(positions, p0 + kBlockPositions);
    std::fill(b1.begin(), b1.end(), acc(0));
    std::fill(b2.begin(), b2.end(), acc(0));
    for (int64_t p = p0; p < p1; ++p) {
      const scalar_t* xp = x + p * channels;
      for (int64_t c = 0; c < vec_channels; c += Io::kUnit) {
        Vec v[Io::kVecs];
        Io::load(xp + c, v);
        for (int j = 0; j < Io::kVecs; ++j) {
          const int64_t cj = c + j * kWidth;
          const Vec d = v[j] - Vec::loadu(shift + cj);
          (Vec::loadu(b1.data() + cj) + d).store(b1.data() + cj);
          at::vec::fmadd(d, d, Vec::loadu(b2.data() + cj)).store(b2.data() + cj);
        }
      }
      for (int64_t c = vec_channels; c < channels; ++c) {
        const acc d = static_cast<acc>(xp[c]) - shift[c];
        b1[c] += d;
        b2[c] += d * d;
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      s1[c] += static_cast<double>(b1[c]);
      s2[c] += static_cast<double>(b2[c]);
    }
  }
}

template <typename scalar_t>
void channels_last_shifted_sums(const scalar_t* x, int64_t positions, int64_t channels,
                                const acc_t<scalar_t>* shift, double* s1, double* s2) {
  using Io = VecIo<scalar_t>;
  const int64_t period_units = channels / std::gcd(channels, Io::kUnit);  // lcm / unit
  const int64_t period_vecs = period_units * Io::kVecs;
  if (period_vecs <= kMaxPeriodVecs) {
    periodic_channels_last_sums(x, positions, channels, period_vecs, shift, s1, s2);
  } else {
    buffered_channels_last_sums(x, positions, channels, shift, s1, s2);
  }
}

template <typename scalar_t>
RowOps<scalar_t> make_row_ops() {
  return RowOps<scalar_t>{shifted_sums</*kRelu=*/false, scalar_t>,
                          shifted_sums</*kRelu=*/true, scalar_t>,
                          relu_grad_sums<scalar_t>,
                          affine</*kStream=*/false, scalar_t>,
                          affine</*kStream=*/true, scalar_t>,
                          relu_affine</*kStream=*/false, scalar_t>,
                          relu_affine</*kStream=*/true, scalar_t>,
                          relu_affine_backward</*kStream=*/false, scalar_t>,
                          relu_affine_backward</*kStream=*/true, scalar_t>,
                          channels_last_shifted_sums<scalar_t>};
}

}  // namespace CPU_CAPABILITY
}  // namespace cpu
}  // namespace norm
}  // namespace fused_ops
