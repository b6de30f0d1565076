// CPU kernels of fused::relu_group_norm.
//
// Forward, for x viewed as (N, C, HxW) and r = relu(x):
//   1. one parallel pass over the rows (n, c) gathers the moments of r (group_norm_cpu_common.h);
//   2. per (n, g) the rows' moments are combined into mean and rstd, and folded with the
//      affine parameters into a per-(n, c) scale and shift;
//   3. one parallel elementwise pass writes y = relu(x) * scale + shift.
// Backward, with dy the incoming gradient:
//   1. one pass per row gathers ds = sum(dy * r) and db = sum(dy);
//   2. per (n, g) those give the coefficients of dr = c1[n,c] * dy + c2[n,g] * r + c3[n,g]
//      (the GroupNorm gradient written out, as in ATen);
//   3. one elementwise pass writes dx = (x > 0) ? dr : 0, the ReLU mask recomputed from x.
#include "relu_group_norm.h"

#include "checks.h"
#include "group_norm_cpu_common.h"
#include "tensor_utils.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <vector>

namespace fused_ops {
namespace {

constexpr const char* kForwardName = "fused::relu_group_norm";
constexpr const char* kBackwardName = "fused::relu_group_norm (backward)";

template <typename scalar_t>
void forward_kernel(const scalar_t* x, const scalar_t* weight, const scalar_t* bias, scalar_t* y,
                    at::opmath_type<scalar_t>* mean_out, at::opmath_type<scalar_t>* rstd_out,
                    const GroupNormShape& s, double eps) {
  using opmath_t = at::opmath_type<scalar_t>;
  const int64_t rows = s.N * s.C;
  const int64_t Cg = s.channels_per_group();
  const int64_t grain = cpu::rows_per_task(s.HxW);

  std::vector<cpu::Moments> row_moments(rows);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      row_moments[r] = cpu::row_moments</*kRelu=*/true>(x + r * s.HxW, s.HxW);
    }
  });

  std::vector<opmath_t> scale(rows);
  std::vector<opmath_t> shift(rows);
  at::parallel_for(0, s.N * s.G, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ng = begin; ng < end; ++ng) {
      const cpu::Moments m = cpu::combine_equal_parts(&row_moments[ng * Cg], Cg, s.HxW);
      const double rstd = 1.0 / std::sqrt(m.m2 / static_cast<double>(s.group_size()) + eps);
      mean_out[ng] = static_cast<opmath_t>(m.mean);
      rstd_out[ng] = static_cast<opmath_t>(rstd);
      const int64_t g = ng % s.G;
      for (int64_t k = 0; k < Cg; ++k) {
        const int64_t c = g * Cg + k;
        const double sc = rstd * (weight ? static_cast<double>(weight[c]) : 1.0);
        scale[ng * Cg + k] = static_cast<opmath_t>(sc);
        shift[ng * Cg + k] =
            static_cast<opmath_t>((bias ? static_cast<double>(bias[c]) : 0.0) - m.mean * sc);
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
        const opmath_t v = static_cast<opmath_t>(xr[i]);
        yr[i] = static_cast<scalar_t>((v < opmath_t(0) ? opmath_t(0) : v) * a + b);
      }
    }
  });
}

