// One-pass CUDA kernels of conv3d_group_norm_mean: out[n] = mean of
// group_norm(conv3d(x) + conv_bias)[n], without ever writing the convolution's output.
//
// Everything out[n] needs from the convolution is, per (n, c), the mean of its output and,
// per (n, g), the group's second moment; both come from per-(n, c) moments (count, mean, M2)
// combined with Chan et al.'s formula (group_norm_math.h). The conv bias shifts a channel's
// mean and leaves its M2 alone, so it is folded in at the end.
//
// 1. onepass_moments_kernel: a persistent grid of 256-thread blocks walks the work items
//    (tiles) in a fixed assignment; a tile is (sample n, conv group g, chunk of `cb` output
//    channels, box of TD x TH x TW output positions) (conv_kernels.h: OnePassPlan).
//    Per tile, the block
//      * loads the box's input footprint (C_in/groups x FD x FH x FW, zero outside the input:
//        the padding) into shared memory, rows along W so that warps read coalesced;
//      * computes the direct convolution in registers: each thread owns 8 positions of the box
//        (t, t + 128, ...) and half of the cb channels, and runs over the K = C_in/groups *
//        kD * kH * kW taps: per tap, one shared-memory load per position (at the tap's
//        precomputed offset in the footprint), the channels' weights as 16-byte broadcasts,
//        and their outer product, 8 * cb / 2 multiply-adds in the accumulation type (float;
//        double for double). The products and sums are those of a float32 direct
//        convolution (no TF32);
//      * reduces, per channel, the box's valid positions to (mean, M2 about that mean) in
//        double: the sum first (warp butterflies, then the 8 warps in order), then the
//        squared deviations from the tile mean, the same way: no E[y^2] - mean^2
//        cancellation;
//      * writes one (mean, M2) pair per channel to the workspace slot of the tile.
//    The chunk's weights stay in shared memory from one tile to the next of the same chunk.
// 2. onepass_finalize_kernel: one block per sample combines, per channel, its tiles in box
//    order (counts from the box geometry), adds the conv bias to the mean, combines each
//    GroupNorm group's channels, and writes mean, rstd, the channel means and out[n].
//
// Every sum has a fixed order that depends on the shape only: results are deterministic.
#include "common/cuda/cuda_kernel.cuh"
#include "common/cuda/launch_utils.cuh"
#include "common/cuda/scalar_ops.cuh"
#include "conv/conv_kernels.h"
#include "norm/group_norm_math.h"

#include <mutex>
#include <vector>

