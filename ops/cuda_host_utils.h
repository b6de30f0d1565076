// Host-side helpers shared by the CUDA wrappers (*_cuda.cpp): mapping ATen's scalar types to
// the CUDA types the launchers take, the CUDA input check, and workspace allocation.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>

namespace fused_ops {

// The CUDA type with the layout of an ATen scalar type.
template <typename T>
struct CudaScalar {
  using type = T;
};
template <>
struct CudaScalar<at::Half> {
  using type = __half;
};
template <>
struct CudaScalar<at::BFloat16> {
  using type = __nv_bfloat16;
};

template <typename T>
const typename CudaScalar<T>::type* as_cuda(const T* p) {
  return reinterpret_cast<const typename CudaScalar<T>::type*>(p);
}
template <typename T>
typename CudaScalar<T>::type* as_cuda(T* p) {
  return reinterpret_cast<typename CudaScalar<T>::type*>(p);
}

inline void check_cuda_input(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.is_cuda(), op, ": expected a CUDA input tensor, got one on ", input.device());
}

// Device workspace of `bytes` bytes on `like`'s device.
inline at::Tensor workspace_like(const at::Tensor& like, size_t bytes) {
  return at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
}

}  // namespace fused_ops
