// Memory-bound work that a launch of the plain-TF32 wgmma convolution (split_tf32_wgmma_conv3d.cuh)
// does beside its products, in the three warps of its producer warpgroup that the im2col copies
// leave idle (one thread issues those copies). The pipelined ConvTranspose3d -> ReLU -> GroupNorm
// forward (tf32_relu_group_norm_launch, split_tf32_wgmma_conv3d_cuda.cu) runs the convolution in
// a few launches over consecutive ranges of output rows, and each launch
//   - transposes x (NCDHW -> NDHWC, rounded to TF32) for the samples the next launch reads, and
//   - writes the GroupNorm's output (NCDHW) for the samples whose statistics the launches
//     before it completed,
// so that of the two passes over memory around the convolution (at the headline on an H100:
// x's transpose 0.10 ms, the normalisation 0.22 ms) only the first launch's share of the one and
// the last launch's share of the other run on their own. No other warp waits for these, but
// they share the SM's memory pipes: the products slow down by about half of the time the passes
// they hide take on their own (benchmarks/h100-2026-11-27-tf32-pipeline/notes.txt).
//
// A unit of work is 16 channels x 32 kHalves positions of one sample (kHalves 2 or 4: as many
// as the warpgroup's registers hold, WgmmaConvTile::kSideHalves), moved by one warp: lane
// (q, j) = (lane / 8, lane % 8) holds channels 4q .. 4q + 3 at positions 32 h + 4j .. 32 h +
// 4j + 3 for each half h as 4 x 4 blocks, loaded and stored as float4 along whichever axis is
// contiguous (transposed in registers between): every load and store instruction covers whole
// 32-byte sectors (8 lanes x 16 bytes along positions, 4 lanes x 16 bytes along channels), and
// a lane has 4 kHalves loads in flight. Units are dealt to the launch's warps in turn;
// nothing waits for another block (a launch's side work reads only what earlier launches wrote:
// stream order). Values: the transpose rounds as the batched transpose does (tf32_rounded), the
// normalisation computes (relu(y) - center) * scale + shift as the channels-last GroupNorm's
// kernel does (relu_group_norm_channels_last_cuda.cu), from the same per-(n, c) affine.
// nvcc-only header.
#pragma once

#include "common/cuda/tf32_rounding.cuh"
#include "common/host_device.h"
#include "norm/group_norm_math.h"

#include <cstdint>

