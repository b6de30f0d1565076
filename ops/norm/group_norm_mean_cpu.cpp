// CPU kernels of fused::group_norm_mean (norm_kernels.h), with the vectorised loops and the
// work split of norm_cpu_utils.h.
//
// Forward: one parallel pass over x gathers the shifted sums of each row (n, c), by chunks
// (eager's composite makes three passes: statistics and normalisation over x, then the mean
// over the normalised tensor it writes, which here is never written). The rows' moments give the
// channel means and the per-(n, g) statistics, and those the output directly (group_norm_mean.h). A
// channels-last x (p.channels_last: stored (N, HxW, C)) is read in place, by chunks of positions,
// with the same per-channel sums. Backward: with g[n] the incoming gradient, dy = g[n] / (C * HxW)
// is constant over sample n, so the GroupNorm gradient sums follow from the saved channel means
// without touching the input (ds[n,c] = dy * HxW * channel_mean[n,c], db[n,c] = dy * HxW), and
//   dx[n, c, :] = c2[n, g] * x[n, c, :] + (rstd[n, g] * weight[c] * dy + c3[n, g]),
// one elementwise pass (group_norm_math.h).
#include "common/cpu_dispatch.h"
#include "norm/group_norm_math.h"
#include "norm/norm_cpu_utils.h"
#include "norm/norm_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace fused_ops {
namespace norm {
namespace {

using cpu::acc_t;
using cpu::param_or;
using cpu::Sums;

// The output and the statistics from the per-row moments (N * C of them).
template <typename scalar_t>
void finish_forward(const GroupNormMeanForwardParams& p, const Moments* row_moments) {
  using acc = acc_t<scalar_t>;
  const GroupNormShape& s = p.sizes;
  const auto* weight = static_cast<const scalar_t*>(p.weight);
  const auto* bias = static_cast<const scalar_t*>(p.bias);
  auto* out = static_cast<scalar_t*>(p.out);
  auto* mean_out = static_cast<acc*>(p.mean);
  auto* rstd_out = static_cast<acc*>(p.rstd);
  auto* channel_mean_out = static_cast<acc*>(p.channel_mean);
  const int64_t Cg = s.channels_per_group();
  for (int64_t n = 0; n < s.N; ++n) {
    double total = 0.0;
    for (int64_t g = 0; g < s.G; ++g) {
      const int64_t ng = n * s.G + g;
      const Moments m = combine_equal_parts(&row_moments[ng * Cg], Cg, s.HxW);
      const double rstd = rstd_from_m2(m.m2, static_cast<double>(s.group_size()), p.eps);
      mean_out[ng] = static_cast<acc>(m.mean);
      rstd_out[ng] = static_cast<acc>(rstd);
      for (int64_t k = 0; k < Cg; ++k) {
        const int64_t c = g * Cg + k;
        channel_mean_out[ng * Cg + k] = static_cast<acc>(row_moments[ng * Cg + k].mean);
        total += group_norm_mean_channel_term(row_moments[ng * Cg + k].mean - m.mean, rstd,
                                              param_or(weight, c, 1.0), param_or(bias, c, 0.0));
      }
    }
    out[n] = static_cast<scalar_t>(total / static_cast<double>(s.C));
  }
}

template <typename scalar_t>
void forward_kernel(const GroupNormMeanForwardParams& p) {
  using acc = acc_t<scalar_t>;
  const cpu::RowOps<scalar_t>& ops = cpu::row_ops<scalar_t>();
  const GroupNormShape& s = p.sizes;
  const auto* x = static_cast<const scalar_t*>(p.x);
  const int64_t HxW = s.HxW;
  const int64_t rows = s.N * s.C;
  std::vector<Moments> row_moments(rows);

  if (!p.channels_last) {
    std::vector<acc> shift(rows);
    for (int64_t r = 0; r < rows; ++r) {
      shift[r] = cpu::sampled_shift</*kRelu=*/false>(x + r * HxW, HxW);
    }
    const int64_t chunks = cpu::chunks_per_row(HxW);
    std::vector<Sums> parts(rows * chunks);
    cpu::parallel_over_chunks(
        rows, HxW,
        [&](int64_t first, int64_t count, int64_t b, int64_t len) {
          ops.shifted_sums(x + first * HxW + b, count, len, &shift[first],
                           &parts[first * chunks + b / cpu::kChunk]);
        },
        cpu::kMinReadTaskElements);
    for (int64_t r = 0; r < rows; ++r) {
      const Sums t = cpu::add_in_order(&parts[r * chunks], chunks);
      row_moments[r] = moments_from_shifted_sums(static_cast<double>(shift[r]), t.s1, t.s2,
                                                 static_cast<double>(HxW));
    }
    finish_forward<scalar_t>(p, row_moments.data());
    return;
  }

  // Channels-last: sample n is (HxW, C); the chunks of a sample are runs of `positions`
  // positions (about kChunk elements), each summed for all channels at once (RowOps); the
  // shift of channel (n, c) is sampled over the sample's positions.
  const int64_t C = s.C;
  const int64_t positions = std::max<int64_t>(1, cpu::kChunk / C);
  const int64_t chunks = (HxW + positions - 1) / positions;
  std::vector<acc> shift(rows);
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      shift[n * C + c] = cpu::sampled_shift</*kRelu=*/false>(x + n * HxW * C + c, HxW, C);
    }
  }
  // parts[(n * chunks + chunk) * 2 * C + {0, C} + c]: the chunk's s1, s2 of channel c.
  std::vector<double> parts(s.N * chunks * 2 * C, 0.0);
  const int64_t grain =
      std::max<int64_t>(1, cpu::kMinReadTaskElements / std::max<int64_t>(positions * C, 1));
  at::parallel_for(0, s.N * chunks, grain, [&](int64_t first, int64_t last) {
    for (int64_t item = first; item < last; ++item) {
      const int64_t n = item / chunks;
      const int64_t p0 = (item % chunks) * positions;
      double* part = &parts[item * 2 * C];
      ops.channels_last_shifted_sums(x + (n * HxW + p0) * C, std::min(positions, HxW - p0), C,
                                     &shift[n * C], part, part + C);
    }
  });
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      Sums t{0.0, 0.0};
      for (int64_t k = 0; k < chunks; ++k) {
        t.s1 += parts[(n * chunks + k) * 2 * C + c];
        t.s2 += parts[(n * chunks + k) * 2 * C + C + c];
      }
      row_moments[n * C + c] = moments_from_shifted_sums(static_cast<double>(shift[n * C + c]),
                                                         t.s1, t.s2, static_cast<double>(HxW));
    }
  }
  finish_forward<scalar_t>(p, row_moments.data());
}

