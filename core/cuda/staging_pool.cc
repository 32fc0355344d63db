#include "core/cuda/staging_pool.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/cuda/cuda_status.h"
#include "core/base/status.h"

namespace tensord::core::cuda {

StagingPool::StagingPool(std::string device, size_t chunk_bytes)
    : device_(std::move(device)),
      chunk_bytes_(std::max(chunk_bytes, kMinChunkBytes)) {}

StagingPool::~StagingPool() {
  absl::MutexLock lock(&mu_);
  for (StagingBuffer& s : buffers_) {
    if (s.done != nullptr) cudaEventDestroy(s.done);
    if (s.host != nullptr) cudaFreeHost(s.host);
  }
}

absl::Status StagingPool::Check(cudaError_t err, const char* what) const {
  return CudaStatus(err, device_, what);
}

absl::StatusOr<StagingBuffer*> StagingPool::Acquire(bool may_wait) {
  for (;;) {
    StagingBuffer* wait_for = nullptr;
    {
      absl::MutexLock lock(&mu_);
      for (StagingBuffer& s : buffers_) {
        if (s.busy) continue;
        const cudaError_t q = cudaEventQuery(s.done);
        if (q == cudaSuccess) {
          s.busy = true;
          return &s;
        }
        if (q != cudaErrorNotReady) return Check(q, "cudaEventQuery");
        if (wait_for == nullptr) wait_for = &s;
      }
      if (buffers_.size() < kMaxBuffers) {
        StagingBuffer s;
        RETURN_IF_ERROR(
            Check(cudaHostAlloc(&s.host, chunk_bytes_, cudaHostAllocPortable),
                  "cudaHostAlloc(staging)"));
        const cudaError_t e =
            cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming);
        if (e != cudaSuccess) {
          cudaFreeHost(s.host);
          return Check(e, "cudaEventCreateWithFlags");
        }
        s.busy = true;
        buffers_.push_back(s);
        return &buffers_.back();
      }
    }
    if (!may_wait) return nullptr;
    if (wait_for != nullptr) {
      // The event may be re-recorded meanwhile; waiting on it is still
      // only a wait, and the loop re-checks.
      RETURN_IF_ERROR(
          Check(cudaEventSynchronize(wait_for->done), "cudaEventSynchronize"));
    } else {
      absl::SleepFor(absl::Microseconds(50));  // all busy in other threads
    }
  }
}

void StagingPool::Release(StagingBuffer* s) {
  absl::MutexLock lock(&mu_);
  s->busy = false;
}

absl::Status StagingPool::Upload(const char* src, char* dst, size_t bytes,
                                 cudaStream_t stream) {
  const size_t chunk = chunk_bytes_;
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t n = std::min(chunk, bytes - off);
    ASSIGN_OR_RETURN(StagingBuffer * s, Acquire());
    std::memcpy(s->host, src + off, n);
    absl::Status st = Check(
        cudaMemcpyAsync(dst + off, s->host, n, cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync(host to device)");
    if (st.ok())
      st = Check(cudaEventRecord(s->done, stream), "cudaEventRecord");
    Release(s);
    RETURN_IF_ERROR(st);
  }
  return absl::OkStatus();
}

absl::Status StagingPool::Download(const char* src, char* dst, size_t bytes,
                                   cudaStream_t stream) {
  const size_t chunk = chunk_bytes_;
  const size_t chunks = (bytes + chunk - 1) / chunk;
  StagingBuffer* bufs[2] = {nullptr, nullptr};
  ASSIGN_OR_RETURN(bufs[0], Acquire());
  size_t nbuf = 1;
  if (chunks > 1) {
    // Never wait for a second buffer while holding one: two threads
    // doing that could wait on each other.
    absl::StatusOr<StagingBuffer*> second = Acquire(false);
    if (second.ok() && *second != nullptr) {
      bufs[1] = *second;
      nbuf = 2;
    }
  }
  auto issue = [&](size_t k) -> absl::Status {
    StagingBuffer* s = bufs[k % nbuf];
    const size_t off = k * chunk;
    const size_t n = std::min(chunk, bytes - off);
    RETURN_IF_ERROR(Check(
        cudaMemcpyAsync(s->host, src + off, n, cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync(device to host)"));
    return Check(cudaEventRecord(s->done, stream), "cudaEventRecord");
  };
  absl::Status status = issue(0);
  for (size_t k = 0; k < chunks && status.ok(); ++k) {
    // With two buffers, the other one held chunk k-1, already copied out.
    if (nbuf == 2 && k + 1 < chunks) {
      status = issue(k + 1);
      if (!status.ok()) break;
    }
    StagingBuffer* s = bufs[k % nbuf];
    status = Check(cudaEventSynchronize(s->done), "cudaEventSynchronize");
    if (!status.ok()) break;
    const size_t off = k * chunk;
    std::memcpy(dst + off, s->host, std::min(chunk, bytes - off));
    if (nbuf == 1 && k + 1 < chunks) status = issue(k + 1);
  }
  if (!status.ok()) {
    // Do not hand back buffers a failed DMA may still write: drain.
    cudaStreamSynchronize(stream);
    cudaGetLastError();
  }
  for (StagingBuffer* s : bufs) {
    if (s != nullptr) Release(s);
  }
  return status;
}

}  // namespace tensord::core::cuda
