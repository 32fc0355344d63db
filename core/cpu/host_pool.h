// HostPool: large host allocations for the CPU device, mapped with their
// pages already faulted in and cached for reuse when freed.
//
// Why: writing into freshly mapped memory runs at a fraction of memcpy
// speed on this class of machine (every 4 KiB page faults on first touch:
// ~1.9 GB/s vs ~11.7 GB/s into touched memory), so an upload into a new
// tensor was bounded by page faults, not by the wire. Blocks of at least
// kMinBytes are rounded up to 2 MiB, mapped with MAP_POPULATE (one bulk
// fault-in) and advised for transparent huge pages; when freed they go back
// to a per-size free list, up to `cache_bytes` in all, so the next tensor
// of that size starts warm (PyTorch's caching allocator, for the host).
// When a freed block does not fit in the cache, the least recently freed
// blocks are unmapped to make room: the sizes a program uses now win.
// Smaller blocks use the ordinary heap. Memory in the cache is not held by
// any tensor: budgets count live tensors only.
// Thread-safety: Acquire and Release are thread-safe.
#ifndef TENSORD_CORE_CPU_HOST_POOL_H_
#define TENSORD_CORE_CPU_HOST_POOL_H_

#include <cstddef>
#include <list>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tensord::core {

class HostPool {
 public:
  static constexpr size_t kMinBytes = size_t{1} << 20;
  static constexpr size_t kGranule = size_t{2} << 20;

  explicit HostPool(size_t cache_bytes) : cache_limit_(cache_bytes) {}
  ~HostPool();  // unmaps the cached blocks
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // The size a request of `bytes` (>= kMinBytes) occupies.
  static size_t BlockSize(size_t bytes) {
    return (bytes + kGranule - 1) / kGranule * kGranule;
  }
  // A block of BlockSize(bytes) bytes, or nullptr when the OS refuses.
  void* Acquire(size_t bytes);
  // Gives back a block from Acquire(bytes): cached, or unmapped when the
  // cache is full.
  void Release(void* block, size_t bytes);

  size_t cached_bytes() const;

 private:
  const size_t cache_limit_;
  struct Block {
    size_t size;
    void* address;
  };
  using Lru = std::list<Block>;  // front: freed longest ago
  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);
  std::map<size_t, std::vector<Lru::iterator>> by_size_ ABSL_GUARDED_BY(mu_);
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_CPU_HOST_POOL_H_