namespace fused_ops {
namespace gpu {
namespace {

// A block's 256 threads: 2 channel groups (warps 0-3 and 4-7) of 128 position threads; a
// thread computes 8 positions x CB / 2 channels (an outer product per tap: 8 + CB / 2 shared
// loads for 4 * CB multiply-adds, which keeps the FMA units, not the loads, the bound).
constexpr int kChannelGroups = 2;
constexpr int kPositionThreads = kThreads / kChannelGroups;
constexpr int kWarpsPerGroup = kPositionThreads / kWarpSize;
constexpr int kPositionsPerThread = 8;
static_assert(kPositionThreads * kPositionsPerThread == conv::kOnePassBoxCapacity,
              "the plan's box capacity is the block's position slots");

// What the kernels need besides the params: the plan, and the shared-memory carving.
struct KernelArgs {
  conv::Conv3dGroupNormMeanParams p;
  conv::OnePassPlan plan;
  double2* partials;  // [tiles][cb]: (mean, M2) of the tile's valid positions per channel
  size_t koff_offset, footprint_offset, scratch_offset;  // bytes into shared memory
};

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Four consecutive accumulation-type values from 16-byte aligned shared memory.
__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
}
__device__ __forceinline__ void load4(const double* p, double (&v)[4]) {
  const double2 a = *reinterpret_cast<const double2*>(p);
  const double2 b = *reinterpret_cast<const double2*>(p + 2);
  v[0] = a.x;
  v[1] = a.y;
  v[2] = b.x;
  v[3] = b.y;
}

// The number of output positions of box `box` inside the output.
__host__ __device__ __forceinline__ int64_t box_count(const conv::OnePassPlan& plan,
                                                      const conv::Conv3dShape& s, int64_t box) {
  const int64_t bw = box % plan.boxes_w;
  const int64_t bh = (box / plan.boxes_w) % plan.boxes_h;
  const int64_t bd = box / (plan.boxes_w * plan.boxes_h);
  const int64_t nd = min64(plan.TD, s.Do - bd * plan.TD);
  const int64_t nh = min64(plan.TH, s.Ho - bh * plan.TH);
  const int64_t nw = min64(plan.TW, s.Wo - bw * plan.TW);
  return nd * nh * nw;
}

// Per-channel sums over the block, in a fixed order: each warp's butterfly, then the warps of
// the channel group in order. value(c) is this thread's value of its group's channel c (c < CT,
// a compile-time index: the loop is unrolled, so that values held in registers stay there);
// the totals of the block's kChannelGroups * CT channels land in `totals` (shared), valid for
// every thread after the call. Every thread must call it.
template <int CT, typename Value>
__device__ __forceinline__ void block_channel_sums(const Value& value, double* scratch,
                                                   double* totals) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int c = 0; c < CT; ++c) {
    const double v = warp_allreduce_sum(value(c));
    if (lane == 0) {
      scratch[warp * CT + c] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x < kChannelGroups * CT) {
    const int group = threadIdx.x / CT;
    const int local = threadIdx.x % CT;
    double t = 0.0;
    for (int w = 0; w < kWarpsPerGroup; ++w) {
      t += scratch[(group * kWarpsPerGroup + w) * CT + local];
    }
    totals[threadIdx.x] = t;
  }
  __syncthreads();
}

template <typename T, int CB>
__global__ void __launch_bounds__(kThreads, 2) onepass_moments_kernel(const KernelArgs a) {
  using acc_t = typename ScalarOps<T>::acc_t;
  constexpr int CT = CB / kChannelGroups;  // channels per thread
  static_assert(CT % 4 == 0, "weights are read 4 channels at a time");
  const conv::Conv3dShape& s = a.p.conv;
  const conv::OnePassPlan& plan = a.plan;
  extern __shared__ __align__(16) unsigned char smem[];
  acc_t* w_s = reinterpret_cast<acc_t*>(smem);                           // [K][CB]
  int* koff_s = reinterpret_cast<int*>(smem + a.koff_offset);            // [K]
  acc_t* x_s = reinterpret_cast<acc_t*>(smem + a.footprint_offset);      // [c_in_g][FD][FH][FW]
  double* scratch = reinterpret_cast<double*>(smem + a.scratch_offset);  // [warps][CT]
  double* totals = scratch + kWarpsPerBlock * CT;                        // [CB]
  double* tile_mean = totals + CB;                                       // [CB]

  const int K = static_cast<int>(plan.K);
  const int FH = static_cast<int>(plan.FH), FW = static_cast<int>(plan.FW);
  const int plane = static_cast<int>(plan.FD) * FH * FW;
  const int64_t kvol = s.kD * s.kH * s.kW;
  // Offset of tap k = (ci, kd, kh, kw) in the footprint.
  for (int k = threadIdx.x; k < K; k += kThreads) {
    const int64_t ci = k / kvol;
    const int64_t kd = (k / (s.kH * s.kW)) % s.kD;
    const int64_t kh = (k / s.kW) % s.kH;
    const int64_t kw = k % s.kW;
    koff_s[k] = static_cast<int>(ci * plane + kd * s.dilation[0] * FH * FW +
                                 kh * s.dilation[1] * FW + kw * s.dilation[2]);
  }

  const T* x = static_cast<const T*>(a.p.x);
  const T* weight = static_cast<const T*>(a.p.weight);
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int channel_group = threadIdx.x / kPositionThreads;  // (warp-uniform)
  const int position_thread = threadIdx.x % kPositionThreads;
  const int64_t box_volume = plan.TD * plan.TH * plan.TW;
  int64_t loaded_chunk = -1;  // (g * chunks + chunk) whose weights w_s holds

  for (int64_t tile = blockIdx.x; tile < plan.tiles; tile += gridDim.x) {
    const int64_t box = tile % plan.boxes;
    const int64_t n = (tile / plan.boxes) % s.N;
    const int64_t group_chunk = tile / (plan.boxes * s.N);
    const int64_t g = group_chunk / plan.chunks;
    const int64_t c0 = g * plan.c_out_g + (group_chunk % plan.chunks) * CB;  // first channel
    const int64_t c_end = (g + 1) * plan.c_out_g;                            // group's end
    const int64_t bw = box % plan.boxes_w;
    const int64_t bh = (box / plan.boxes_w) % plan.boxes_h;
    const int64_t bd = box / (plan.boxes_w * plan.boxes_h);
    const int64_t od0 = bd * plan.TD, oh0 = bh * plan.TH, ow0 = bw * plan.TW;

    __syncthreads();  // the previous tile is done with shared memory
    if (group_chunk != loaded_chunk) {
      for (int i = threadIdx.x; i < K * CB; i += kThreads) {
        const int k = i / CB;
        const int64_t c = c0 + i % CB;
        w_s[i] = c < c_end ? ScalarOps<T>::to_acc(weight[c * K + k]) : acc_t(0);
      }
      loaded_chunk = group_chunk;
    }
    // The footprint, one (ci, fd, fh) row per warp at a time.
    const int64_t id0 = od0 * s.stride[0] - s.padding[0];
    const int64_t ih0 = oh0 * s.stride[1] - s.padding[1];
    const int64_t iw0 = ow0 * s.stride[2] - s.padding[2];
    const int64_t rows = plan.c_in_g * plan.FD * FH;
    for (int64_t r = warp; r < rows; r += kWarpsPerBlock) {
      const int64_t ci = r / (plan.FD * FH);
      const int64_t id = id0 + (r / FH) % plan.FD;
      const int64_t ih = ih0 + r % FH;
      const bool row_inside = id >= 0 && id < s.D && ih >= 0 && ih < s.H;
      const T* src = x + (((n * s.C_in + g * plan.c_in_g + ci) * s.D + id) * s.H + ih) * s.W;
      for (int fw = lane; fw < FW; fw += kWarpSize) {
        const int64_t iw = iw0 + fw;
        x_s[r * FW + fw] =
            row_inside && iw >= 0 && iw < s.W ? ScalarOps<T>::to_acc(src[iw]) : acc_t(0);
      }
    }
    __syncthreads();

    // This thread's positions: their footprint offsets and whether they are outputs.
    int base[kPositionsPerThread];
    unsigned valid = 0;  // bit j: position j is an output
#pragma unroll
    for (int j = 0; j < kPositionsPerThread; ++j) {
      const int64_t pos = position_thread + j * kPositionThreads;
      const int64_t td = pos / (plan.TH * plan.TW);
      const int64_t th = (pos / plan.TW) % plan.TH;
      const int64_t tw = pos % plan.TW;
      if (pos < box_volume && od0 + td < s.Do && oh0 + th < s.Ho && ow0 + tw < s.Wo) {
        valid |= 1u << j;
      }
      base[j] =
          pos < box_volume
              ? static_cast<int>((td * s.stride[0] * FH + th * s.stride[1]) * FW + tw * s.stride[2])
              : 0;
    }
    acc_t acc[kPositionsPerThread][CT];
#pragma unroll
    for (int j = 0; j < kPositionsPerThread; ++j) {
#pragma unroll
      for (int c = 0; c < CT; ++c) {
        acc[j][c] = acc_t(0);
      }
    }
    const acc_t* w_group = w_s + channel_group * CT;
#pragma unroll 1
    for (int k = 0; k < K; ++k) {
      const int off = koff_s[k];
      acc_t xv[kPositionsPerThread];
#pragma unroll
      for (int j = 0; j < kPositionsPerThread; ++j) {
        xv[j] = x_s[base[j] + off];
      }
#pragma unroll
      for (int c = 0; c < CT; c += 4) {
        acc_t w[4];
        load4(w_group + k * CB + c, w);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int j = 0; j < kPositionsPerThread; ++j) {
            acc[j][c + i] = fma(xv[j], w[i], acc[j][c + i]);
          }
        }
      }
    }

