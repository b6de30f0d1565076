// CPU building blocks shared by the GroupNorm-family kernels.
//
// Statistics are gathered per (n, c) row of the input viewed as (N, C, HxW) (one pass over
// the row, so rows can be processed in parallel even when N * G is small) and then combined
// per (n, g). Each row is summed in double after subtracting its first value (the
// "shifted data" method), which keeps the variance accurate when |mean| >> std; rows of a
// group are combined with the exact pairwise (Chan et al.) formula for equal-sized parts.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fused_ops {
namespace cpu {

// Mean and M2 (the sum of squared deviations from the mean) of some values.
struct Moments {
  double mean = 0.0;
  double m2 = 0.0;
};

// relu that keeps NaN (as torch.relu does): NaN < 0 is false.
inline double relu(double v) { return v < 0.0 ? 0.0 : v; }

template <bool kRelu, typename scalar_t>
inline double load_value(scalar_t v) {
  const double d = static_cast<double>(v);
  return kRelu ? relu(d) : d;
}

// Moments of row[0..count) (of relu(row) when kRelu); count > 0.
template <bool kRelu, typename scalar_t>
Moments row_moments(const scalar_t* row, int64_t count) {
  const double shift = load_value<kRelu>(row[0]);
  // Four independent accumulators break the add dependency chain.
  double s1[4] = {0.0, 0.0, 0.0, 0.0};
  double s2[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    for (int j = 0; j < 4; ++j) {
      const double v = load_value<kRelu>(row[i + j]) - shift;
      s1[j] += v;
      s2[j] += v * v;
    }
  }
  for (; i < count; ++i) {
    const double v = load_value<kRelu>(row[i]) - shift;
    s1[0] += v;
    s2[0] += v * v;
  }
  const double sum = (s1[0] + s1[1]) + (s1[2] + s1[3]);
  const double sum_sq = (s2[0] + s2[1]) + (s2[2] + s2[3]);
  Moments m;
  m.mean = shift + sum / static_cast<double>(count);
  m.m2 = std::max(sum_sq - sum * sum / static_cast<double>(count), 0.0);
  return m;
}

// Combines the moments of `num_parts` parts of `part_count` elements each.
inline Moments combine_equal_parts(const Moments* parts, int64_t num_parts, int64_t part_count) {
  double mean = 0.0;
  for (int64_t i = 0; i < num_parts; ++i) {
    mean += parts[i].mean;
  }
  mean /= static_cast<double>(num_parts);
  double m2 = 0.0;
  double spread = 0.0;
  for (int64_t i = 0; i < num_parts; ++i) {
    const double d = parts[i].mean - mean;
    m2 += parts[i].m2;
    spread += d * d;
  }
  return Moments{mean, m2 + spread * static_cast<double>(part_count)};
}

// Number of rows of `row_length` elements per parallel task: about 32k elements a task.
inline int64_t rows_per_task(int64_t row_length) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(row_length, 1));
}

}  // namespace cpu
}  // namespace fused_ops
