// The current CUDA device's properties that kernel plans depend on, queried once per device.
#pragma once

#include "common/cuda/per_device.cuh"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace fused_ops {
namespace gpu {

struct DeviceInfo {
  size_t shared_memory = 0;   // opt-in shared memory per block, in bytes (0: query failed)
  int multiprocessors = 0;    // SMs
  bool tensor_cores = false;  // compute capability 8.0+ (mma.sync TF32)
};

// The current device's (cached per device; thread-safe). All zero if a query fails.
inline DeviceInfo current_device_info() {
  static PerDevice<DeviceInfo> cache;
  const DeviceInfo* info = cache.current([](int device) -> std::unique_ptr<DeviceInfo> {
    int bytes = 0, sms = 0, major = 0;
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      return nullptr;
    }
    return std::make_unique<DeviceInfo>(DeviceInfo{static_cast<size_t>(bytes), sms, major >= 8});
  });
  return info != nullptr ? *info : DeviceInfo{};
}

// The probe of Sm90aImageQuery: its sm_90a image holds static shared memory, any other image
// none. Instantiate it with a type of the file's own (an anonymous namespace's: the kernel then
// has internal linkage), so that each file registers, and is asked about, its own images.
template <typename FileTag>
__global__ void sm90a_image_probe_kernel(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ int marker[32];
  marker[threadIdx.x & 31] = static_cast<int>(threadIdx.x);
  __syncthreads();
  out[0] = marker[0];
#else
  out[0] = 0;
#endif
}

// Whether the environment variable `name` is "0": the switches that turn a kernel family off,
// for comparisons (read when asked: a test may change them between calls).
inline bool env_switch_off(const char* name) {
  const char* setting = std::getenv(name);
  return setting != nullptr && std::strcmp(setting, "0") == 0;
}
// Whether the environment variable `name` is "1": the switches that turn an option on (read
// when asked, as env_switch_off).
inline bool env_switch_on(const char* name) {
  const char* setting = std::getenv(name);
  return setting != nullptr && std::strcmp(setting, "1") == 0;
}

// Whether the current device runs the sm_90a image (Hopper's arch-specific instructions: wgmma)
// of the file that defines `probe`, a kernel whose sm_90a image holds static shared memory and
// whose other images hold none (read without a launch: cudaFuncGetAttributes): a device of
// compute capability 9.0 running that image, and the environment variable `disable_env` not
// "0" (which keeps the file's other kernels, for comparisons). Cached per device; thread-safe.
// One static instance per file, e.g.
//   namespace { struct ThisFile {}; }
//   static Sm90aImageQuery query(
//       reinterpret_cast<const void*>(sm90a_image_probe_kernel<ThisFile>), "FUSED_OPS_X");
class Sm90aImageQuery {
 public:
  Sm90aImageQuery(const void* probe, const char* disable_env)
      : probe_(probe), disable_env_(disable_env) {}

  bool operator()() {
    const bool* runs = cache_.current([this](int device) {
      int major = 0, minor = 0;
      const bool sm90 = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) ==
                            cudaSuccess &&
                        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) ==
                            cudaSuccess &&
                        major == 9 && minor == 0;
      bool image = false;
      if (sm90) {
        cudaFuncAttributes attributes{};
        if (cudaFuncGetAttributes(&attributes, probe_) == cudaSuccess) {
          image = attributes.sharedSizeBytes > 0;
        } else {
          cudaGetLastError();  // (a failed query leaves its error behind; clear only that one)
        }
      }
      return std::make_unique<bool>(image && !env_switch_off(disable_env_));
    });
    return runs != nullptr && *runs;
  }

 private:
  const void* probe_;
  const char* disable_env_;
  PerDevice<bool> cache_;
};

}  // namespace gpu
}  // namespace fused_ops