template <typename scalar_t>
void backward_kernel(const scalar_t* dy, const scalar_t* x, const at::opmath_type<scalar_t>* mean,
                     const at::opmath_type<scalar_t>* rstd, const scalar_t* weight,
                     scalar_t* dx, scalar_t* dweight, scalar_t* dbias, const GroupNormShape& s) {
  using opmath_t = at::opmath_type<scalar_t>;
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
        sum_dy_r += g * cpu::relu(static_cast<double>(xr[i]));
        sum_dy += g;
      }
      ds[r] = sum_dy_r;
      db[r] = sum_dy;
    }
  });

  if (dx != nullptr) {
    // dr = c1[n,c] * dy + c2[n,g] * r + c3[n,g]; stored per row as (c1, c2, c3).
    std::vector<opmath_t> c1(rows), c2(rows), c3(rows);
    const double inv_count = 1.0 / static_cast<double>(s.group_size());
    at::parallel_for(0, s.N * s.G, 1, [&](int64_t begin, int64_t end) {
      for (int64_t ng = begin; ng < end; ++ng) {
        const int64_t g = ng % s.G;
        const double mu = static_cast<double>(mean[ng]);
        const double rs = static_cast<double>(rstd[ng]);
        double ds_w = 0.0;
        double db_w = 0.0;
        for (int64_t k = 0; k < Cg; ++k) {
          const double w = weight ? static_cast<double>(weight[g * Cg + k]) : 1.0;
          ds_w += ds[ng * Cg + k] * w;
          db_w += db[ng * Cg + k] * w;
        }
        const double b_coef = (db_w * mu - ds_w) * rs * rs * rs * inv_count;
        const double c_coef = -b_coef * mu - db_w * rs * inv_count;
        for (int64_t k = 0; k < Cg; ++k) {
          const double w = weight ? static_cast<double>(weight[g * Cg + k]) : 1.0;
          c1[ng * Cg + k] = static_cast<opmath_t>(rs * w);
          c2[ng * Cg + k] = static_cast<opmath_t>(b_coef);
          c3[ng * Cg + k] = static_cast<opmath_t>(c_coef);
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

  if (dweight != nullptr || dbias != nullptr) {
    for (int64_t c = 0; c < s.C; ++c) {
      const int64_t g = c / Cg;
      double dw = 0.0;
      double dbi = 0.0;
      for (int64_t n = 0; n < s.N; ++n) {
        const int64_t ng = n * s.G + g;
        dw += (ds[n * s.C + c] - db[n * s.C + c] * static_cast<double>(mean[ng])) *
              static_cast<double>(rstd[ng]);
        dbi += db[n * s.C + c];
      }
      if (dweight != nullptr) dweight[c] = static_cast<scalar_t>(dw);
      if (dbias != nullptr) dbias[c] = static_cast<scalar_t>(dbi);
    }
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_forward_cpu(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps) {
  const GroupNormShape s = check_group_norm_args(kForwardName, input, num_groups, weight, bias, eps);
  const at::Tensor x = input.contiguous();
  const at::Tensor w = contiguous_or_undefined(weight);
  const at::Tensor b = contiguous_or_undefined(bias);
  at::Tensor y = at::empty(x.sizes(), x.options());
  at::Tensor mean = empty_stats(x, s.N, s.G);
  at::Tensor rstd = empty_stats(x, s.N, s.G);
  if (x.numel() == 0) {
    return {y, mean, rstd};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), kForwardName, [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    forward_kernel<scalar_t>(x.const_data_ptr<scalar_t>(), data_or_null<scalar_t>(w),
                             data_or_null<scalar_t>(b), y.mutable_data_ptr<scalar_t>(),
                             mean.mutable_data_ptr<opmath_t>(), rstd.mutable_data_ptr<opmath_t>(),
                             s, eps);
  });
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> relu_group_norm_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    std::array<bool, 3> output_mask) {
  const GroupNormShape s =
      check_group_norm_args(kBackwardName, input, num_groups, weight, c10::nullopt, 0.0);
  check_group_norm_backward_args(kBackwardName, grad_output, input.sizes(), input, s, mean, rstd);
  const at::Tensor x = input.contiguous();
  const at::Tensor dy = grad_output.contiguous();
  const at::Tensor w = contiguous_or_undefined(weight);
  const at::Tensor mean_c = mean.contiguous();
  const at::Tensor rstd_c = rstd.contiguous();

  at::Tensor dx, dweight, dbias;
  std::tie(dx, dweight, dbias) = allocate_norm_grads(x, s.C, w.defined(), output_mask);
  if (x.numel() == 0) {
    return {dx, dweight, dbias};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), kBackwardName, [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    backward_kernel<scalar_t>(
        dy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
        mean_c.const_data_ptr<opmath_t>(), rstd_c.const_data_ptr<opmath_t>(),
        data_or_null<scalar_t>(w), mutable_data_or_null<scalar_t>(dx),
        mutable_data_or_null<scalar_t>(dweight),
        mutable_data_or_null<scalar_t>(dbias), s);
  });
  return {dx, dweight, dbias};
}

}  // namespace fused_ops
