// Ordering between the generic proxy (ordinary loads and stores) and the async proxy (the
// tensor cores' operand reads through wgmma descriptors, the copy engine's bulk and tensor-map
// copies) on shared memory. nvcc-only header.
#pragma once

namespace fused_ops {
namespace gpu {

// Orders this thread's ordinary (generic-proxy) accesses to shared memory before its later
// async-proxy ones. (In SASS a MEMBAR.ALL.CTA first: it waits for the thread's memory
// operations in flight, so a thread with loads far ahead should leave the fence to another.)
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace gpu
}  // namespace fused_ops
