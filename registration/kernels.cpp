// The backend kernels of every operator. Each operator has one device-agnostic host function
// (ops/norm, ops/conv) that checks, allocates and runs the kernel of its input's device, and
// that also serves the Meta backend (shapes only, with symbolic sizes, so that torch.compile
// can trace every operator with static or dynamic shapes).
//
// * GroupNorm-family operators: registered for CPU, CUDA (in builds with CUDA) and Meta, so
//   that the CUDA registration says whether this build has CUDA kernels.
// * Conv operators: CompositeExplicitAutograd (every backend: they call ATen's convolution
//   and the GroupNorm host functions, which pick the device's kernels) and Meta.
// * Debug queries: CompositeImplicitAutograd (they compute nothing).
#include "conv/conv3d_group_norm_mean.h"
#include "conv/conv_stage.h"
#include "conv/conv_transpose3d_relu_group_norm.h"
#include "norm/group_norm_mean.h"
#include "norm/relu_group_norm.h"

#include <torch/library.h>

namespace fused_ops {
namespace {

void register_norm_kernels(torch::Library& m) {
  m.impl("relu_group_norm", TORCH_FN(norm::relu_group_norm));
  m.impl("group_norm_mean", TORCH_FN(norm::group_norm_mean));
  m.impl("_relu_group_norm_forward", TORCH_FN(norm::relu_group_norm_forward));
  m.impl("_relu_group_norm_backward", TORCH_FN(norm::relu_group_norm_backward));
  m.impl("_group_norm_mean_forward", TORCH_FN(norm::group_norm_mean_forward));
  m.impl("_group_norm_mean_backward", TORCH_FN(norm::group_norm_mean_backward));
}

void register_conv_kernels(torch::Library& m) {
  m.impl("conv_transpose3d_relu_group_norm", TORCH_FN(conv::conv_transpose3d_relu_group_norm));
  m.impl("conv3d_group_norm_mean", TORCH_FN(conv::conv3d_group_norm_mean));
  m.impl("_conv_transpose3d_relu_group_norm_forward",
         TORCH_FN(conv::conv_transpose3d_relu_group_norm_forward));
  m.impl("_conv_transpose3d_relu_group_norm_backward",
         TORCH_FN(conv::conv_transpose3d_relu_group_norm_backward));
  m.impl("_conv3d_group_norm_mean_forward", TORCH_FN(conv::conv3d_group_norm_mean_forward));
  m.impl("_conv3d_group_norm_mean_backward", TORCH_FN(conv::conv3d_group_norm_mean_backward));
  m.impl("_conv3d_group_norm_mean_onepass_forward",
         TORCH_FN(conv::conv3d_group_norm_mean_onepass_forward));
  m.impl("_conv3d_group_norm_mean_onepass_backward",
         TORCH_FN(conv::conv3d_group_norm_mean_onepass_backward));
}

}  // namespace

TORCH_LIBRARY_IMPL(fused, CPU, m) { register_norm_kernels(m); }

#ifdef FUSED_OPS_WITH_CUDA
TORCH_LIBRARY_IMPL(fused, CUDA, m) { register_norm_kernels(m); }
#endif

TORCH_LIBRARY_IMPL(fused, Meta, m) {
  register_norm_kernels(m);
  register_conv_kernels(m);
}

TORCH_LIBRARY_IMPL(fused, CompositeExplicitAutograd, m) { register_conv_kernels(m); }

TORCH_LIBRARY_IMPL(fused, CompositeImplicitAutograd, m) {
  m.impl("_relu_group_norm_path", TORCH_FN(norm::relu_group_norm_path));
  m.impl("_group_norm_mean_path", TORCH_FN(norm::group_norm_mean_path));
  m.impl("_conv_transpose3d_relu_group_norm_path",
         TORCH_FN(conv::conv_transpose3d_relu_group_norm_path));
  m.impl("_conv_transpose3d_relu_group_norm_backward_path",
         TORCH_FN(conv::conv_transpose3d_relu_group_norm_backward_path));
  m.impl("_conv3d_group_norm_mean_path", TORCH_FN(conv::conv3d_group_norm_mean_path));
  m.impl("_split_tf32_conv_kernel", TORCH_FN(conv::split_tf32_conv_kernel));
  m.impl("_conv3d_onepass_products_kernel", TORCH_FN(conv::conv3d_onepass_products_kernel));
}

}  // namespace fused_ops