    // Per-channel moments of the box's valid positions: sum, then squared deviations.
    const double count = static_cast<double>(box_count(plan, s, box));
    block_channel_sums<CT>(
        [&](int c) {
          // This thread's few values add up in the accumulation type, then in double.
          acc_t v = 0;
#pragma unroll
          for (int j = 0; j < kPositionsPerThread; ++j) {
            v += (valid >> j) & 1u ? acc[j][c] : acc_t(0);
          }
          return static_cast<double>(v);
        },
        scratch, totals);
    if (threadIdx.x < CB) {
      tile_mean[threadIdx.x] = totals[threadIdx.x] / count;
    }
    __syncthreads();  // tile_mean is written; every thread has read totals
    block_channel_sums<CT>(
        [&](int c) {
          const acc_t mean = static_cast<acc_t>(tile_mean[channel_group * CT + c]);
          acc_t v = 0;
#pragma unroll
          for (int j = 0; j < kPositionsPerThread; ++j) {
            const acc_t d = acc[j][c] - mean;
            v += (valid >> j) & 1u ? d * d : acc_t(0);
          }
          return static_cast<double>(v);
        },
        scratch, totals);
    if (threadIdx.x < CB) {
      a.partials[tile * CB + threadIdx.x] =
          make_double2(tile_mean[threadIdx.x], totals[threadIdx.x]);
    }
  }
}