template <typename scalar_t>
void backward_kernel(const GroupNormMeanBackwardParams& p) {
  using acc = acc_t<scalar_t>;
  const GroupNormShape& s = p.sizes;
  const auto* grad_out = static_cast<const scalar_t*>(p.grad_output);
  const auto* x = static_cast<const scalar_t*>(p.x);
  const auto* mean = static_cast<const acc*>(p.mean);
  const auto* rstd = static_cast<const acc*>(p.rstd);
  const auto* channel_mean = static_cast<const acc*>(p.channel_mean);
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
    std::vector<acc> alpha(rows);
    std::vector<acc> beta(rows);
    for (int64_t ng = 0; ng < s.N * s.G; ++ng) {
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
        alpha[n * s.C + c] = static_cast<acc>(coef.c2);
        beta[n * s.C + c] = static_cast<acc>(rs * param_or(weight, c, 1.0) * dy + coef.c3);
      }
    }
    const cpu::RowOps<scalar_t>& ops = cpu::row_ops<scalar_t>();
    const int64_t dx_bytes = rows * s.HxW * static_cast<int64_t>(sizeof(scalar_t));
    cpu::advise_huge_pages(dx, dx_bytes);
    const auto affine = cpu::loop_for_output(dx_bytes, ops.affine, ops.affine_streaming);
    cpu::parallel_over_chunks(
        rows, s.HxW, [&](int64_t first, int64_t count, int64_t b, int64_t len) {
          const int64_t offset = first * s.HxW + b;
          affine(x + offset, dx + offset, count, len, &alpha[first], &beta[first]);
        });
  }

  cpu::affine_param_grads(
      s, mean, rstd, /*sums_around_mean=*/false,
      [&](int64_t n, int64_t c) {
        const double db = dy_of(n) * hxw;
        return std::pair{db * static_cast<double>(channel_mean[n * s.C + c]), db};
      },
      dweight, dbias);
}

}  // namespace

void group_norm_mean_forward_cpu(const GroupNormMeanForwardParams& p) {
  dispatch_cpu_scalar(p.dtype, [&](auto tag) { forward_kernel<decltype(tag)>(p); });
}

void group_norm_mean_backward_cpu(const GroupNormMeanBackwardParams& p) {
  dispatch_cpu_scalar(p.dtype, [&](auto tag) { backward_kernel<decltype(tag)>(p); });
}

}  // namespace norm
}  // namespace fused_ops
