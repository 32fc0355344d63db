// Internal: the session-scoped handle table behind the Runtime.
//
// Sessions are keyed by unguessable ids (128 random bits, hex). Handles are
// 64-bit ids drawn from one counter shared by all sessions of the table, so
// a handle of one session is never valid in another: looking it up there is
// NOT_FOUND, never someone else's tensor. The table stores tensors; it does
// not allocate or account memory (the tensor's buffer does, on release).
//
// Thread-safety: all methods are thread-safe. The session map has one mutex,
// held only to find, add or remove a session; each session has its own
// mutex for its entries, so calls on different sessions do not serialize.
#ifndef TENSORD_CORE_HANDLE_TABLE_H_
#define TENSORD_CORE_HANDLE_TABLE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tensord::core {

// A device-resident tensor. Immutable once registered; shared by the table
// and by readers that must keep the memory alive after a release.
struct StoredTensor {
  Device* device = nullptr;  // borrowed: owned by the Runtime
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t nbytes = 0;
  std::shared_ptr<Buffer> buffer;  // destroying it returns the budget bytes
};

struct HandleEntry {
  using Clock = std::chrono::steady_clock;
  uint64_t handle = 0;
  std::shared_ptr<const StoredTensor> tensor;
  std::string tag;
  Clock::time_point created;
  Clock::time_point last_used;
};

// One session as an operator sees it; never carries the full session id
// (which is the session's only credential).
struct SessionSummary {
  std::string id_prefix;  // first 8 hex digits of the id
  std::string client_name;
  uint64_t tensors = 0;
  uint64_t bytes = 0;
  HandleEntry::Clock::time_point created;
  std::vector<HandleEntry> entries;  // filled when asked for
};

class HandleTable {
 public:
  HandleTable();
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;

  // Creates a session and returns its id (32 hex digits).
  std::string OpenSession(std::string_view client_name);
  // OK if `session` is open; NOT_FOUND "unknown session '<id>'" otherwise.
  absl::Status CheckSession(std::string_view session) const;
  // Removes the session and returns its entries (the caller drops them,
  // which frees their memory unless a reader still holds it).
  absl::StatusOr<std::vector<HandleEntry>> CloseSession(
      std::string_view session);
  // Closes every session; returns all entries. For shutdown.
  std::vector<HandleEntry> CloseAll();
  size_t session_count() const;
  // Every open session, oldest first; with each one's entries if
  // `with_entries`.
  std::vector<SessionSummary> ListSessions(bool with_entries = false) const;

  // Registers `tensor` under a new handle. NOT_FOUND for an unknown (or
  // concurrently closed) session.
  absl::StatusOr<HandleEntry> Insert(std::string_view session,
                                     std::shared_ptr<const StoredTensor> tensor,
                                     std::string_view tag);
  // Returns the entry and marks it used now. NOT_FOUND for an unknown
  // session or a handle not in this session.
  absl::StatusOr<HandleEntry> Lookup(std::string_view session, uint64_t handle);
  // All entries of the session, ordered by handle; does not mark them used.
  absl::StatusOr<std::vector<HandleEntry>> List(std::string_view session) const;
  // Removes one entry and returns it. NOT_FOUND as Lookup.
  absl::StatusOr<HandleEntry> Remove(std::string_view session, uint64_t handle);

 private:
  struct Session {
    explicit Session(std::string_view client)
        : client_name(client), created(HandleEntry::Clock::now()) {}
    const std::string client_name;
    const HandleEntry::Clock::time_point created;
    mutable absl::Mutex mu;
    bool closed ABSL_GUARDED_BY(mu) = false;
    absl::flat_hash_map<uint64_t, HandleEntry> entries ABSL_GUARDED_BY(mu);
  };

  absl::StatusOr<std::shared_ptr<Session>> FindSession(
      std::string_view session) const;

  std::atomic<uint64_t> next_handle_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_HANDLE_TABLE_H_
