// tensord::SharedMemoryRegion: the same-host fast path for tensor bytes.
// Part of the client library (tensord/client.h includes every part).
// Thread-safety: as the class comment says.
#ifndef TENSORD_CLIENT_TENSORD_SHARED_MEMORY_H_
#define TENSORD_CLIENT_TENSORD_SHARED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tensord::client {

namespace internal {
class Session;
}  // namespace internal

// ---------------------------------------------------------------------------
// Shared memory: the same-host fast path
//
// A POSIX shared-memory region (/dev/shm/tensord-<random hex>) created by
// this client, registered in its session on the server, through which
// tensor bytes move without the socket. Works only when client and server
// share a host (and, since the object is mode 0600, run as one user).
//
//   auto region = client.create_shared_memory(256 << 20);
//   std::memcpy(region->data(), weights, n);          // or write in place
//   auto w = client.upload_shared(*region, 0, DType::kFloat32, {rows, cols});
//   w.fetch_shared(*region, 0);                        // bytes in region->data()
//
// The region goes (unregistered, unmapped, unlinked) with its last
// shared_ptr; the server unmaps it when the session ends anyway. A region
// does not keep its session open. Thread-safety: the object is safe to
// share, but the bytes are not synchronized: calls using overlapping
// ranges of one region from several threads at once need the caller's own
// locking (or disjoint offsets per thread).
class SharedMemoryRegion {
 public:
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  // The data area (page-aligned) and its size in bytes.
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // The server's region id (in this session) and the object's name.
  uint64_t id() const { return id_; }
  const std::string& name() const { return name_; }

 private:
  friend class internal::Session;
  SharedMemoryRegion() = default;

  std::weak_ptr<const internal::Session> session_;
  std::string session_id_;
  std::string name_;
  void* base_ = nullptr;  // the whole mapping (header included)
  size_t mapped_ = 0;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  uint64_t id_ = 0;
};

}  // namespace tensord::client

#endif  // TENSORD_CLIENT_TENSORD_SHARED_MEMORY_H_
