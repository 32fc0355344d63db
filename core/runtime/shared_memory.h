// Internal: a client's POSIX shared-memory region, mapped into the server
// (the same-host fast path; see RegisterSharedMemory in tensord.proto).
//
// The client creates the object (shm_open + ftruncate + mmap), writes a
// random 16-byte cookie at byte 0 of the region and registers the name, size
// and cookie. Open() maps the object by name (never creating it), checks its
// size and compares the cookie in constant time, so a client can only make
// the server read or write memory it can itself write. Tensor bytes live in
// the data area [kSharedMemoryDataOffset, size); offsets in the RPCs count
// from its start. The server never unlinks the name: the client owns it.
//
// This is host memory, not a transport, so it lives in core (no gRPC): the
// Runtime keeps each session's mappings in the handle table, which drops
// them when the session is closed, reaped or the Runtime goes.
//
// Thread-safety: a mapping is immutable after Open(); Range() and
// CheckSize() may be called concurrently. Bytes in the region are shared
// with the client, which may change them at any time (its problem).
// A client that shrinks its object (ftruncate) makes later accesses to the
// lost pages fault with SIGBUS. Every copy is therefore bounds- and
// size-checked first and then done under a SIGBUS guard (a thread-local
// jump target and a process-wide handler installed once), so a shrink that
// races with a copy fails that copy with OUT_OF_RANGE instead of killing the
// daemon. Bytes never leave through a raw pointer into the mapping.
#ifndef TENSORD_CORE_RUNTIME_SHARED_MEMORY_H_
#define TENSORD_CORE_RUNTIME_SHARED_MEMORY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tensord::core {

// Bytes of the region before its data area: a 64-byte header (the cookie at
// bytes [0, 16), the rest reserved, zero) padded to a 4 KiB page.
inline constexpr uint64_t kSharedMemoryDataOffset = 4096;
inline constexpr size_t kSharedMemoryCookieBytes = 16;
inline constexpr size_t kSharedMemoryHeaderBytes = 64;
// Region names: "/tensord-" then 1 to 64 of [0-9A-Za-z_.-].
inline constexpr std::string_view kSharedMemoryNamePrefix = "/tensord-";

class SharedMemoryMapping {
 public:
  // Maps the client's object `name` of at least `size` bytes (header
  // included) whose first 16 bytes equal `cookie`. INVALID_ARGUMENT for a
  // malformed name, a size below kSharedMemoryDataOffset or a cookie not 16
  // bytes; NOT_FOUND when no such object exists on this host;
  // PERMISSION_DENIED for a cookie mismatch or an object the server may not
  // open; OUT_OF_RANGE when the object is smaller than `size`. `live`, if
  // given, counts mappings alive (incremented here, decremented on unmap);
  // it must outlive the mapping.
  static absl::StatusOr<std::shared_ptr<SharedMemoryMapping>> Open(
      std::string_view name, uint64_t size, std::string_view cookie,
      std::atomic<int64_t>* live = nullptr);

  ~SharedMemoryMapping();  // munmap + close; never unlinks
  SharedMemoryMapping(const SharedMemoryMapping&) = delete;
  SharedMemoryMapping& operator=(const SharedMemoryMapping&) = delete;

  const std::string& name() const { return name_; }
  // The registered size (header included) and the data area's size.
  uint64_t size() const { return size_; }
  uint64_t data_size() const { return size_ - kSharedMemoryDataOffset; }

  // Copy dst.size() bytes of the data area at `offset` into `dst`, or `src`
  // into the data area at `offset`. Overflow-checked: OUT_OF_RANGE naming
  // offset, length and the data area's size; OUT_OF_RANGE too if the object
  // shrank below the registered size, before or during the copy.
  absl::Status CopyOut(uint64_t offset, std::span<uint8_t> dst) const;
  absl::Status CopyIn(uint64_t offset, std::span<const uint8_t> src) const;
  // OK when [offset, offset + length) lies in the data area (as CopyOut
  // checks), so callers can fail before allocating anything.
  absl::Status CheckRange(uint64_t offset, uint64_t length) const {
    return Locate(offset, length).status();
  }

 private:
  SharedMemoryMapping(std::string name, int fd, uint8_t* base, uint64_t size,
                      std::atomic<int64_t>* live);
  absl::Status CheckSize() const;
  // The checked span [offset, offset + length) of the data area.
  absl::StatusOr<uint8_t*> Locate(uint64_t offset, uint64_t length) const;

  const std::string name_;
  const int fd_;
  uint8_t* const base_;
  const uint64_t size_;
  std::atomic<int64_t>* const live_;
};

// memcpy that turns a SIGBUS raised while it runs (a shrunk shared memory
// object) into OUT_OF_RANGE. Copies of kParallelCopyBytes or more are split
// across up to four threads (one core's memcpy does not saturate memory
// bandwidth: 2 threads copied 1 GiB at 14-21 GB/s vs 12-16 on one here),
// each under its own guard; the first failing slice's status is returned.
// Exposed for tests.
inline constexpr size_t kParallelCopyBytes = size_t{8} << 20;
absl::Status GuardedCopy(void* dst, const void* src, size_t n);

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_SHARED_MEMORY_H_