template <typename T, int CB>
__global__ void __launch_bounds__(kThreads) onepass_finalize_kernel(const KernelArgs a) {
  using stat_t = typename ScalarOps<T>::acc_t;
  const conv::Conv3dShape& s = a.p.conv;
  const conv::OnePassPlan& plan = a.plan;
  extern __shared__ __align__(16) unsigned char smem[];
  auto* channel_moments = reinterpret_cast<norm::Moments*>(smem);         // [C_out]
  double* reduce = reinterpret_cast<double*>(channel_moments + s.C_out);  // [kThreads]
  const int64_t n = blockIdx.x;
  const T* conv_bias = static_cast<const T*>(a.p.conv_bias);
  const T* gn_weight = static_cast<const T*>(a.p.gn_weight);
  const T* gn_bias = static_cast<const T*>(a.p.gn_bias);

  for (int64_t c = threadIdx.x; c < s.C_out; c += kThreads) {
    const int64_t g = c / plan.c_out_g;
    const int64_t chunk = (c % plan.c_out_g) / CB;
    const int64_t local = (c % plan.c_out_g) % CB;
    const int64_t first_tile = ((g * plan.chunks + chunk) * s.N + n) * plan.boxes;
    norm::CountedMoments m{0.0, 0.0, 0.0};
    for (int64_t box = 0; box < plan.boxes; ++box) {
      const double2 t = a.partials[(first_tile + box) * CB + local];
      m = norm::combine_parts(
          m, norm::CountedMoments{static_cast<double>(box_count(plan, s, box)), t.x, t.y});
    }
    const double bias = conv_bias != nullptr ? ScalarOps<T>::to_double(conv_bias[c]) : 0.0;
    channel_moments[c] = norm::Moments{m.mean + bias, m.m2};
    static_cast<stat_t*>(a.p.channel_mean)[n * s.C_out + c] = static_cast<stat_t>(m.mean + bias);
  }
  __syncthreads();

  // GroupNorm's groups: equal-sized channels combined, then each channel's term of out[n].
  const int64_t G = a.p.num_groups;
  const int64_t Cg = s.C_out / G;
  const double spatial = static_cast<double>(s.Do * s.Ho * s.Wo);
  double total = 0.0;
  for (int64_t gg = threadIdx.x; gg < G; gg += kThreads) {
    const norm::Moments m = norm::combine_equal_parts(&channel_moments[gg * Cg], Cg, spatial);
    const double rstd = norm::rstd_from_m2(m.m2, spatial * static_cast<double>(Cg), a.p.eps);
    static_cast<stat_t*>(a.p.mean)[n * G + gg] = static_cast<stat_t>(m.mean);
    static_cast<stat_t*>(a.p.rstd)[n * G + gg] = static_cast<stat_t>(rstd);
    for (int64_t c = gg * Cg; c < (gg + 1) * Cg; ++c) {
      const double w = gn_weight != nullptr ? ScalarOps<T>::to_double(gn_weight[c]) : 1.0;
      const double b = gn_bias != nullptr ? ScalarOps<T>::to_double(gn_bias[c]) : 0.0;
      total += norm::group_norm_mean_channel_term(channel_moments[c].mean - m.mean, rstd, w, b);
    }
  }
  reduce[threadIdx.x] = total;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      reduce[threadIdx.x] += reduce[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    static_cast<T*>(a.p.out)[n] =
        ScalarOps<T>::from_double(reduce[0] / static_cast<double>(s.C_out));
  }
}

