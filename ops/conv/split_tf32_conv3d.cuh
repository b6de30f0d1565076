// 3-d convolutions in float32 on tensor cores with float32-grade accuracy (nvcc only; needs
// NVIDIA CUTLASS's headers). The forward convolution (SplitTf32Conv3dFprop)
//
//   y[n, z, p, q, k] = bias[k] + sum over (t, r, s, c) of
//       x[n, z*sd - pd + t*dd, p*sh - ph + r*dh, q*sw - pw + s*dw, c] * w[k, t, r, s, c]
//
// and its weight gradient (SplitTf32Conv3dWgrad)
//
//   dw[k, t, r, s, c] = sum over (n, z, p, q) of dy[n, z, p, q, k] * x[n, z*sd - pd + t*dd, ...]
//
// x, y, dy NDHWC, w, dw KTRSC (channels last), zero outside x (the padding); one conv group.
// (The input gradient of a stride-1 convolution is a forward convolution too.)
//
// Computation: CUTLASS's implicit GEMM (sm80 multistage mainloop, cp.async, mma.sync
// m16n8k8), M = N*Do*Ho*Wo output positions by N = C_out channels over K = kD*kH*kW*C_in, with
// split TF32 ("3xTF32", CUTLASS's OpMultiplyAddFastF32): each operand is a TF32 high part plus
// a TF32 remainder, a * b = a_hi b_hi + a_hi b_lo + a_lo b_hi (the dropped a_lo b_lo is ~2^-22
// of it), accumulated in float32. Plain TF32 (one product) rounds operands to 11 bits, three
// orders of magnitude less accurate than float32; this keeps float32's accuracy at about a
// third of TF32's tensor-core rate, several times cuDNN's float32 convolution.
//
// Tiling: SplitTf32Tile (threadblock M x N x K, warp M x N, pipeline stages); the tile the
// library runs is chosen by benchmarks/tune_split_tf32_conv3d.cu.
//
// Epilogue of the forward: y = acc + bias[k]. CUTLASS's linear combination D = alpha * acc + C
// with C the bias read through a tensor reference of stride 0 (every output row reads the same
// C_out values) and no beta scaling.
//
// The weight gradient is a GEMM of M = C_out by N = kD*kH*kW*C_in over K = N*Do*Ho*Wo: few
// output tiles and a long reduction, so K is split into slices (serial split-K: the slices'
// partial sums are added into dw one after another, in slice order, so the result is
// deterministic). Epilogue: dw = acc (+ the previous slices' sum).
#pragma once

#include "conv/conv_kernels.h"

#include <cuda_runtime.h>

#include "cutlass/conv/conv3d_problem_size.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/conv/kernel/default_conv3d_fprop.h"
#include "cutlass/conv/kernel/default_conv3d_wgrad.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"

#include <cstdint>
#include <limits>

namespace fused_ops {
namespace gpu {

template <int TbM, int TbN, int TbK, int WarpM, int WarpN, int Stages, int Swizzle = 1>
struct SplitTf32Tile {
  using Threadblock = cutlass::gemm::GemmShape<TbM, TbN, TbK>;
  using Warp = cutlass::gemm::GemmShape<WarpM, WarpN, TbK>;
  static constexpr int kStages = Stages;
  static constexpr int kSwizzle = Swizzle;
};

// The CUTLASS kernel that `DefaultConv` (DefaultConv3dFprop or DefaultConv3dWgrad, which take
// the same parameters) builds for float32 NDHWC operands on split-TF32 tensor cores (sm80
// mma.sync m16n8k8, OpMultiplyAddFastF32), with `Tile` and `Epilogue`.
template <
    template <typename, typename, typename, typename, typename, typename, typename, typename,
              typename, typename, typename, typename, typename, typename, int, typename,
              cutlass::conv::IteratorAlgorithm, cutlass::conv::StrideSupport> class DefaultConv,
    typename Tile, typename Epilogue, cutlass::conv::StrideSupport Strides>
using SplitTf32Kernel =
    typename DefaultConv<float, cutlass::layout::TensorNDHWC, float, cutlass::layout::TensorNDHWC,
                         float, cutlass::layout::TensorNDHWC, float, cutlass::arch::OpClassTensorOp,
                         cutlass::arch::Sm80, typename Tile::Threadblock, typename Tile::Warp,
                         cutlass::gemm::GemmShape<16, 8, 8>, Epilogue,
                         cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<Tile::kSwizzle>,
                         Tile::kStages, cutlass::arch::OpMultiplyAddFastF32,
                         cutlass::conv::IteratorAlgorithm::kOptimized, Strides>::Kernel;

template <typename Tile>
struct SplitTf32Conv3dFprop {
  // 128-bit accesses: 4 floats, so C_in and C_out must be multiples of 4.
  static constexpr int kAlignment = 4;
  using Epilogue = cutlass::epilogue::thread::LinearCombination<
      float, kAlignment, float, float, cutlass::epilogue::thread::ScaleType::NoBetaScaling>;
  using Kernel = SplitTf32Kernel<cutlass::conv::kernel::DefaultConv3dFprop, Tile, Epilogue,
                                 cutlass::conv::StrideSupport::kUnity>;
  using Operator = cutlass::conv::device::ImplicitGemmConvolution<Kernel>;

