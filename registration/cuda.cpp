// CUDA kernels of every fused operator.
#include "backend_kernels.h"
#include "group_norm_mean.h"
#include "relu_group_norm.h"

#include <torch/library.h>

namespace fused_ops {

TORCH_LIBRARY_IMPL(fused, CUDA, m) {
  m.impl("relu_group_norm", TORCH_FN(first_output_of<relu_group_norm_forward_cuda>));
  m.impl("group_norm_mean", TORCH_FN(first_output_of<group_norm_mean_forward_cuda>));
  m.impl("conv_transpose3d_relu_group_norm", TORCH_FN(conv_transpose3d_relu_group_norm_kernel));
  m.impl("conv3d_group_norm_mean", TORCH_FN(conv3d_group_norm_mean_kernel));
  m.impl("_relu_group_norm_forward", TORCH_FN(relu_group_norm_forward_cuda));
  m.impl("_relu_group_norm_backward", TORCH_FN(relu_group_norm_backward_cuda));
  m.impl("_group_norm_mean_forward", TORCH_FN(group_norm_mean_forward_cuda));
  m.impl("_group_norm_mean_backward", TORCH_FN(group_norm_mean_backward_cuda));
}

}  // namespace fused_ops
