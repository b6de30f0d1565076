// CPU kernels of fused::relu_group_norm (norm_kernels.h), with the vectorised loops and the
// work split of norm_cpu_utils.h.
//
// Forward, for x viewed as (N, C, HxW) and r = relu(x): two passes over x (eager's composite
// makes three, and writes relu(x) in between).
//   1. per (n, g), the shifted sums of r over the group's Cg * HxW contiguous values, by
//      chunks; they give mean and rstd, folded with the affine parameters into a per-(n, c)
//      scale and shift;
//   2. y = relu(x) * scale + shift, elementwise.
// With one task per group (norm_cpu_utils.h) the second pass reads the group from cache.
// Backward, with dy the incoming gradient: two passes over (dy, x), none over a saved relu(x)
// (eager's composite: GroupNorm's two over (dy, r), then the ReLU's over (dr, r)).
//   1. ds = sum(dy * r) and db = sum(dy) per row (n, c), by chunks; per (n, g) they give the
//      coefficients of dr = c1[n,c] * dy + c2[n,g] * r + c3[n,g] (group_norm_math.h);
//   2. dx = (x > 0) ? dr : 0, elementwise, the ReLU mask recomputed from x.
// dweight and dbias come from the per-row sums of step 1.
#include "common/cpu_dispatch.h"
#include "norm/group_norm_math.h"
#include "norm/norm_cpu_utils.h"
#include "norm/norm_kernels.h"

#include <ATen/Parallel.h>

#include <vector>

