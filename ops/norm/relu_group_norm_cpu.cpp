// CPU kernels of fused::relu_group_norm (norm_kernels.h), with the vectorised loops and the
// work split of norm_cpu_utils.h.
//
// Forward, for x viewed as (N, C, HxW) and r = relu(x): two passes over x (eager's composite
// makes three, and writes relu(x) in between).
//   1. per (n, g), the shifted sums of r over the group's Cg * HxW contiguous values, by
//      chunks; they give mean and rstd, and with the affine parameters a per-(n, c) center,
//      scale and shift (group_norm_math.h: centered_affine);
//   2. y = (relu(x) - center) * scale + shift, elementwise, by pieces of rows.
// With one task per group (norm_cpu_utils.h) the second pass reads the group from cache.
// Backward, with dy the incoming gradient: two passes over (dy, x), none over a saved relu(x)
// (eager's composite: GroupNorm's two over (dy, r), then the ReLU's over (dr, r)).
//   1. ds = sum(dy * (r - mean)) and db = sum(dy) per row (n, c), by chunks; per (n, g) they
//      give the coefficients of dr = c1[n,c] * dy + c2[n,g] * r + c3[n,g] (group_norm_math.h);
//   2. dx = (x > 0) ? dr : 0, elementwise, the ReLU mask recomputed from x.
// dweight and dbias come from the per-row sums of step 1. Both directions share the passes'
// schedule (norm_cpu_utils.h: run_two_passes).
#include "common/cpu_dispatch.h"
#include "norm/group_norm_math.h"
#include "norm/norm_cpu_utils.h"
#include "norm/norm_kernels.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

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
  const int64_t group_size = s.group_size();
  const int64_t y_bytes = groups * group_size * static_cast<int64_t>(sizeof(scalar_t));
  cpu::advise_huge_pages(y, y_bytes);

  // A group's values are contiguous: its statistics come from sums over them all around one
  // shift, by chunks (norm_cpu_utils.h), chunk p's sums in parts[ng * chunks + p].
  const int64_t chunks = cpu::chunks_per_row(group_size);
  std::vector<acc> group_shift(groups);
  for (int64_t ng = 0; ng < groups; ++ng) {
    group_shift[ng] = cpu::sampled_shift</*kRelu=*/true>(x + ng * group_size, group_size);
  }
  std::vector<Sums> parts(groups * chunks);
  std::vector<CenteredAffine<acc>> affine(s.N * s.C);
  auto sum = [&](int64_t ng, int64_t chunk) {
    const int64_t b = chunk * cpu::kChunk;
    ops.relu_shifted_sums(x + ng * group_size + b, 1, std::min(cpu::kChunk, group_size - b),
                          &group_shift[ng], &parts[ng * chunks + chunk]);
  };
  // Group ng's statistics from its sums; the affine coefficients of its Cg channels.
  auto finish = [&](int64_t ng) {
    const Sums sums = cpu::add_in_order(&parts[ng * chunks], chunks);
    const Moments m = moments_from_shifted_sums(static_cast<double>(group_shift[ng]), sums.s1,
                                                sums.s2, static_cast<double>(group_size));
    const double rstd = rstd_from_m2(m.m2, static_cast<double>(group_size), p.eps);
    mean_out[ng] = static_cast<acc>(m.mean);
    rstd_out[ng] = static_cast<acc>(rstd);
    for (int64_t k = 0; k < Cg; ++k) {
      const int64_t c = (ng % s.G) * Cg + k;
      affine[ng * Cg + k] =
          centered_affine<acc>(m.mean, rstd, param_or(weight, c, 1.0), param_or(bias, c, 0.0));
    }
  };
  // y over piece q of the group's rows.
  const cpu::RowPieces pieces(Cg, HxW);
  // A large y goes to memory with streaming stores (norm_cpu_utils.h: kStreamingStoreBytes).
  const auto relu_affine =
      cpu::loop_for_output(y_bytes, ops.relu_affine, ops.relu_affine_streaming);
  auto write = [&](int64_t ng, int64_t q) {
    const cpu::RowPiece piece = pieces[q];
    const int64_t row = ng * Cg + piece.first;
    const int64_t offset = row * HxW + piece.begin;
    relu_affine(x + offset, y + offset, piece.count, piece.length, &affine[row]);
  };
  cpu::run_two_passes(cpu::use_group_tasks(groups, group_size), groups, group_size, chunks,
                      std::min(cpu::kChunk, group_size), pieces.size(), pieces.piece_elements(),
                      sum, finish, write);
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
  const int64_t dx_bytes = rows * HxW * static_cast<int64_t>(sizeof(scalar_t));
  if (dx != nullptr) {
    cpu::advise_huge_pages(dx, dx_bytes);
  }

  // Per row: {ds, db} = {sum(dy * (relu(x) - mean)), sum(dy)} with the group's saved mean (in
  // float: dy * (r - mean) is a sum of small terms where dy * r and db * mean would cancel), by
  // chunks (parts[r * chunks + chunk]), added in order into sums[r].
  const int64_t chunks = cpu::chunks_per_row(HxW);
  std::vector<Sums> parts(HxW > cpu::kChunk ? rows * chunks : 0);
  std::vector<Sums> sums(rows);
  const cpu::RowPieces pieces(Cg, HxW);
  auto sum = [&](int64_t ng, int64_t q) {
    const cpu::RowPiece piece = pieces[q];
    const int64_t row = ng * Cg + piece.first;
    const int64_t offset = row * HxW + piece.begin;
    Sums* out = HxW > cpu::kChunk ? &parts[row * chunks + piece.begin / cpu::kChunk] : &sums[row];
    ops.relu_grad_sums(dy + offset, x + offset, piece.count, piece.length, mean[ng], out);
  };
  auto add_parts = [&](int64_t ng) {
    if (HxW > cpu::kChunk) {
      for (int64_t r = ng * Cg; r < (ng + 1) * Cg; ++r) {
        sums[r] = cpu::add_in_order(&parts[r * chunks], chunks);
      }
    }
  };

  if (dx == nullptr) {
    cpu::run_two_passes(/*group_tasks=*/false, groups, s.group_size(), pieces.size(),
                        pieces.piece_elements(), 0, 0, sum, add_parts, [](int64_t, int64_t) {});
  } else {
    // dr = c1 * dy + c2 * r + c3 per row: c1 = rstd * w[c]; c2, c3 those of the row's group.
    std::vector<acc> c1(rows);
    std::vector<acc> c2(rows);
    std::vector<acc> c3(rows);
    auto finish = [&](int64_t ng) {
      add_parts(ng);
      double ds_w = 0.0;
      double db_w = 0.0;
      for (int64_t k = 0; k < Cg; ++k) {
        const double w = param_or(weight, (ng % s.G) * Cg + k, 1.0);
        ds_w += sums[ng * Cg + k].s1 * w;
        db_w += sums[ng * Cg + k].s2 * w;
      }
      const double rs = static_cast<double>(rstd[ng]);
      const double mu = static_cast<double>(mean[ng]);
      const BackwardCoefficients coef = backward_coefficients(ds_w, db_w, mu, rs, count, mu);
      for (int64_t k = 0; k < Cg; ++k) {
        const int64_t r = ng * Cg + k;
        c1[r] = static_cast<acc>(rs * param_or(weight, (ng % s.G) * Cg + k, 1.0));
        c2[r] = static_cast<acc>(coef.c2);
        c3[r] = static_cast<acc>(coef.c3);
      }
    };
    // dx over piece q of the group's rows: dr masked by x > 0.
    const auto relu_affine_backward = cpu::loop_for_output(dx_bytes, ops.relu_affine_backward,
                                                           ops.relu_affine_backward_streaming);
    auto write = [&](int64_t ng, int64_t q) {
      const cpu::RowPiece piece = pieces[q];
      const int64_t row = ng * Cg + piece.first;
      const int64_t offset = row * HxW + piece.begin;
      relu_affine_backward(dy + offset, x + offset, dx + offset, piece.count, piece.length,
                           &c1[row], &c2[row], &c3[row]);
    };
    cpu::run_two_passes(cpu::use_group_tasks(groups, s.group_size()), groups, s.group_size(),
                        pieces.size(), pieces.piece_elements(), pieces.size(),
                        pieces.piece_elements(), sum, finish, write);
  }

  cpu::affine_param_grads(
      s, mean, rstd, /*sums_around_mean=*/true,
      [&](int64_t n, int64_t c) { return std::pair{sums[n * s.C + c].s1, sums[n * s.C + c].s2}; },
      dweight, dbias);
}

}  // namespace

void relu_group_norm_forward_cpu(const ReluGroupNormForwardParams& p) {
  dispatch_cpu_scalar(p.dtype, [&](auto tag) { forward_kernel<decltype(tag)>(p); });
}

void relu_group_norm_backward_cpu(const ReluGroupNormBackwardParams& p) {
  // The host asks for a channels-last dx on CUDA only.
  TORCH_INTERNAL_ASSERT(!p.dx_channels_last, "relu_group_norm CPU backward: channels-last dx");
  dispatch_cpu_scalar(p.dtype, [&](auto tag) { backward_kernel<decltype(tag)>(p); });
}

}  // namespace norm
}  // namespace fused_ops
