// A second stream per device, for a launcher whose kernels form two independent chains: one
// chain goes on the side stream, forked from the caller's stream and joined back into it
// before the launcher returns, so that the two run at once (each fills the other's launch gaps
// and last waves) while the caller sees one stream's order.
//
// Fork and join are event record + stream wait, so CUDA graph capture follows them (the side
// stream joins the capture at the fork and leaves it at the join). A caching allocator's
// workspace stays valid: everything the caller's stream runs after the join waits for the side
// stream's kernels. The side stream is non-blocking (no implicit wait on the legacy default
// stream) and has the device's greatest priority, so its chain's blocks are scheduled first
// when both chains have blocks waiting (measured: benchmarks/h100-2026-11-27-concurrent-grads).
//
// Usage, with the lock held from the fork to the join (one section at a time per device: the
// events are shared, and a capture must not see another thread's work on the side stream):
//   SideStream* side = SideStream::current();
//   std::unique_lock<std::mutex> lock(side->mutex());
//   side->fork(stream); ...enqueue on side->stream() and stream...; side->join(stream);
#pragma once

#include "common/cuda/per_device.cuh"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>

namespace fused_ops {
namespace gpu {

class SideStream {
 public:
  // The current device's side stream, created on first use; nullptr where the device cannot
  // be queried or the stream or its events cannot be created (the caller then runs both
  // chains on its own stream).
  static SideStream* current() {
    static PerDevice<SideStream> registry;
    return registry.current([](int) -> std::unique_ptr<SideStream> {
      auto side = std::unique_ptr<SideStream>(new SideStream());
      return side->create() ? std::move(side) : nullptr;  // (null: tried again by the next call)
    });
  }

  cudaStream_t stream() const { return stream_; }
  std::mutex& mutex() { return mutex_; }

  // The side stream waits for all that `caller` has enqueued so far.
  cudaError_t fork(cudaStream_t caller) {
    const cudaError_t recorded = cudaEventRecord(fork_event_, caller);
    return recorded != cudaSuccess ? recorded : cudaStreamWaitEvent(stream_, fork_event_, 0);
  }
  // `caller` waits for all that the side stream has enqueued so far.
  cudaError_t join(cudaStream_t caller) {
    const cudaError_t recorded = cudaEventRecord(join_event_, stream_);
    return recorded != cudaSuccess ? recorded : cudaStreamWaitEvent(caller, join_event_, 0);
  }

 private:
  SideStream() = default;
  // (Its stream and events are never destroyed: a static's destructor may run after the CUDA
  // runtime has shut down.)
  bool create() {
    int least = 0, greatest = 0;
    if (cudaDeviceGetStreamPriorityRange(&least, &greatest) == cudaSuccess &&
        cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest) == cudaSuccess &&
        cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming) == cudaSuccess) {
      return true;
    }
    // What a failed creation made goes with it (the next call tries again from nothing).
    if (fork_event_ != nullptr) {
      cudaEventDestroy(fork_event_);
    }
    if (stream_ != nullptr) {
      cudaStreamDestroy(stream_);
    }
    return false;
  }

  cudaStream_t stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  std::mutex mutex_;
};

}  // namespace gpu
}  // namespace fused_ops