namespace fused_ops {
namespace norm {
namespace {

using cpu::acc_t;
using cpu::param_or;
using cpu::Sums;

template <typename scalar_t>
void forward_kernel(const ReluGroupNormForwardParams& p) {
  using acc = acc_t<scalar_t>;
  const cpu::RowOps<scalar_t>& ops = cpu::row_ops<scalar_t>();
  const GroupNormShape& s = p.sizes;
  const auto* x = static_cast<const scalar_t*>(p.x);
  const auto* weight = static_cast<const scalar_t*>(p.weight);
  const auto* bias = static_cast<const scalar_t*>(p.bias);
  auto* y = static_cast<scalar_t*>(p.y);
  auto* mean_out = static_cast<acc*>(p.mean);
  auto* rstd_out = static_cast<acc*>(p.rstd);
  const int64_t HxW = s.HxW;
  const int64_t Cg = s.channels_per_group();
  const int64_t groups = s.N * s.G;
  const int64_t rows = s.N * s.C;
  const int64_t group_size = s.group_size();

  // A group's values are contiguous: its statistics come from sums over them all around one
  // shift, by chunks (norm_cpu_utils.h).
  std::vector<acc> group_shift(groups);
  for (int64_t ng = 0; ng < groups; ++ng) {
    group_shift[ng] = cpu::sampled_shift</*kRelu=*/true>(x + ng * group_size, group_size);
  }
  // Group ng's statistics from its sums; the scale and shift of its Cg channels.
  auto finish_group = [&](int64_t ng, const Sums& sums, acc* scale, acc* shift) {
    const Moments m = moments_from_shifted_sums(static_cast<double>(group_shift[ng]), sums.s1,
                                                sums.s2, static_cast<double>(group_size));
    const double rstd = rstd_from_m2(m.m2, static_cast<double>(group_size), p.eps);
    mean_out[ng] = static_cast<acc>(m.mean);
    rstd_out[ng] = static_cast<acc>(rstd);
    for (int64_t k = 0; k < Cg; ++k) {
      const int64_t c = (ng % s.G) * Cg + k;
      const ScaleShift a =
          fold_affine(m.mean, rstd, param_or(weight, c, 1.0), param_or(bias, c, 0.0));
      scale[k] = static_cast<acc>(a.scale);
      shift[k] = static_cast<acc>(a.shift);
    }
  };

  if (cpu::use_group_tasks(groups, group_size)) {
    cpu::parallel_over_groups(groups, group_size, [&](int64_t begin, int64_t end) {
      std::vector<acc> scale(Cg);
      std::vector<acc> shift(Cg);
      for (int64_t ng = begin; ng < end; ++ng) {
        const scalar_t* xg = x + ng * group_size;
        const Sums sums = cpu::chunked_sums(group_size, [&](int64_t b, int64_t len, Sums* out) {
          ops.relu_shifted_sums(xg + b, 1, len, &group_shift[ng], out);
        });
        finish_group(ng, sums, scale.data(), shift.data());
        ops.relu_affine(xg, y + ng * group_size, Cg, HxW, scale.data(), shift.data());
      }
    });
    return;
  }

  const int64_t chunks = cpu::chunks_per_row(group_size);
  std::vector<Sums> parts(groups * chunks);
  cpu::parallel_over_chunks(
      groups, group_size, [&](int64_t first, int64_t count, int64_t b, int64_t len) {
        ops.relu_shifted_sums(x + first * group_size + b, count, len, &group_shift[first],
                              &parts[first * chunks + b / cpu::kChunk]);
      });
  std::vector<acc> scale(rows);
  std::vector<acc> shift(rows);
  for (int64_t ng = 0; ng < groups; ++ng) {
    finish_group(ng, cpu::add_in_order(&parts[ng * chunks], chunks), &scale[ng * Cg],
                 &shift[ng * Cg]);
  }
  cpu::parallel_over_chunks(rows, HxW, [&](int64_t first, int64_t count, int64_t b, int64_t len) {
    ops.relu_affine(x + first * HxW + b, y + first * HxW + b, count, len, &scale[first],
                    &shift[first]);
  });
}

template <typename scalar_t>
void backward_kernel(const ReluGroupNormBackwardParams& p) {
  using acc = acc_t<scalar_t>;
  const cpu::RowOps<scalar_t>& ops = cpu::row_ops<scalar_t>();
  const GroupNormShape& s = p.sizes;
  const auto* dy = static_cast<const scalar_t*>(p.dy);
  const auto* x = static_cast<const scalar_t*>(p.x);
  const auto* mean = static_cast<const acc*>(p.mean);
  const auto* rstd = static_cast<const acc*>(p.rstd);
  const auto* weight = static_cast<const scalar_t*>(p.weight);
  auto* dx = static_cast<scalar_t*>(p.dx);
  auto* dweight = weight != nullptr ? static_cast<scalar_t*>(p.dweight) : nullptr;
  auto* dbias = static_cast<scalar_t*>(p.dbias);
  const int64_t HxW = s.HxW;
  const int64_t Cg = s.channels_per_group();
  const int64_t groups = s.N * s.G;
  const int64_t rows = s.N * s.C;
  const double count = static_cast<double>(s.group_size());

  // Per row: {ds, db} = {sum(dy * relu(x)), sum(dy)}, by chunks.
  std::vector<Sums> sums(rows);
  // dr = c1 * dy + c2 * r + c3 per row: c1 = rstd * w[c]; c2, c3 those of the row's group.
  std::vector<acc> c1(rows);
  std::vector<acc> c2(rows);
  std::vector<acc> c3(rows);
  for (int64_t ng = 0; ng < groups; ++ng) {
    for (int64_t k = 0; k < Cg; ++k) {
      c1[ng * Cg + k] = static_cast<acc>(static_cast<double>(rstd[ng]) *
                                         param_or(weight, (ng % s.G) * Cg + k, 1.0));
    }
  }
  auto set_coefficients = [&](int64_t ng) {
    double ds_w = 0.0;
    double db_w = 0.0;
    for (int64_t k = 0; k < Cg; ++k) {
      const double w = param_or(weight, (ng % s.G) * Cg + k, 1.0);
      ds_w += sums[ng * Cg + k].s1 * w;
      db_w += sums[ng * Cg + k].s2 * w;
    }
    const BackwardCoefficients coef = backward_coefficients(
        ds_w, db_w, static_cast<double>(mean[ng]), static_cast<double>(rstd[ng]), count);
    for (int64_t r = ng * Cg; r < (ng + 1) * Cg; ++r) {
      c2[r] = static_cast<acc>(coef.c2);
      c3[r] = static_cast<acc>(coef.c3);
    }
  };
  // dx of rows [first, first + count), columns [b, b + len): dr masked by x > 0.
  auto write_dx = [&](int64_t first, int64_t count, int64_t b, int64_t len) {
    const int64_t offset = first * HxW + b;
    ops.relu_affine_backward(dy + offset, x + offset, dx + offset, count, len, &c1[first],
                             &c2[first], &c3[first]);
  };

  if (dx != nullptr && cpu::use_group_tasks(groups, s.group_size())) {
    cpu::parallel_over_groups(groups, s.group_size(), [&](int64_t begin, int64_t end) {
      for (int64_t ng = begin; ng < end; ++ng) {
        if (HxW <= cpu::kChunk) {
          ops.relu_grad_sums(dy + ng * Cg * HxW, x + ng * Cg * HxW, Cg, HxW, &sums[ng * Cg]);
        } else {
          for (int64_t r = ng * Cg; r < (ng + 1) * Cg; ++r) {
            sums[r] = cpu::chunked_sums(HxW, [&](int64_t b, int64_t len, Sums* out) {
              ops.relu_grad_sums(dy + r * HxW + b, x + r * HxW + b, 1, len, out);
            });
          }
        }
        set_coefficients(ng);
        write_dx(ng * Cg, Cg, 0, HxW);
      }
    });
  } else {
    const int64_t chunks = cpu::chunks_per_row(HxW);
    std::vector<Sums> parts(rows * chunks);
    cpu::parallel_over_chunks(rows, HxW, [&](int64_t first, int64_t count, int64_t b, int64_t len) {
      ops.relu_grad_sums(dy + first * HxW + b, x + first * HxW + b, count, len,
                         &parts[first * chunks + b / cpu::kChunk]);
    });
    for (int64_t r = 0; r < rows; ++r) {
      sums[r] = cpu::add_in_order(&parts[r * chunks], chunks);
    }
    if (dx != nullptr) {
      for (int64_t ng = 0; ng < groups; ++ng) {
        set_coefficients(ng);
      }
      cpu::parallel_over_chunks(rows, HxW, write_dx);
    }
  }

  cpu::affine_param_grads(
      s, mean, rstd,
      [&](int64_t n, int64_t c) { return std::pair{sums[n * s.C + c].s1, sums[n * s.C + c].s2}; },
      dweight, dbias);
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
