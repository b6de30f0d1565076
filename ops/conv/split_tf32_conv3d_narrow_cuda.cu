// The split-TF32 forward convolution (split_tf32_conv3d.cuh) with the narrow tile, for
// C_out <= 64: 128 x 64 x 16 per threadblock (4 warps of 64 x 32), 4 pipeline stages.
#include "conv/split_tf32_conv3d.cuh"

namespace fused_ops {
namespace gpu {

using NarrowFprop = SplitTf32Conv3dFprop<SplitTf32NarrowTile>;

bool split_tf32_narrow_fprop_can_implement(const conv::Conv3dChannelsLastParams& p,
                                           size_t shared_memory) {
  return sizeof(typename NarrowFprop::Kernel::SharedStorage) <= shared_memory &&
         NarrowFprop::can_implement(p);
}

cudaError_t split_tf32_narrow_fprop_launch(const conv::Conv3dChannelsLastParams& p,
                                           cudaStream_t stream) {
  return NarrowFprop::launch(p, stream);
}

}  // namespace gpu
}  // namespace fused_ops
