#include "common/cpu_output_memory.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace fused_ops {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

int64_t cache_limit_bytes() {
  static const int64_t limit = [] {
    const char* text = std::getenv("FUSED_OPS_CPU_OUTPUT_CACHE_MB");
    const long long mib = text != nullptr ? std::atoll(text) : 512;
    return static_cast<int64_t>(std::max(mib, 0LL)) << 20;
  }();
  return limit;
}

struct Block {
  void* data;
  size_t bytes;
};

// The freed blocks, newest first.
class BlockCache {
 public:
  // A kept block of exactly `bytes`, or {nullptr, 0}.
  Block take(size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->bytes == bytes) {
        const Block b = *it;
        blocks_.erase(it);
        kept_bytes_ -= static_cast<int64_t>(b.bytes);
        return b;
      }
    }
    return Block{nullptr, 0};
  }

  // Keeps `b`, then frees the oldest blocks beyond the bounds (outside the lock).
  void give(Block b) {
    std::vector<Block> evicted;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      blocks_.push_front(b);
      kept_bytes_ += static_cast<int64_t>(b.bytes);
      while (!blocks_.empty() && (static_cast<int>(blocks_.size()) > kMaxCachedBlocks ||
                                  kept_bytes_ > cache_limit_bytes())) {
        evicted.push_back(blocks_.back());
        kept_bytes_ -= static_cast<int64_t>(blocks_.back().bytes);
        blocks_.pop_back();
      }
    }
    for (const Block& e : evicted) {
      std::free(e.data);
    }
  }

  int64_t kept_bytes() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return kept_bytes_;
  }

 private:
  std::mutex mutex_;
  std::deque<Block> blocks_;
  int64_t kept_bytes_ = 0;
};

BlockCache& block_cache() {
  static auto* cache = new BlockCache();  // never destroyed: tensors may outlive static exit
  return *cache;
}

void return_block(void* context) {
  auto* b = static_cast<Block*>(context);
  block_cache().give(*b);
  delete b;
}

class ReusingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n < static_cast<size_t>(kMinCachedBytes) || cache_limit_bytes() == 0) {
      return c10::GetCPUAllocator()->allocate(n);
    }
    const size_t bytes = (n + kHugePage - 1) / kHugePage * kHugePage;
    Block b = block_cache().take(bytes);
    if (b.data == nullptr) {
      void* data = nullptr;
      TORCH_CHECK(posix_memalign(&data, kHugePage, bytes) == 0 && data != nullptr,
                  "fused_ops: out of CPU memory allocating ", bytes, " bytes");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
      (void)madvise(data, bytes, MADV_HUGEPAGE);  // a hint: without THP nothing happens
#endif
      b = Block{data, bytes};
    }
    auto* context = new Block(b);
    return c10::DataPtr(b.data, context, &return_block, c10::Device(c10::DeviceType::CPU));
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

ReusingCpuAllocator& reusing_allocator() {
  static auto* allocator = new ReusingCpuAllocator();
  return *allocator;
}

}  // namespace

at::Tensor empty_cpu_output(c10::IntArrayRef sizes, c10::ScalarType dtype) {
  return at::detail::empty_generic(sizes, &reusing_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::CPU), dtype,
                                   c10::MemoryFormat::Contiguous);
}

at::Tensor empty_output_like(const at::Tensor& input) {
  if (input.is_cpu()) {
    if (const auto sizes = c10::asIntArrayRefSlowOpt(input.sym_sizes())) {
      return empty_cpu_output(*sizes, input.scalar_type());
    }
  }
  return at::empty_symint(input.sym_sizes(), input.options());
}

int64_t cpu_output_cache_bytes() { return block_cache().kept_bytes(); }

}  // namespace fused_ops
