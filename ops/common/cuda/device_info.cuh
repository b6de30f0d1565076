// The current CUDA device's properties that kernel plans depend on, queried once per device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <vector>

namespace fused_ops {
namespace gpu {

struct DeviceInfo {
  size_t shared_memory = 0;   // opt-in shared memory per block, in bytes (0: query failed)
  int multiprocessors = 0;    // SMs
  bool tensor_cores = false;  // compute capability 8.0+ (mma.sync TF32)
};

// The current device's (cached per device; thread-safe). All zero if a query fails.
inline DeviceInfo current_device_info() {
  static std::mutex mutex;
  static std::vector<DeviceInfo> cache;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return {};
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<size_t>(device) >= cache.size()) {
    cache.resize(device + 1);
  }
  DeviceInfo& info = cache[device];
  if (info.shared_memory == 0) {
    int bytes = 0, sms = 0, major = 0;
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      return {};
    }
    info.shared_memory = static_cast<size_t>(bytes);
    info.multiprocessors = sms;
    info.tensor_cores = major >= 8;
  }
  return info;
}

}  // namespace gpu
}  // namespace fused_ops
