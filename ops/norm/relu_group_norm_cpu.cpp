// CPU kernels of fused::relu_group_norm (norm_kernels.h).
//
// Forward, for x viewed as (N, C, HxW) and r = relu(x):
//   1. one parallel pass over the rows (n, c) gathers the moments of r (norm_cpu_utils.h);
//   2. per (n, g) the rows' moments are combined into mean and rstd, and folded with the
//      affine parameters into a per-(n, c) scale and shift;
//   3. one parallel elementwise pass writes y = relu(x) * scale + shift.
// Backward, with dy the incoming gradient:
//   1. one pass per row gathers ds = sum(dy * r) and db = sum(dy);
//   2. per (n, g) those give the coefficients of dr = c1[n,c] * dy + c2[n,g] * r + c3[n,g]
//      (group_norm_math.h);
//   3. one elementwise pass writes dx = (x > 0) ? dr : 0, the ReLU mask recomputed from x.
#include "common/cpu_dispatch.h"
#include "norm/group_norm_math.h"
#include "norm/norm_cpu_utils.h"
#include "norm/norm_kernels.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <vector>

namespace fused_ops {
namespace norm {
namespace {

using cpu::param_or;

template <typename scalar_t>
void forward_kernel(const ReluGroupNormForwardParams& p) {
  using opmath_t = at::opmath_type<scalar_t>;
  const GroupNormShape& s = p.sizes;
  const auto* x = static_cast<const scalar_t*>(p.x);
  const auto* weight = static_cast<const scalar_t*>(p.weight);
  const auto* bias = static_cast<const scalar_t*>(p.bias);
  auto* y = static_cast<scalar_t*>(p.y);
  auto* mean_out = static_cast<opmath_t*>(p.mean);
  auto* rstd_out = static_cast<opmath_t*>(p.rstd);
  const int64_t rows = s.N * s.C;
  const int64_t Cg = s.channels_per_group();
  const int64_t grain = cpu::rows_per_task(s.HxW);

  std::vector<Moments> row_moments(rows);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      row_moments[r] = cpu::row_moments</*kRelu=*/true>(x + r * s.HxW, s.HxW);
    }
  });

  std::vector<opmath_t> scale(rows);
  std::vector<opmath_t> shift(rows);
  at::parallel_for(0, s.N * s.G, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ng = begin; ng < end; ++ng) {
      const Moments m = combine_equal_parts(&row_moments[ng * Cg], Cg, s.HxW);
      const double rstd = rstd_from_m2(m.m2, static_cast<double>(s.group_size()), p.eps);
      mean_out[ng] = static_cast<opmath_t>(m.mean);
      rstd_out[ng] = static_cast<opmath_t>(rstd);
      const int64_t g = ng % s.G;
      for (int64_t k = 0; k < Cg; ++k) {
        const int64_t c = g * Cg + k;
        const ScaleShift a =
            fold_affine(m.mean, rstd, param_or(weight, c, 1.0), param_or(bias, c, 0.0));
        scale[ng * Cg + k] = static_cast<opmath_t>(a.scale);
        shift[ng * Cg + k] = static_cast<opmath_t>(a.shift);
      }
    }
  });

  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* xr = x + r * s.HxW;
      scalar_t* yr = y + r * s.HxW;
      const opmath_t a = scale[r];
      const opmath_t b = shift[r];
      for (int64_t i = 0; i < s.HxW; ++i) {
        yr[i] = static_cast<scalar_t>(relu_keep_nan(static_cast<opmath_t>(xr[i])) * a + b);
      }
    }
  });
}