// The current device's opt-in shared memory per block (cached per device).
size_t device_shared_memory_limit() {
  static std::mutex mutex;
  static std::vector<size_t> limits;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return 0;
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<size_t>(device) >= limits.size()) {
    limits.resize(device + 1, 0);
  }
  if (limits[device] == 0) {
    int bytes = 0;
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
        cudaSuccess) {
      return 0;
    }
    limits[device] = static_cast<size_t>(bytes);
  }
  return limits[device];
}

conv::OnePassPlan plan_for(const conv::Conv3dGroupNormMeanParams& p) {
  return conv::plan_conv3d_group_norm_mean_onepass(p.conv, p.dtype, device_shared_memory_limit());
}

template <typename T, int CB>
cudaError_t launch_with_cb(const KernelArgs& args, cudaStream_t stream) {
  const auto moments = onepass_moments_kernel<T, CB>;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(moments,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      static_cast<int>(args.plan.smem_bytes)));
  int device = 0, sms = 0, per_sm = 0;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  FUSED_OPS_RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, moments, kThreads, args.plan.smem_bytes));
  const int64_t resident = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  const int64_t blocks = args.plan.tiles < resident ? args.plan.tiles : resident;
  moments<<<static_cast<unsigned>(blocks), kThreads, args.plan.smem_bytes, stream>>>(args);
  FUSED_OPS_RETURN_IF_LAUNCH_FAILED();
  const size_t finalize_smem =
      static_cast<size_t>(args.p.conv.C_out) * sizeof(norm::Moments) + kThreads * sizeof(double);
  const auto finalize = onepass_finalize_kernel<T, CB>;
  FUSED_OPS_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(
      finalize, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(finalize_smem)));
  if (!grid_fits(args.p.conv.N)) {
    return cudaErrorInvalidConfiguration;
  }
  finalize<<<static_cast<unsigned>(args.p.conv.N), kThreads, finalize_smem, stream>>>(args);
  return cudaGetLastError();
}

template <typename T>
struct OnePassFamily {
  static size_t workspace_bytes(const conv::Conv3dGroupNormMeanParams& p) {
    return plan_for(p).workspace_bytes;
  }
  static cudaError_t launch(const conv::Conv3dGroupNormMeanParams& p, void* workspace,
                            cudaStream_t stream) {
    using acc_t = typename ScalarOps<T>::acc_t;
    KernelArgs args;
    args.p = p;
    args.plan = plan_for(p);
    if (!args.plan.supported) {
      return cudaErrorInvalidValue;
    }
    args.partials = static_cast<double2*>(workspace);
    const auto round16 = [](size_t b) { return (b + 15) / 16 * 16; };
    args.koff_offset = round16(args.plan.K * args.plan.cb * sizeof(acc_t));
    args.footprint_offset = args.koff_offset + round16(args.plan.K * sizeof(int));
    args.scratch_offset =
        args.footprint_offset +
        round16(args.plan.c_in_g * args.plan.FD * args.plan.FH * args.plan.FW * sizeof(acc_t));
    switch (args.plan.cb) {
      case 8:
        return launch_with_cb<T, 8>(args, stream);
      case 16:
        return launch_with_cb<T, 16>(args, stream);
      case 24:
        return launch_with_cb<T, 24>(args, stream);
      default:
        return cudaErrorInvalidValue;
    }
  }
};

bool onepass_supported(const conv::Conv3dGroupNormMeanParams& p) { return plan_for(p).supported; }

}  // namespace
}  // namespace gpu

namespace conv {

const OnePassCudaKernel conv3d_group_norm_mean_onepass_cuda{
    gpu::onepass_supported, gpu::make_cuda_kernel<Conv3dGroupNormMeanParams, gpu::OnePassFamily>()};

}  // namespace conv
}  // namespace fused_ops
