// The GroupNorm arithmetic shared by the CPU and CUDA kernels, written once (host and device),
// all in double.
//
// Forward, for a group of `count` values with mean mu and rstd = 1 / sqrt(var + eps):
//   y = x * scale[c] + shift[c],  scale = rstd * w[c],  shift = b[c] - mu * scale.
// Backward (ATen's formulation), with per-channel sums over the group's elements
//   ds[c] = sum(dy * x),  db[c] = sum(dy),  ds_w = sum_c ds[c] * w[c],  db_w = sum_c db[c] * w[c]:
//   dx = rstd * w[c] * dy + c2 * x + c3,
//   c2 = (db_w * mu - ds_w) * rstd^3 / count,  c3 = -c2 * mu - db_w * rstd / count,
//   dweight[c] = sum_n (ds[c] - db[c] * mu) * rstd,  dbias[c] = sum_n db[c].
#pragma once

#include "common/host_device.h"

#include <cmath>

namespace fused_ops {
namespace norm {

// The mean and M2 (sum of squared deviations from the mean) of some values.
struct Moments {
  double mean;
  double m2;
};

// Moments of `count` values from sums taken around `shift`: s1 = sum(x - shift) and
// s2 = sum((x - shift)^2). Summing around a value of the data keeps M2 accurate when
// |mean| >> std (no E[x^2] - mean^2 cancellation).
FUSED_OPS_HOST_DEVICE Moments moments_from_shifted_sums(double shift, double s1, double s2,
                                                        double count) {
  const double m2 = s2 - s1 * s1 / count;
  return Moments{shift + s1 / count, m2 < 0.0 ? 0.0 : m2};  // (keeps NaN)
}

// Moments of the union of `num_parts` parts of `part_count` values each (Chan et al.).
FUSED_OPS_HOST_DEVICE Moments combine_equal_parts(const Moments* parts, long long num_parts,
                                                  double part_count) {
  double mean = 0.0;
  for (long long i = 0; i < num_parts; ++i) {
    mean += parts[i].mean;
  }
  mean /= static_cast<double>(num_parts);
  double m2 = 0.0;
  double spread = 0.0;
  for (long long i = 0; i < num_parts; ++i) {
    const double d = parts[i].mean - mean;
    m2 += parts[i].m2;
    spread += d * d;
  }
  return Moments{mean, m2 + spread * part_count};
}

// Moments of `count` values, for parts of different sizes.
struct CountedMoments {
  double count;
  double mean;
  double m2;
};

// Moments of the union of two parts (Chan et al.'s pairwise update); an empty part is the
// identity.
FUSED_OPS_HOST_DEVICE CountedMoments combine_parts(const CountedMoments& a,
                                                   const CountedMoments& b) {
  if (a.count == 0.0) {
    return b;
  }
  if (b.count == 0.0) {
    return a;
  }
  const double count = a.count + b.count;
  const double delta = b.mean - a.mean;
  return CountedMoments{count, a.mean + delta * (b.count / count),
                        a.m2 + b.m2 + delta * delta * (a.count * b.count / count)};
}

FUSED_OPS_HOST_DEVICE double rstd_from_m2(double m2, double count, double eps) {
  return 1.0 / sqrt(m2 / count + eps);
}

// y = x * scale + shift for one channel.
struct ScaleShift {
  double scale;
  double shift;
};

FUSED_OPS_HOST_DEVICE ScaleShift fold_affine(double mean, double rstd, double weight, double bias) {
  const double scale = rstd * weight;
  return ScaleShift{scale, bias - mean * scale};
}

// The per-group coefficients of dx = rstd * w[c] * dy + c2 * x + c3.
struct BackwardCoefficients {
  double c2;
  double c3;
};

FUSED_OPS_HOST_DEVICE BackwardCoefficients backward_coefficients(double ds_w, double db_w,
                                                                 double mean, double rstd,
                                                                 double count) {
  const double c2 = (db_w * mean - ds_w) * rstd * rstd * rstd / count;
  return BackwardCoefficients{c2, -c2 * mean - db_w * rstd / count};
}

// One sample's term of dweight[c].
FUSED_OPS_HOST_DEVICE double weight_grad_term(double ds, double db, double mean, double rstd) {
  return (ds - db * mean) * rstd;
}

// group_norm_mean: channel c's term of C * out[n], from the difference between the channel's
// mean and its group's (w * rstd * (m[c] - mu) + b: the normalised channel's mean).
FUSED_OPS_HOST_DEVICE double group_norm_mean_channel_term(double channel_minus_group_mean,
                                                          double rstd, double weight, double bias) {
  return weight * rstd * channel_minus_group_mean + bias;
}

}  // namespace norm
}  // namespace fused_ops
