#include "core/cpu/host_pool.h"

#include <sys/mman.h>

namespace tensord::core {

HostPool::~HostPool() {
  absl::MutexLock lock(&mu_);
  for (auto& [size, blocks] : free_) {
    for (void* b : blocks) ::munmap(b, size);
  }
}

void* HostPool::Acquire(size_t bytes) {
  const size_t size = BlockSize(bytes);
  {
    absl::MutexLock lock(&mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      return block;
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
  {
    absl::MutexLock lock(&mu_);
    if (cached_ + size <= cache_limit_) {
      free_[size].push_back(block);
      cached_ += size;
      return;
    }
  }
  ::munmap(block, size);
}

size_t HostPool::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_;
}

}  // namespace tensord::core
