// A value per CUDA device, made on its first use on that device: the library's lazily queried
// device state (its properties, which images it runs, its side stream, occupancies). nvcc-only
// header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace fused_ops {
namespace gpu {

// One static instance per kind of value:
//   static PerDevice<Thing> things;
//   const Thing* thing = things.current([](int device) -> std::unique_ptr<Thing> { ... });
// `make` (called with the lock held, once per device unless it fails) returns null where the
// value cannot be made (a failed query): current() then returns null and the next call tries
// again. Values keep their addresses and are not destroyed before exit. Thread-safe.
template <typename T>
class PerDevice {
 public:
  // The current device's value; null where the device cannot be queried or `make` failed.
  template <typename Make>
  T* current(Make&& make) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<size_t>(device) >= values_.size()) {
      values_.resize(device + 1);
    }
    if (values_[device] == nullptr) {
      values_[device] = make(device);
    }
    return values_[device].get();
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<T>> values_;
};

}  // namespace gpu
}  // namespace fused_ops