namespace fused_ops {
namespace gpu {

struct ConvSideWork {
  // x (N, in_channels, in_spatial) -> x_ndhwc (N, in_spatial, in_channels), rounded to TF32,
  // for samples [transpose_begin, transpose_end).
  const float* x;
  float* x_ndhwc;
  int64_t in_channels, in_spatial;
  int64_t transpose_begin, transpose_end;
  // out (N, out_channels, out_spatial) = (relu(y) - center) * scale + shift, with y (N,
  // out_spatial, out_channels) and affine[n * out_channels + c], for samples
  // [normalize_begin, normalize_end).
  const float* y;
  const norm::CenteredAffine<float>* affine;
  float* out;
  int64_t out_channels, out_spatial;
  int64_t normalize_begin, normalize_end;
};

// Whether the side work moves a tensor of these sizes: channels and positions in fours (float4
// along either axis; the pointers 16-byte aligned).
inline bool conv_side_work_supported(int64_t channels, int64_t spatial) {
  return channels % 4 == 0 && spatial % 4 == 0;
}

namespace side_work_detail {

// Indices in 32 bits (registers: these warps have the producer's few): the tensors have fewer
// than 2^29 elements (split_tf32_conv3d_shape_supported).
constexpr int kUnitChannels = 16;

__device__ __forceinline__ float component(const float4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;  // (i is unrolled: no select)
}

// A (channels, spatial) tensor's units: per sample, channel blocks x position blocks.
struct Units {
  int channels, spatial, unit_positions, position_blocks, per_sample;
  __device__ Units(int64_t c, int64_t s, int positions)
      : channels(static_cast<int>(c)),
        spatial(static_cast<int>(s)),
        unit_positions(positions),
        position_blocks((spatial + positions - 1) / positions),
        per_sample((channels + kUnitChannels - 1) / kUnitChannels * position_blocks) {}
};

// Unit u (of the tensor's first sample `n0`): its sample and, for this lane, the first of its
// four channels (or -1 where they are past the tensor's) and of its four positions.
struct LaneBlock {
  int n, c, s;
};
__device__ __forceinline__ LaneBlock lane_block(const Units& t, int n0, int u, int lane) {
  const int r = u % t.per_sample;
  const int c = r / t.position_blocks * kUnitChannels + 4 * (lane >> 3);
  return {n0 + u / t.per_sample, c < t.channels ? c : -1,
          r % t.position_blocks * t.unit_positions + 4 * (lane & 7)};
}

// x[n, c + i, s ..] for the lane's positions -> x_ndhwc[n, s .., c ..], TF32-rounded.
template <int kHalves>
__device__ __forceinline__ void transpose_unit(const ConvSideWork& w, const Units& t, LaneBlock b) {
  const int C = t.channels, S = t.spatial;
  const float* const x = w.x + (b.n * C + b.c) * S;
  float* const x_ndhwc = w.x_ndhwc + b.n * S * C + b.c;
  float4 v[kHalves][4];  // [half][channel i]: positions s .. s + 3
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    const int s = b.s + 32 * h;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[h][i] = s < S ? __ldcs(reinterpret_cast<const float4*>(x + i * S + s))
                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    const int s = b.s + 32 * h;
    if (s < S) {
#pragma unroll
      for (int t4 = 0; t4 < 4; ++t4) {
        *reinterpret_cast<float4*>(x_ndhwc + (s + t4) * C) =
            make_float4(tf32_rounded(component(v[h][0], t4)), tf32_rounded(component(v[h][1], t4)),
                        tf32_rounded(component(v[h][2], t4)), tf32_rounded(component(v[h][3], t4)));
      }
    }
  }
}

// y[n, s .., c ..] for the lane's positions -> out[n, c + i, s ..], normalised.
template <int kHalves>
__device__ __forceinline__ void normalize_unit(const ConvSideWork& w, const Units& t, LaneBlock b) {
  const int C = t.channels, S = t.spatial;
  const float* const y = w.y + b.n * S * C + b.c;
  float* const out = w.out + (b.n * C + b.c) * S;
  float4 v[kHalves][4];  // [half][position t]: channels c .. c + 3
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    const int s = b.s + 32 * h;
#pragma unroll
    for (int t4 = 0; t4 < 4; ++t4) {
      v[h][t4] = s < S ? __ldcs(reinterpret_cast<const float4*>(y + (s + t4) * C))
                       : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  const norm::CenteredAffine<float>* const affine = w.affine + b.n * C + b.c;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const norm::CenteredAffine<float> a = affine[i];
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const int s = b.s + 32 * h;
      const auto f = [&](int t4) {
        return (relu_keep_nan(component(v[h][t4], i)) - a.center) * a.scale + a.shift;
      };
      if (s < S) {
        __stcs(reinterpret_cast<float4*>(out + i * S + s), make_float4(f(0), f(1), f(2), f(3)));
      }
    }
  }
}

}  // namespace side_work_detail

// The launch's side work, by warp `warp` of `warps` (lane `lane`): the transpose's units, then
// the normalisation's.
template <int kHalves>
__device__ __forceinline__ void run_conv_side_work(const ConvSideWork& w, int warp, int warps,
                                                   int lane) {
  using namespace side_work_detail;
  const Units in(w.in_channels, w.in_spatial, 32 * kHalves);
  const Units out(w.out_channels, w.out_spatial, 32 * kHalves);
  const int transpose_units = static_cast<int>(w.transpose_end - w.transpose_begin) * in.per_sample;
  const int units =
      transpose_units + static_cast<int>(w.normalize_end - w.normalize_begin) * out.per_sample;
  for (int u = warp; u < units; u += warps) {
    if (u < transpose_units) {
      const LaneBlock b = lane_block(in, static_cast<int>(w.transpose_begin), u, lane);
      if (b.c >= 0) {
        transpose_unit<kHalves>(w, in, b);
      }
    } else {
      const LaneBlock b =
          lane_block(out, static_cast<int>(w.normalize_begin), u - transpose_units, lane);
      if (b.c >= 0) {
        normalize_unit<kHalves>(w, out, b);
      }
    }
  }
}

}  // namespace gpu
}  // namespace fused_ops
