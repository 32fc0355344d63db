// A bounded cache of what a kernel library prepares for one kernel call --
// oneDNN's primitives on the CPU device (core/cpu/library_kernels.h),
// cuDNN's descriptors and chosen algorithms on a CUDA device
// (core/cuda/cudnn_kernels.h) -- keyed by the call's arguments and dtype,
// the least recently used dropped first. A preparation that failed is kept
// as its error, so a device's kernel-selection table (Device::Select) asks
// the library once per shape, not once per call.
//
// Thread-safety: Get and counts may be called from any thread. A value is
// made outside the lock (preparing takes milliseconds); two threads that
// miss the same key at once may both make it, and the first one stored is
// the one both get.
#ifndef TENSORD_CORE_BASE_LIBRARY_CACHE_H_
#define TENSORD_CORE_BASE_LIBRARY_CACHE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "absl/status/statusor.h"
#include "core/base/device.h"

namespace tensord::core {

// The kernel kind, its pass, its algorithm (pooling) or bias (conv2d), the
// dtype, the window, (conv2d) groups and out_channels, and one value of the
// library's own (the CPU's: the threads a primitive is made for).
using LibraryKey = std::array<int64_t, 21>;
LibraryKey LibraryKeyOf(const KernelArgs& args, DType dtype, int64_t extra);

struct LibraryKeyHash {
  size_t operator()(const LibraryKey& key) const;
};

struct LibraryCacheCounts {
  uint64_t made = 0;     // values made (misses)
  uint64_t reused = 0;   // hits
  uint64_t evicted = 0;  // dropped to keep the cache bounded
};

template <typename T>
class LibraryCache {
 public:
  using Entry = std::shared_ptr<const absl::StatusOr<T>>;

  explicit LibraryCache(size_t capacity) : capacity_(capacity) {}
  LibraryCache(const LibraryCache&) = delete;
  LibraryCache& operator=(const LibraryCache&) = delete;

  // The value under `key`, made by `make()` (an absl::StatusOr<T>) when
  // absent. The entry stays valid for its holder after an eviction.
  template <typename Make>
  Entry Get(const LibraryKey& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        ++counts_.reused;
        return it->second->second;
      }
    }
    auto made = std::make_shared<const absl::StatusOr<T>>(make());
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_.made;
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;  // another thread's
    order_.emplace_front(key, made);
    index_.emplace(key, order_.begin());
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++counts_.evicted;
    }
    return made;
  }

  LibraryCacheCounts counts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }

 private:
  using Order = std::list<std::pair<LibraryKey, Entry>>;

  const size_t capacity_;
  mutable std::mutex mu_;
  Order order_;
  std::unordered_map<LibraryKey, typename Order::iterator, LibraryKeyHash>
      index_;
  LibraryCacheCounts counts_;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_LIBRARY_CACHE_H_
