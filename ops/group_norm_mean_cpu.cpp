// CPU kernels of fused::group_norm_mean.
//
// Forward: one parallel pass over the rows (n, c) gathers each row's moments; the channel
// means and the per-(n, g) statistics then give the output directly (group_norm_mean.h), so
// the normalised tensor is never written.
// Backward: with g[n] the incoming gradient, dy = g[n] / (C * HxW) is constant over sample n,
// so the GroupNorm gradient sums follow from the saved channel means without touching the
// input (ds[n,c] = dy * HxW * channel_mean[n,c], db[n,c] = dy * HxW), and
//   dx[n, c, :] = c2[n, g] * x[n, c, :] + (rstd[n, g] * weight[c] * dy + c3[n, g]),
// one elementwise pass.
#include "group_norm_mean.h"

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

constexpr const char* kForwardName = "fused::group_norm_mean";
constexpr const char* kBackwardName = "fused::group_norm_mean (backward)";

template <typename scalar_t>
void forward_kernel(const scalar_t* x, const scalar_t* weight, const scalar_t* bias, scalar_t* out,
                    at::opmath_type<scalar_t>* mean_out, at::opmath_type<scalar_t>* rstd_out,
                    at::opmath_type<scalar_t>* channel_mean_out, const GroupNormShape& s,
                    double eps) {
  using opmath_t = at::opmath_type<scalar_t>;
  const int64_t rows = s.N * s.C;
  const int64_t Cg = s.channels_per_group();

  std::vector<cpu::Moments> row_moments(rows);
  at::parallel_for(0, rows, cpu::rows_per_task(s.HxW), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      row_moments[r] = cpu::row_moments</*kRelu=*/false>(x + r * s.HxW, s.HxW);
      channel_mean_out[r] = static_cast<opmath_t>(row_moments[r].mean);
    }
  });

  at::parallel_for(0, s.N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      double total = 0.0;
      for (int64_t g = 0; g < s.G; ++g) {
        const int64_t ng = n * s.G + g;
        const cpu::Moments m = cpu::combine_equal_parts(&row_moments[ng * Cg], Cg, s.HxW);
        const double rstd = 1.0 / std::sqrt(m.m2 / static_cast<double>(s.group_size()) + eps);
        mean_out[ng] = static_cast<opmath_t>(m.mean);
        rstd_out[ng] = static_cast<opmath_t>(rstd);
        for (int64_t k = 0; k < Cg; ++k) {
          const int64_t c = g * Cg + k;
          const double w = weight ? static_cast<double>(weight[c]) : 1.0;
          const double b = bias ? static_cast<double>(bias[c]) : 0.0;
          total += w * rstd * (row_moments[ng * Cg + k].mean - m.mean) + b;
        }
      }
      out[n] = static_cast<scalar_t>(total / static_cast<double>(s.C));
    }
  });
}

