// CPU kernels of fused::group_norm_mean (norm_kernels.h).
//
// Forward: one parallel pass over the rows (n, c) gathers each row's moments; the channel
// means and the per-(n, g) statistics then give the output directly (group_norm_mean.h), so
// the normalised tensor is never written.
// Backward: with g[n] the incoming gradient, dy = g[n] / (C * HxW) is constant over sample n,
// so the GroupNorm gradient sums follow from the saved channel means without touching the
// input (ds[n,c] = dy * HxW * channel_mean[n,c], db[n,c] = dy * HxW), and
//   dx[n, c, :] = c2[n, g] * x[n, c, :] + (rstd[n, g] * weight[c] * dy + c3[n, g]),
// one elementwise pass (group_norm_math.h).
#include "common/cpu_dispatch.h"
#include "norm/group_norm_math.h"
#include "norm/norm_cpu_utils.h"
#include "norm/norm_kernels.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <vector>

namespace fused_ops {
namespace norm {
namespace {

using cpu::param_or;

template <typename scalar_t>
void forward_kernel(const GroupNormMeanForwardParams& p) {
  using opmath_t = at::opmath_type<scalar_t>;
  const GroupNormShape& s = p.sizes;
  const auto* x = static_cast<const scalar_t*>(p.x);
  const auto* weight = static_cast<const scalar_t*>(p.weight);
  const auto* bias = static_cast<const scalar_t*>(p.bias);
  auto* out = static_cast<scalar_t*>(p.out);
  auto* mean_out = static_cast<opmath_t*>(p.mean);
  auto* rstd_out = static_cast<opmath_t*>(p.rstd);
  auto* channel_mean_out = static_cast<opmath_t*>(p.channel_mean);
  const int64_t rows = s.N * s.C;
  const int64_t Cg = s.channels_per_group();

  std::vector<Moments> row_moments(rows);
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
        const Moments m = combine_equal_parts(&row_moments[ng * Cg], Cg, s.HxW);
        const double rstd = rstd_from_m2(m.m2, static_cast<double>(s.group_size()), p.eps);
        mean_out[ng] = static_cast<opmath_t>(m.mean);
        rstd_out[ng] = static_cast<opmath_t>(rstd);
        for (int64_t k = 0; k < Cg; ++k) {
          const int64_t c = g * Cg + k;
          total += group_norm_mean_channel_term(row_moments[ng * Cg + k].mean - m.mean, rstd,
                                                param_or(weight, c, 1.0), param_or(bias, c, 0.0));
        }
      }
      out[n] = static_cast<scalar_t>(total / static_cast<double>(s.C));
    }
  });
}

template <typename scalar_t>
void backward_kernel(const GroupNormMeanBackwardParams& p) {
  using opmath_t = at::opmath_type<scalar_t>;
  const GroupNormShape& s = p.sizes;
  const auto* grad_out = static_cast<const scalar_t*>(p.grad_output);
  const auto* x = static_cast<const scalar_t*>(p.x);
  const auto* mean = static_cast<const opmath_t*>(p.mean);
  const auto* rstd = static_cast<const opmath_t*>(p.rstd);
  const auto* channel_mean = static_cast<const opmath_t*>(p.channel_mean);
  const auto* weight = static_cast<const scalar_t*>(p.weight);
  auto* dx = static_cast<scalar_t*>(p.dx);
  auto* dweight = weight != nullptr ? static_cast<scalar_t*>(p.dweight) : nullptr;
  auto* dbias = static_cast<scalar_t*>(p.dbias);
  const int64_t rows = s.N * s.C;
  const int64_t Cg = s.channels_per_group();
  const double hxw = static_cast<double>(s.HxW);
  const double count = static_cast<double>(s.group_size());
  // The gradient reaching each element of sample n, and its sum over a channel (db).
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
        const double rs = static_cast<double>(rstd[ng]);
        double ds_w = 0.0;
        double db_w = 0.0;
        for (int64_t k = 0; k < Cg; ++k) {
          const int64_t c = g * Cg + k;
          const double w = param_or(weight, c, 1.0);
          ds_w += w * dy * hxw * static_cast<double>(channel_mean[n * s.C + c]);
          db_w += w * dy * hxw;
        }
        const BackwardCoefficients coef =
            backward_coefficients(ds_w, db_w, static_cast<double>(mean[ng]), rs, count);
        for (int64_t k = 0; k < Cg; ++k) {
          const int64_t c = g * Cg + k;
          alpha[n * s.C + c] = static_cast<opmath_t>(coef.c2);
          beta[n * s.C + c] = static_cast<opmath_t>(rs * param_or(weight, c, 1.0) * dy + coef.c3);
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

  cpu::affine_param_grads(
      s, mean, rstd,
      [&](int64_t n, int64_t c) {
        const double db = dy_of(n) * hxw;
        return std::pair{db * static_cast<double>(channel_mean[n * s.C + c]), db};
      },
      dweight, dbias);
}

}  // namespace

void group_norm_mean_forward_cpu(const GroupNormMeanForwardParams& p) {
  TORCH_CHECK(!p.channels_last, "group_norm_mean: the CPU kernel reads contiguous inputs only");
  dispatch_cpu_scalar(p.dtype, [&](auto tag) { forward_kernel<decltype(tag)>(p); });
}

void group_norm_mean_backward_cpu(const GroupNormMeanBackwardParams& p) {
  dispatch_cpu_scalar(p.dtype, [&](auto tag) { backward_kernel<decltype(tag)>(p); });
}

}  // namespace norm
}  // namespace fused_ops
