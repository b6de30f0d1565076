// CPU building blocks shared by the GroupNorm-family kernels.
//
// Statistics are gathered per (n, c) row of the input viewed as (N, C, HxW) (one pass over
// the row, so rows can be processed in parallel even when N * G is small) and then combined
// per (n, g). Each row is summed in double after subtracting its first value (the
// "shifted data" method, group_norm_math.h), which keeps the variance accurate when
// |mean| >> std; rows of a group are combined with the exact pairwise (Chan et al.) formula
// for equal-sized parts.
#pragma once

#include "common/group_norm_shape.h"
#include "common/host_device.h"
#include "norm/group_norm_math.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace fused_ops {
namespace norm {
namespace cpu {

template <bool kRelu, typename scalar_t>
inline double load_value(scalar_t v) {
  const double d = static_cast<double>(v);
  return kRelu ? relu_keep_nan(d) : d;
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
  return moments_from_shifted_sums(shift, (s1[0] + s1[1]) + (s1[2] + s1[3]),
                                   (s2[0] + s2[1]) + (s2[2] + s2[3]), static_cast<double>(count));
}

// Number of rows of `row_length` elements per parallel task: about 32k elements a task.
inline int64_t rows_per_task(int64_t row_length) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(row_length, 1));
}

// Optional per-channel parameter as double (1 or 0 when absent).
template <typename scalar_t>
inline double param_or(const scalar_t* p, int64_t c, double absent) {
  return p != nullptr ? static_cast<double>(p[c]) : absent;
}

// The GroupNorm affine gradients (group_norm_math.h), channel by channel, samples in order:
// dweight[c] = sum_n weight_grad_term(ds, db, mean, rstd) and dbias[c] = sum_n db, with
// {ds, db} = sums(n, c) the channel's sums of dy * x and dy in sample n. dweight and dbias
// may be null (not written).
template <typename scalar_t, typename stat_t, typename Sums>
void affine_param_grads(const GroupNormShape& s, const stat_t* mean, const stat_t* rstd,
                        const Sums& sums, scalar_t* dweight, scalar_t* dbias) {
  if (dweight == nullptr && dbias == nullptr) {
    return;
  }
  const int64_t Cg = s.channels_per_group();
  for (int64_t c = 0; c < s.C; ++c) {
    double dw = 0.0;
    double db = 0.0;
    for (int64_t n = 0; n < s.N; ++n) {
      const int64_t ng = n * s.G + c / Cg;
      const auto [ds_nc, db_nc] = sums(n, c);
      dw += weight_grad_term(ds_nc, db_nc, static_cast<double>(mean[ng]),
                             static_cast<double>(rstd[ng]));
      db += db_nc;
    }
    if (dweight != nullptr) dweight[c] = static_cast<scalar_t>(dw);
    if (dbias != nullptr) dbias[c] = static_cast<scalar_t>(db);
  }
}

}  // namespace cpu
}  // namespace norm
}  // namespace fused_ops
