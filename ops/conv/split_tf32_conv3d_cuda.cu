// The library's instances of the split-TF32 tensor-core convolution (split_tf32_conv3d.cuh):
// float32 3-d convolution and its weight gradient, NDHWC, with float32-grade accuracy.
//
// The forward runs the wgmma kernel (split_tf32_wgmma_conv3d.cuh) on sm_90 devices where it takes
// the shape, else CUTLASS's sm80 kernel: the wide tile here (its narrow one, for C_out <= 64, in
// split_tf32_conv3d_narrow_cuda.cu). The weight gradient: the wgmma kernel
// (split_tf32_wgmma_wgrad.cuh, x NCDHW) where it takes the shape, else CUTLASS's sm80 kernel on
// the wide tile. The choices and their measurements: benchmarks/split_tf32_wgmma_check.cu and
// benchmarks/tune_split_tf32_conv3d.cu.
#include "common/cuda/device_info.cuh"
#include "conv/conv_kernels.h"
#include "conv/split_tf32_conv3d.cuh"
#include "conv/split_tf32_wgmma_conv3d.cuh"
#include "conv/split_tf32_wgmma_wgrad.cuh"
#include "conv/wgmma_plane_conv3d.cuh"

namespace fused_ops {
namespace gpu {
namespace {

using Fprop = SplitTf32Conv3dFprop<SplitTf32WideTile>;
using Wgrad = SplitTf32Conv3dWgrad<SplitTf32WideTile>;

bool narrow(const conv::Conv3dShape& s) { return s.C_out <= 64; }

int wgrad_slices(const conv::Conv3dShape& s) {
  return Wgrad::slices(s, current_device_info().multiprocessors);
}

bool split_tf32_supported(const conv::Conv3dShape& s) {
  const DeviceInfo device = current_device_info();
  if (!device.tensor_cores || !conv::split_tf32_conv3d_shape_supported(s) ||
      sizeof(typename Fprop::Kernel::SharedStorage) > device.shared_memory ||
      sizeof(typename Wgrad::Kernel::SharedStorage) > device.shared_memory) {
    return false;
  }
  const conv::Conv3dChannelsLastParams forward{s, nullptr, nullptr, nullptr, nullptr};
  const conv::Conv3dWeightGradChannelsLastParams weight_grad{s, nullptr, nullptr, nullptr};
  const bool forward_runs =
      narrow(s) ? split_tf32_narrow_fprop_can_implement(forward, device.shared_memory)
                : Fprop::can_implement(forward);
  return forward_runs && Wgrad::can_implement(weight_grad, wgrad_slices(s));
}

size_t forward_workspace_bytes(const conv::Conv3dChannelsLastParams& p) {
  return wgmma_conv_supported(p.conv) ? wgmma_conv_workspace_bytes(p) : 0;
}

int forward_launch(const conv::Conv3dChannelsLastParams& p, void* workspace, void* stream) {
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  if ((p.tf32_products && !wgmma_conv_tf32_supported(p.conv)) ||
      (p.y_channels_first && !wgmma_conv_channels_first_supported(p.conv)) ||
      (p.x_from_norm.defined() && !(p.y_channels_first && wgmma_conv_supported(p.conv)))) {
    // (the host asks forward_tf32_supported / forward_channels_first_supported /
    // norm_grad_operand_supported)
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (wgmma_conv_supported(p.conv)) {
    return static_cast<int>(wgmma_conv_launch(p, workspace, cuda_stream));
  }
  if (p.relu_channel_moments != nullptr) {
    return static_cast<int>(
        cudaErrorInvalidValue);  // (the host asks forward_relu_moments_supported)
  }
  return static_cast<int>(narrow(p.conv) ? split_tf32_narrow_fprop_launch(p, cuda_stream)
                                         : Fprop::launch(p, cuda_stream));
}

bool tf32_forward_chosen(const conv::Conv3dShape& s) {
  if (env_switch_on("FUSED_OPS_TF32_WGMMA")) {
    return wgmma_conv_tf32_supported(s);
  }
  return !env_switch_off("FUSED_OPS_TF32_WGMMA") && wgmma_tf32_relu_group_norm_preferred(s);
}

int tf32_relu_group_norm_launch(const conv::Tf32ConvReluGroupNormParams& p, void* workspace,
                                void* stream) {
  return static_cast<int>(
      wgmma_tf32_relu_group_norm_launch(p, workspace, static_cast<cudaStream_t>(stream)));
}

const char* forward_kernel_name() {
  if (!current_device_info().tensor_cores) {
    return "";
  }
  return wgmma_conv_available() ? "wgmma" : "mma_sync";
}

size_t weight_grad_workspace_bytes(const conv::Conv3dWeightGradChannelsLastParams& p) {
  return Wgrad::workspace_bytes(p, wgrad_slices(p.conv));
}

int weight_grad_launch(const conv::Conv3dWeightGradChannelsLastParams& p, void* workspace,
                       void* stream) {
  return static_cast<int>(
      Wgrad::launch(p, wgrad_slices(p.conv), workspace, static_cast<cudaStream_t>(stream)));
}

size_t weight_grad_ncdhw_input_workspace_bytes(const conv::Conv3dWeightGradNcdhwInputParams& p) {
  return wgmma_wgrad_workspace_bytes(p.conv);
}

int weight_grad_ncdhw_input_launch(const conv::Conv3dWeightGradNcdhwInputParams& p, void* workspace,
                                   void* stream) {
  return static_cast<int>(wgmma_wgrad_launch(p.conv, p.x, p.grad_y, p.grad_y_from_norm,
                                             p.grad_weight, workspace, p.split_tf32,
                                             static_cast<cudaStream_t>(stream)));
}

bool norm_grad_operand_supported(const conv::Conv3dShape& input_grad,
                                 const conv::Conv3dShape& forward, bool tf32_products) {
  // Opted into only (FUSED_OPS_NORM_GRAD_OPERAND=1): slower than writing dy at the headline
  // (benchmarks/h200-2026-11-28-norm-grad-operand/notes.txt).
  if (!env_switch_on("FUSED_OPS_NORM_GRAD_OPERAND") ||
      !(tf32_products ? wgmma_conv_tf32_supported(input_grad) : wgmma_conv_supported(input_grad)) ||
      !wgmma_conv_channels_first_supported(input_grad) ||
      !wgmma_wgrad_norm_operand_supported(forward)) {
    return false;
  }
  // The plane kernel's checks of the shape (the pointers' alignment: any 16-byte aligned
  // address stands for the tensors here; the launch checks the real ones).
  float* const aligned = reinterpret_cast<float*>(uintptr_t{16});
  conv::Conv3dChannelsLastParams shape_only{input_grad, nullptr, nullptr, nullptr, aligned};
  shape_only.tf32_products = tf32_products;
  shape_only.y_channels_first = true;
  shape_only.x_from_norm = {aligned, aligned, aligned};
  return wgmma_plane_conv3d_supported(wgmma_conv_params(shape_only, nullptr), tf32_products);
}

}  // namespace
}  // namespace gpu

namespace conv {

const SplitTf32Conv3dCudaKernel split_tf32_conv3d_cuda{
    gpu::split_tf32_supported,
    gpu::forward_kernel_name,
    {gpu::forward_workspace_bytes, gpu::forward_launch},
    gpu::wgmma_conv_relu_moments_supported,
    gpu::wgmma_conv_channels_first_supported,
    gpu::wgmma_conv_tf32_supported,
    gpu::tf32_forward_chosen,
    {gpu::wgmma_tf32_relu_group_norm_workspace_bytes, gpu::tf32_relu_group_norm_launch},
    {gpu::weight_grad_workspace_bytes, gpu::weight_grad_launch},
    gpu::wgmma_wgrad_supported,
    {gpu::weight_grad_ncdhw_input_workspace_bytes, gpu::weight_grad_ncdhw_input_launch},
    gpu::norm_grad_operand_supported};

}  // namespace conv
}  // namespace fused_ops