  static cutlass::conv::Conv3dProblemSize problem(const conv::Conv3dShape& s) {
    auto i = [](int64_t v) { return static_cast<int>(v); };
    return cutlass::conv::Conv3dProblemSize(
        i(s.N), i(s.D), i(s.H), i(s.W), i(s.C_in), i(s.C_out), i(s.kD), i(s.kH), i(s.kW), i(s.Do),
        i(s.Ho), i(s.Wo), i(s.padding[0]), i(s.padding[1]), i(s.padding[2]), i(s.stride[0]),
        i(s.stride[1]), i(s.stride[2]), i(s.dilation[0]), i(s.dilation[1]), i(s.dilation[2]),
        cutlass::conv::Mode::kCrossCorrelation, /*split_k_slices=*/1, /*groups=*/1);
  }

  static typename Operator::Arguments arguments(const conv::Conv3dChannelsLastParams& p) {
    const auto size = problem(p.conv);
    using Layout = cutlass::layout::TensorNDHWC;
    const Layout bias_layout(typename Layout::Stride(0));  // every row reads the same C_out values
    return typename Operator::Arguments(
        size, {const_cast<float*>(p.x), Layout::packed(size.activation_extent())},
        {const_cast<float*>(p.weight), Layout::packed(size.filter_extent())},
        {const_cast<float*>(p.bias), bias_layout}, {p.y, Layout::packed(size.output_extent())},
        {1.0f, 0.0f});
  }

  // Whether CUTLASS can run these arguments (alignment, sizes); the shape must already be
  // within int range (conv::split_tf32_conv3d_shape_supported).
  static bool can_implement(const conv::Conv3dChannelsLastParams& p) {
    return Operator::can_implement(arguments(p)) == cutlass::Status::kSuccess &&
           Operator::get_workspace_size(arguments(p)) == 0;
  }

