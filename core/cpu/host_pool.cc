#include "core/cpu/host_pool.h"

#include <sys/mman.h>

namespace tensord::core {

HostPool::~HostPool() {
  absl::MutexLock lock(&mu_);
  for (const Block& b : lru_) ::munmap(b.address, b.size);
}

void* HostPool::Acquire(size_t bytes) {
  const size_t size = BlockSize(bytes);
  {
    absl::MutexLock lock(&mu_);
    auto it = by_size_.find(size);
    if (it != by_size_.end() && !it->second.empty()) {
      Lru::iterator block = it->second.back();  // the most recently freed
      it->second.pop_back();
      if (it->second.empty()) by_size_.erase(it);
      void* address = block->address;
      lru_.erase(block);
      cached_ -= size;
      return address;
    }
  }
  void* block = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (block == MAP_FAILED) return nullptr;
  ::madvise(block, size, MADV_HUGEPAGE);  // a hint; fine if refused
  return block;
}

void HostPool::Release(void* block, size_t bytes) {
  const size_t size = BlockSize(bytes);
  std::vector<Block> evicted;
  {
    absl::MutexLock lock(&mu_);
    if (size <= cache_limit_) {
      while (cached_ + size > cache_limit_) {
        const Block oldest = lru_.front();
        std::vector<Lru::iterator>& same = by_size_[oldest.size];
        // The oldest block of a size is the first one freed: the vector's
        // front (blocks of a size are pushed in the order they are freed).
        same.erase(same.begin());
        if (same.empty()) by_size_.erase(oldest.size);
        lru_.pop_front();
        cached_ -= oldest.size;
        evicted.push_back(oldest);
      }
      by_size_[size].push_back(lru_.insert(lru_.end(), Block{size, block}));
      cached_ += size;
      block = nullptr;
    }
  }
  for (const Block& b : evicted) ::munmap(b.address, b.size);  // outside the lock
  if (block != nullptr) ::munmap(block, size);
}

size_t HostPool::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_;
}

}  // namespace tensord::core
