#include "client/host_copy.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

// Debian 12's glibc headers predate it; the value is the kernel's ABI.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace tensord::client::internal {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMaxThreads = 4;
constexpr size_t kPrefaultMinBytes = size_t{2} << 20;

// Runs work(offset, length) over [0, n) in page-multiple slices, one per
// thread (up to kMaxThreads) when n >= kLargeCopyBytes, else all on the
// calling thread. A slice whose thread cannot be started (system_error) or
// stored (bad_alloc) runs on the calling thread.
template <typename Work>
void ForEachSlice(size_t n, const Work& work) {
  const size_t threads =
      n < kLargeCopyBytes
          ? 1
          : std::clamp<size_t>(std::thread::hardware_concurrency(), 1,
                               kMaxThreads);
  const size_t slice = (n / threads + kPage - 1) & ~(kPage - 1);
  std::vector<std::thread> workers;
  size_t at = 0;
  for (size_t i = 1; i < threads && at + slice < n; ++i, at += slice) {
    try {
      workers.emplace_back(work, at, slice);
    } catch (...) {
      work(at, slice);
    }
  }
  work(at, n - at);
  for (std::thread& w : workers) w.join();
}

void Populate(char* p, size_t n) {
  // Whole pages inside the range only: the partial pages at either end
  // may belong to other objects, and fault in on their own.
  const auto begin = (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
  const auto end = (reinterpret_cast<uintptr_t>(p) + n) & ~(kPage - 1);
  // Best effort: EINVAL on kernels before 5.14 leaves the faults to the
  // copy that follows.
  if (end > begin) {
    (void)::madvise(reinterpret_cast<void*>(begin), end - begin,
                    MADV_POPULATE_WRITE);
  }
}

}  // namespace

void PrefaultForWrite(void* p, size_t n) {
  if (n < kPrefaultMinBytes) return;
  auto* base = static_cast<char*>(p);
  ForEachSlice(n, [base](size_t at, size_t k) { Populate(base + at, k); });
}

void ParallelCopy(void* dst, const void* src, size_t n) {
  if (n == 0) return;  // dst and src may be null (an empty vector's data())
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  ForEachSlice(n, [d, s](size_t at, size_t k) { std::memcpy(d + at, s + at, k); });
}

PrefaultAhead::PrefaultAhead(void* p, size_t n) {
  if (n < kPrefaultMinBytes) return;
  try {
    thread_ = std::thread([this, base = static_cast<char*>(p), n] {
      // Pieces small enough to stop soon after the destructor asks.
      constexpr size_t kPiece = size_t{4} << 20;
      for (size_t at = 0; at < n && !stop_.load(std::memory_order_relaxed);
           at += kPiece) {
        Populate(base + at, std::min(kPiece, n - at));
      }
    });
  } catch (...) {
    // No thread: the copy faults the pages in as it goes.
  }
}

PrefaultAhead::~PrefaultAhead() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

}  // namespace tensord::client::internal