  static cudaError_t launch(const conv::Conv3dChannelsLastParams& p, cudaStream_t stream) {
    Operator op;
    const auto args = arguments(p);
    if (op.can_implement(args) != cutlass::Status::kSuccess ||
        Operator::get_workspace_size(args) != 0 ||
        op.initialize(args, /*workspace=*/nullptr, stream) != cutlass::Status::kSuccess) {
      return cudaErrorInvalidValue;
    }
    if (op.run(stream) != cutlass::Status::kSuccess) {
      const cudaError_t error = cudaGetLastError();
      return error != cudaSuccess ? error : cudaErrorLaunchFailure;
    }
    return cudaGetLastError();
  }
};

// The library's forward tiles (split_tf32_conv3d_cuda.cu): 128 x 128 x 16, 8 warps of 32 x 64,
// 4 stages, for C_out > 64; 128 x 64 x 16, 4 warps of 64 x 32, 4 stages (split_tf32_conv3d_
// narrow_cuda.cu) for C_out <= 64, where the wide tile would compute half of its columns for
// nothing (the input gradient of the headline's 64 -> 128 transposed convolution).
using SplitTf32WideTile = SplitTf32Tile<128, 128, 16, 32, 64, 4>;
using SplitTf32NarrowTile = SplitTf32Tile<128, 64, 16, 64, 32, 4>;
// The narrow tile's instance, compiled in its own file.
bool split_tf32_narrow_fprop_can_implement(const conv::Conv3dChannelsLastParams& p,
                                           size_t shared_memory);
cudaError_t split_tf32_narrow_fprop_launch(const conv::Conv3dChannelsLastParams& p,
                                           cudaStream_t stream);

template <typename Tile>
struct SplitTf32Conv3dWgrad {
  static constexpr int kAlignment = 4;
  using Epilogue = cutlass::epilogue::thread::LinearCombination<float, kAlignment, float, float>;
  using Kernel = SplitTf32Kernel<cutlass::conv::kernel::DefaultConv3dWgrad, Tile, Epilogue,
                                 cutlass::conv::StrideSupport::kStrided>;
  using Operator = cutlass::conv::device::ImplicitGemmConvolution<Kernel>;

  static typename Operator::Arguments arguments(const conv::Conv3dWeightGradChannelsLastParams& p,
                                                int slices) {
    auto size = SplitTf32Conv3dFprop<Tile>::problem(p.conv);
    size.split_k_slices = slices;
    using Layout = cutlass::layout::TensorNDHWC;
    const auto dw = Layout::packed(size.filter_extent());
    return typename Operator::Arguments(
        size, {const_cast<float*>(p.grad_y), Layout::packed(size.output_extent())},
        {const_cast<float*>(p.x), Layout::packed(size.activation_extent())}, {p.grad_weight, dw},
        {p.grad_weight, dw}, {1.0f, 0.0f}, cutlass::conv::SplitKMode::kSerial);
  }

  // Split-K slices: as many as fill 8 waves of one block per SM without starting a ninth (a
  // partly filled last wave costs a whole one: measured on an H100 at the headline's 14 tiles,
  // 19 slices (2.02 waves) took 7.9 ms, 8 (0.85) 6.3 ms, 76 (8.06) 6.0 ms); each slice at
  // least 1024 output positions long. More slices also mean shorter float32 sums (max error
  // 6.6e-7 with 8 slices, 2.3e-7 with 76).
  static int slices(const conv::Conv3dShape& s, int multiprocessors) {
    const int64_t tiles =
        (s.C_out + Tile::Threadblock::kM - 1) / Tile::Threadblock::kM *
        ((s.kD * s.kH * s.kW * s.C_in + Tile::Threadblock::kN - 1) / Tile::Threadblock::kN);
    const int64_t reduction = s.N * s.Do * s.Ho * s.Wo;
    int64_t k = 8 * static_cast<int64_t>(multiprocessors) / tiles;
    k = k < reduction / 1024 ? k : reduction / 1024;
    return static_cast<int>(k < 1 ? 1 : (k > 256 ? 256 : k));
  }

  static bool can_implement(const conv::Conv3dWeightGradChannelsLastParams& p, int slices) {
    return Operator::can_implement(arguments(p, slices)) == cutlass::Status::kSuccess;
  }

  static size_t workspace_bytes(const conv::Conv3dWeightGradChannelsLastParams& p, int slices) {
    return Operator::get_workspace_size(arguments(p, slices));
  }

  static cudaError_t launch(const conv::Conv3dWeightGradChannelsLastParams& p, int slices,
                            void* workspace, cudaStream_t stream) {
    Operator op;
    const auto args = arguments(p, slices);
    if (op.can_implement(args) != cutlass::Status::kSuccess ||
        op.initialize(args, workspace, stream) != cutlass::Status::kSuccess) {
      return cudaErrorInvalidValue;
    }
    if (op.run(stream) != cutlass::Status::kSuccess) {
      const cudaError_t error = cudaGetLastError();
      return error != cudaSuccess ? error : cudaErrorLaunchFailure;
    }
    return cudaGetLastError();
  }
};

}  // namespace gpu
}  // namespace fused_ops