template <typename scalar_t>
void backward_kernel(const scalar_t* grad_out, const scalar_t* x,
                     const at::opmath_type<scalar_t>* mean, const at::opmath_type<scalar_t>* rstd,
                     const at::opmath_type<scalar_t>* channel_mean, const scalar_t* weight,
                     scalar_t* dx, scalar_t* dweight, scalar_t* dbias, const GroupNormShape& s) {
  using opmath_t = at::opmath_type<scalar_t>;
  const int64_t rows = s.N * s.C;
  const int64_t Cg = s.channels_per_group();
  const double hxw = static_cast<double>(s.HxW);
  const double inv_count = 1.0 / static_cast<double>(s.group_size());
  auto dy_of = [&](int64_t n) {
    return static_cast<double>(grad_out[n]) / (static_cast<double>(s.C) * hxw);
  };

  if (dx != nullptr) {
    // dx = alpha[n,c] * x + beta[n,c].
    std::vector<opmath_t> alpha(rows), beta(rows);
    at::parallel_for(0, s.N * s.G, 1, [&](int64_t begin, int64_t end) {
      for (int64_t ng = begin; ng < end; ++ng) {
        const int64_t n = ng / s.G;
        const int64_t g = ng % s.G;
        const double dy = dy_of(n);
        const double mu = static_cast<double>(mean[ng]);
        const double rs = static_cast<double>(rstd[ng]);
        double ds_w = 0.0;
        double db_w = 0.0;
        for (int64_t k = 0; k < Cg; ++k) {
          const int64_t c = g * Cg + k;
          const double w = weight ? static_cast<double>(weight[c]) : 1.0;
          ds_w += w * dy * hxw * static_cast<double>(channel_mean[n * s.C + c]);
          db_w += w * dy * hxw;
        }
        const double b_coef = (db_w * mu - ds_w) * rs * rs * rs * inv_count;
        const double c_coef = -b_coef * mu - db_w * rs * inv_count;
        for (int64_t k = 0; k < Cg; ++k) {
          const int64_t c = g * Cg + k;
          const double w = weight ? static_cast<double>(weight[c]) : 1.0;
          alpha[n * s.C + c] = static_cast<opmath_t>(b_coef);
          beta[n * s.C + c] = static_cast<opmath_t>(rs * w * dy + c_coef);
        }
      }
    });
    at::parallel_for(0, rows, cpu::rows_per_task(s.HxW), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* xr = x + r * s.HxW;
        scalar_t* dxr = dx + r * s.HxW;
        const opmath_t a = alpha[r];
        const opmath_t b = beta[r];
        for (int64_t i = 0; i < s.HxW; ++i) {
          dxr[i] = static_cast<scalar_t>(a * static_cast<opmath_t>(xr[i]) + b);
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
        const double db = dy_of(n) * hxw;
        dw += db * (static_cast<double>(channel_mean[n * s.C + c]) - static_cast<double>(mean[ng])) *
              static_cast<double>(rstd[ng]);
        dbi += db;
      }
      if (dweight != nullptr) dweight[c] = static_cast<scalar_t>(dw);
      if (dbias != nullptr) dbias[c] = static_cast<scalar_t>(dbi);
    }
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_norm_mean_forward_cpu(
    const at::Tensor& input, int64_t num_groups, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps) {
  const GroupNormShape s = check_group_norm_args(kForwardName, input, num_groups, weight, bias, eps);
  const at::Tensor x = input.contiguous();
  const at::Tensor w = contiguous_or_undefined(weight);
  const at::Tensor b = contiguous_or_undefined(bias);
  at::Tensor out = at::empty({s.N}, x.options());
  at::Tensor mean = empty_stats(x, s.N, s.G);
  at::Tensor rstd = empty_stats(x, s.N, s.G);
  at::Tensor channel_mean = empty_stats(x, s.N, s.C);
  if (x.numel() == 0) {
    return {out, mean, rstd, channel_mean};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), kForwardName, [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    forward_kernel<scalar_t>(x.const_data_ptr<scalar_t>(), data_or_null<scalar_t>(w),
                             data_or_null<scalar_t>(b), out.mutable_data_ptr<scalar_t>(),
                             mean.mutable_data_ptr<opmath_t>(), rstd.mutable_data_ptr<opmath_t>(),
                             channel_mean.mutable_data_ptr<opmath_t>(), s, eps);
  });
  return {out, mean, rstd, channel_mean};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_mean_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& channel_mean, int64_t num_groups,
    const c10::optional<at::Tensor>& weight, std::array<bool, 3> output_mask) {
  const GroupNormShape s =
      check_group_norm_args(kBackwardName, input, num_groups, weight, c10::nullopt, 0.0);
  check_group_norm_backward_args(kBackwardName, grad_output, {s.N}, input, s, mean, rstd,
                                 &channel_mean);
  const at::Tensor x = input.contiguous();
  const at::Tensor g = grad_output.contiguous();
  const at::Tensor w = contiguous_or_undefined(weight);
  const at::Tensor mean_c = mean.contiguous();
  const at::Tensor rstd_c = rstd.contiguous();
  const at::Tensor channel_mean_c = channel_mean.contiguous();

  at::Tensor dx, dweight, dbias;
  std::tie(dx, dweight, dbias) = allocate_norm_grads(x, s.C, w.defined(), output_mask);
  if (x.numel() == 0) {
    return {dx, dweight, dbias};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), kBackwardName, [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    backward_kernel<scalar_t>(
        g.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
        mean_c.const_data_ptr<opmath_t>(), rstd_c.const_data_ptr<opmath_t>(),
        channel_mean_c.const_data_ptr<opmath_t>(), data_or_null<scalar_t>(w),
        mutable_data_or_null<scalar_t>(dx),
        mutable_data_or_null<scalar_t>(dweight),
        mutable_data_or_null<scalar_t>(dbias), s);
  });
  return {dx, dweight, dbias};
}

}  // namespace fused_ops
