// The GroupNorm arithmetic shared by the CPU and CUDA kernels, written once (host and device),
// all in double.
//
// Forward, for a group of `count` values with mean mu and rstd = 1 / sqrt(var + eps):
//   y = (x - center) * scale[c] + shift[c],  center = mu rounded to the kernel's arithmetic type,
//   scale = rstd * w[c],  shift = b[c] - (mu - center) * scale (centered_affine).
// Backward (ATen's formulation), with per-channel sums over the group's elements, taken
// around some `center` (0, or the saved mean: see backward_coefficients)
//   ds[c] = sum(dy * (x - center)),  db[c] = sum(dy),  ds_w = sum_c ds[c] * w[c],
//   db_w = sum_c db[c] * w[c]:
//   dx = rstd * w[c] * dy + c2 * x + c3,
//   c2 = (db_w * (mu - center) - ds_w) * rstd^3 / count,  c3 = -c2 * mu - db_w * rstd / count,
//   dweight[c] = sum_n (ds[c] - db[c] * (mu - center)) * rstd,  dbias[c] = sum_n db[c].
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

// y = (x - center) * scale + shift for one channel of a group with mean `mean` (in double):
// what the elementwise passes compute in acc_t (float for float data). Centering first keeps y
// accurate where the folded form x * scale + (b - mean * scale) cancels: that one leaves
// ~ulp(x * scale) of rounding in y, up to ~1e-4 for |x| ~ 1 at eps = 1e-5, where the exact y
// is tiny or equal to the bias (a group of equal values: exactly b here, as in float64). The
// center is the mean rounded to acc_t, so x - center is exact for x near the mean (Sterbenz);
// the rounding of the center itself, times scale, goes into the shift (computed in double).
template <typename acc_t>
struct CenteredAffine {
  acc_t center;
  acc_t scale;
  acc_t shift;
};

template <typename acc_t>
FUSED_OPS_HOST_DEVICE CenteredAffine<acc_t> centered_affine(double mean, double rstd, double weight,
                                                            double bias) {
  const acc_t center = static_cast<acc_t>(mean);
  const double scale = rstd * weight;
  return CenteredAffine<acc_t>{
      center, static_cast<acc_t>(scale),
      static_cast<acc_t>(bias - (mean - static_cast<double>(center)) * scale)};
}

// The per-group coefficients of dx = rstd * w[c] * dy + c2 * x + c3.
struct BackwardCoefficients {
  double c2;
  double c3;
};

// ds_w from sums around `center`. ds_w - db_w * mean is the sum of dy * w * (x - mean): a
// small difference of large terms when |mean| >> std, unless the sums are taken around the
// mean itself (center = mean: then ds is that sum directly and what it loses is the rounding
// of its own terms; the CPU kernels, which accumulate ds in float, do so; CUDA's double sums
// take center = 0).
FUSED_OPS_HOST_DEVICE BackwardCoefficients backward_coefficients(double ds_w, double db_w,
                                                                 double mean, double rstd,
                                                                 double count,
                                                                 double center = 0.0) {
  const double c2 = (db_w * (mean - center) - ds_w) * rstd * rstd * rstd / count;
  return BackwardCoefficients{c2, -c2 * mean - db_w * rstd / count};
}

// ReLU -> GroupNorm's input gradient at one element of row (n, c), from the row's (c1 = rstd *
// w[c], c2, c3): x > 0 ? c1 dy + c2 x + c3 : 0 (a NaN x gives 0). The CUDA elementwise pass and
// the convolutions that apply it as they load their operand (conv_kernels.h:
// ReluGroupNormGradOperand) share it, so both give the same values.
template <typename T>
FUSED_OPS_HOST_DEVICE T relu_group_norm_input_grad(T c1, T c2, T c3, T x, T dy) {
  const T dr = c1 * dy + c2 * x + c3;
  return x > T(0) ? dr : T(0);
}

// One sample's term of dweight[c], from sums around `center`.
FUSED_OPS_HOST_DEVICE double weight_grad_term(double ds, double db, double mean, double rstd,
                                              double center = 0.0) {
  return (ds - db * (mean - center)) * rstd;
}

// group_norm_mean: channel c's term of C * out[n], from the difference between the channel's
// mean and its group's (w * rstd * (m[c] - mu) + b: the normalised channel's mean).
FUSED_OPS_HOST_DEVICE double group_norm_mean_channel_term(double channel_minus_group_mean,
                                                          double rstd, double weight, double bias) {
  return weight * rstd * channel_minus_group_mean + bias;
}

}  // namespace norm
}  // namespace fused_ops