template <typename scalar_t>
void backward_kernel(const ReluGroupNormBackwardParams& p) {
  using opmath_t = at::opmath_type<scalar_t>;
  const GroupNormShape& s = p.sizes;
  const auto* dy = static_cast<const scalar_t*>(p.dy);
  const auto* x = static_cast<const scalar_t*>(p.x);
  const auto* mean = static_cast<const opmath_t*>(p.mean);
  const auto* rstd = static_cast<const opmath_t*>(p.rstd);
  const auto* weight = static_cast<const scalar_t*>(p.weight);
  auto* dx = static_cast<scalar_t*>(p.dx);
  auto* dweight = weight != nullptr ? static_cast<scalar_t*>(p.dweight) : nullptr;
  auto* dbias = static_cast<scalar_t*>(p.dbias);
  const int64_t rows = s.N * s.C;
  const int64_t Cg = s.channels_per_group();
  const int64_t grain = cpu::rows_per_task(s.HxW);

  // Per row: ds = sum(dy * relu(x)) and db = sum(dy).
  std::vector<double> ds(rows);
  std::vector<double> db(rows);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* xr = x + r * s.HxW;
      const scalar_t* dyr = dy + r * s.HxW;
      double sum_dy_r = 0.0;
      double sum_dy = 0.0;
      for (int64_t i = 0; i < s.HxW; ++i) {
        const double g = static_cast<double>(dyr[i]);
        sum_dy_r += g * relu_keep_nan(static_cast<double>(xr[i]));
        sum_dy += g;
      }
      ds[r] = sum_dy_r;
      db[r] = sum_dy;
    }
  });

  if (dx != nullptr) {
    // dr = c1[n,c] * dy + c2[n,g] * r + c3[n,g]; stored per row as (c1, c2, c3).
    std::vector<opmath_t> c1(rows), c2(rows), c3(rows);
    const double count = static_cast<double>(s.group_size());
    at::parallel_for(0, s.N * s.G, 1, [&](int64_t begin, int64_t end) {
      for (int64_t ng = begin; ng < end; ++ng) {
        const int64_t g = ng % s.G;
        const double rs = static_cast<double>(rstd[ng]);
        double ds_w = 0.0;
        double db_w = 0.0;
        for (int64_t k = 0; k < Cg; ++k) {
          const double w = param_or(weight, g * Cg + k, 1.0);
          ds_w += ds[ng * Cg + k] * w;
          db_w += db[ng * Cg + k] * w;
        }
        const BackwardCoefficients coef =
            backward_coefficients(ds_w, db_w, static_cast<double>(mean[ng]), rs, count);
        for (int64_t k = 0; k < Cg; ++k) {
          c1[ng * Cg + k] = static_cast<opmath_t>(rs * param_or(weight, g * Cg + k, 1.0));
          c2[ng * Cg + k] = static_cast<opmath_t>(coef.c2);
          c3[ng * Cg + k] = static_cast<opmath_t>(coef.c3);
        }
      }
    });
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* xr = x + r * s.HxW;
        const scalar_t* dyr = dy + r * s.HxW;
        scalar_t* dxr = dx + r * s.HxW;
        for (int64_t i = 0; i < s.HxW; ++i) {
          const opmath_t v = static_cast<opmath_t>(xr[i]);
          const opmath_t dr = c1[r] * static_cast<opmath_t>(dyr[i]) + c2[r] * v + c3[r];
          dxr[i] = static_cast<scalar_t>(v > opmath_t(0) ? dr : opmath_t(0));
        }
      }
    });
  }

  cpu::affine_param_grads(
      s, mean, rstd,
      [&](int64_t n, int64_t c) { return std::pair{ds[n * s.C + c], db[n * s.C + c]}; }, dweight,
      dbias);
}

}  // namespace

void relu_group_norm_forward_cpu(const ReluGroupNormForwardParams& p) {
  dispatch_cpu_scalar(p.dtype, [&](auto tag) { forward_kernel<decltype(tag)>(p); });
}

void relu_group_norm_backward_cpu(const ReluGroupNormBackwardParams& p) {
  dispatch_cpu_scalar(p.dtype, [&](auto tag) { backward_kernel<decltype(tag)>(p); });
}

}  // namespace norm
}  // namespace fused_ops
