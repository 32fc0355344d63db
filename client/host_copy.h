// Host-memory copies of large tensor payloads in the client library: the
// bytes a fetch writes into a buffer it just allocated, and the copies into
// and out of a shared-memory region. Two costs dominate them at hundreds of
// MiB: the kernel mapping and zeroing each page of a fresh buffer on first
// touch, one fault per 4 KiB (~0.3-1.6 GB/s here), and a single core's
// memcpy bandwidth. Thread-safe: no shared state.
#ifndef TENSORD_CLIENT_HOST_COPY_H_
#define TENSORD_CLIENT_HOST_COPY_H_

#include <atomic>
#include <cstddef>
#include <thread>

#include "tensord/client.h"

namespace tensord::client::internal {

// Buffers at least this large are prefaulted and copied by several threads.
inline constexpr size_t kLargeCopyBytes = size_t{8} << 20;

// Maps and zeroes the whole pages of [p, p + n) in one system call
// (MADV_POPULATE_WRITE, Linux 5.14+) instead of one fault per 4 KiB page
// on first touch, when n is at least 2 MiB, split across threads like
// ParallelCopy when n >= kLargeCopyBytes; a no-op for smaller n and where
// the kernel lacks it. Only for memory nothing has touched yet: on
// resident pages it costs about as much as the copy it would speed up.
// (Tensor::fetch<T>() and fetch_bytes() use it on their fresh results.)
void PrefaultForWrite(void* p, size_t n);

// memcpy(dst, src, n), split across up to four threads when n >=
// kLargeCopyBytes. Never throws: a slice whose thread cannot be started is
// copied on the calling thread.
void ParallelCopy(void* dst, const void* src, size_t n);

// Prefaults [p, p + n) front to back on a thread of its own while the
// caller fills the buffer from the front at network speed (~2 GB/s here,
// slower than the kernel maps pages): the page mapping of a fresh result
// overlaps its transfer instead of adding to it. The destructor stops the
// thread and joins it, so the buffer must outlive this object. Does
// nothing below 2 MiB or when no thread can be started.
class PrefaultAhead {
 public:
  PrefaultAhead(void* p, size_t n);
  ~PrefaultAhead();
  PrefaultAhead(const PrefaultAhead&) = delete;
  PrefaultAhead& operator=(const PrefaultAhead&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tensord::client::internal

#endif  // TENSORD_CLIENT_HOST_COPY_H_
