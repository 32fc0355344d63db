// Internal: the pinned host buffers through which a CUDA device copies
// pageable host memory (uploads, downloads, and device-to-device copies
// without peer access), chunk by chunk so that a host memcpy overlaps the
// DMA of the neighbouring chunk.
//
// The pool grows to kMaxBuffers buffers of `chunk_bytes` each, allocated on
// first use; beyond that a copy waits for the oldest buffer to drain. Each
// buffer carries the event that marks the end of the last DMA reading or
// writing it, so a buffer is handed out again only once its copy is done.
// Every call assumes the caller made the pool's device current
// (cudaSetDevice) and passes that device's stream.
//
// Thread-safety: all methods may be called concurrently; a buffer is held
// by one copy at a time (Acquire .. Release).
#ifndef TENSORD_CORE_CUDA_STAGING_POOL_H_
#define TENSORD_CORE_CUDA_STAGING_POOL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <deque>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tensord::core::cuda {

// One pinned host buffer and the event that marks the end of the last
// copy that uses it.
struct StagingBuffer {
  void* host = nullptr;
  cudaEvent_t done = nullptr;
  bool busy = false;  // held by a copy right now
};

class StagingPool {
 public:
  // Enough to keep copies of several threads in flight.
  static constexpr size_t kMaxBuffers = 16;

  // Chunks are at least this large (a 0 from the options would never
  // finish a copy).
  static constexpr size_t kMinChunkBytes = size_t{64} << 10;

  // `device` names the device in error messages ("cuda:0").
  StagingPool(std::string device, size_t chunk_bytes);
  // Frees every buffer; the caller has synchronized the stream first.
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  size_t chunk_bytes() const { return chunk_bytes_; }

  // A buffer whose last copy has finished, marked busy. Allocates up to
  // kMaxBuffers; past that waits for one to drain, or with !may_wait
  // returns nullptr. RESOURCE_EXHAUSTED / INTERNAL from CUDA.
  absl::StatusOr<StagingBuffer*> Acquire(bool may_wait = true);
  // Hands `s` back; record its `done` event after the last DMA first.
  void Release(StagingBuffer* s);

  // Host -> device on `stream`: copies chunk k into pinned memory while the
  // DMA engine moves chunk k-1. Returns once `src` has been read; the DMA
  // of the last chunks may still be in flight (stream-ordered before any
  // kernel queued afterwards).
  absl::Status Upload(const char* src, char* dst, size_t bytes,
                      cudaStream_t stream);
  // Device -> host, two chunks in flight when a second buffer is free: the
  // DMA of chunk k+1 overlaps the host copy of chunk k out of pinned
  // memory. Waits (through the stream order) for every kernel queued on
  // `stream` before it.
  absl::Status Download(const char* src, char* dst, size_t bytes,
                        cudaStream_t stream);

 private:
  absl::Status Check(cudaError_t err, const char* what) const;

  const std::string device_;
  const size_t chunk_bytes_;
  absl::Mutex mu_;
  // A deque: pointers to elements stay valid as it grows.
  std::deque<StagingBuffer> buffers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_STAGING_POOL_H_
