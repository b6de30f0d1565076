// The types that tie a kernel family to run_kernel.h (and the element types kernels take): plain
// C++ (no torch, no CUDA types), so that kernel headers can be included by nvcc-compiled files and
// by builds without CUDA.
#pragma once

#include <cstddef>

namespace fused_ops {

// The element type of a kernel's data tensors (its statistics are float, double for kDouble).
enum class ScalarKind { kFloat, kDouble, kHalf, kBFloat16 };

// Calls f with a value of the type that `kind` names among Float, Double, Half and BFloat16
// (the CPU kernels' c10 types, or the CUDA kernels' types) and returns what f returns:
// dispatch_scalar_kind<float, double, Half, BFloat16>(kind, [&](auto tag) {
//   using T = decltype(tag); ... }).
template <typename Float, typename Double, typename Half, typename BFloat16, typename F>
decltype(auto) dispatch_scalar_kind(ScalarKind kind, F&& f) {
  switch (kind) {
    case ScalarKind::kDouble:
      return f(Double{});
    case ScalarKind::kHalf:
      return f(Half{});
    case ScalarKind::kBFloat16:
      return f(BFloat16{});
    case ScalarKind::kFloat:
    default:  // (every ScalarKind is named above)
      return f(Float{});
  }
}

// The CUDA half of a kernel family. `launch` enqueues the kernels on `stream` (a
// cudaStream_t) with `workspace` (`workspace_bytes(params)` bytes, 256-byte aligned) and
// returns a cudaError_t (0 = success); it never throws. Plain types, so that headers
// declaring these stay includable without the CUDA toolkit.
template <typename Params>
struct CudaKernel {
  size_t (*workspace_bytes)(const Params&);
  int (*launch)(const Params&, void* workspace, void* stream);
};

// The kernels of one family: the CPU kernel, and the CUDA one (null when the library is built
// without CUDA; FUSED_OPS_CUDA_KERNEL below).
template <typename Params>
struct DeviceKernels {
  void (*cpu)(const Params&);
  const CudaKernel<Params>* cuda;
};

#ifdef FUSED_OPS_WITH_CUDA
#define FUSED_OPS_CUDA_KERNEL(kernel) (&(kernel))
#else
#define FUSED_OPS_CUDA_KERNEL(kernel) nullptr
#endif

}  // namespace fused_ops
