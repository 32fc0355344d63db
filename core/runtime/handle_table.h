// Internal: the session-scoped handle table behind the Runtime.
//
// Sessions are keyed by unguessable ids (128 random bits, hex). Handles are
// 64-bit ids drawn from one counter shared by all sessions of the table, so
// a handle of one session is never valid in another: looking it up there is
// NOT_FOUND, never someone else's tensor. The table stores tensors; it does
// not allocate or account memory (the tensor's buffer does, on release).
//
// Sessions are leased: a session opened with a nonzero TTL expires when no
// call names it for that long (every lookup of the session renews it, and so
// does every message of a stream through the objects that stream holds);
// a session with a call in progress (an ActiveCall alive) does not expire.
// ReapExpired() removes expired sessions. Objects a session's open streams
// hold (an upload's memory, a reader's tensor) are tied to it with Bind()
// and let go when the session ends, so a stalled stream holds no memory
// past its session. Per-session quotas (bytes and
// tensor count) are enforced when memory is admitted (Reserve(), called by
// core/runtime/admission.h before anything is allocated) and by Insert() for a
// tensor whose memory is not counted yet; they count the registered tensors,
// the memory autograd holds for the session beyond them (core/runtime/session_memory.h:
// saved tensors, leaves' grads), which ListHeld() lists, and the memory of
// requests in progress. Each session keeps a bounded log
// of recent request ids with their results, for exactly-once retries.
//
// Thread-safety: all methods are thread-safe. The session map has one mutex,
// held only to find, add or remove a session; each session has its own
// mutex for its entries, so calls on different sessions do not serialize.
#ifndef TENSORD_CORE_RUNTIME_HANDLE_TABLE_H_
#define TENSORD_CORE_RUNTIME_HANDLE_TABLE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/shape.h"
#include "core/runtime/session_bound.h"
#include "core/runtime/session_memory.h"
#include "core/runtime/stored_tensor.h"

namespace tensord::core {

class SharedMemoryMapping;  // core/runtime/shared_memory.h
class Program;              // core/runtime/program.h

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
  uint64_t serial = 0;   // the order sessions were opened in, from 1
  uint64_t tensors = 0;  // entries, and held tensors no entry shares
  uint64_t bytes = 0;    // of the same
  HandleEntry::Clock::time_point created;
  std::vector<HandleEntry> entries;  // filled when asked for
};

// Handles at or above this one are chosen by clients (HandleTable::Rename);
// the table issues handles below it.
inline constexpr uint64_t kFirstClientHandle = uint64_t{1} << 63;

// Request ids (exactly-once retries) are 1 to this many printable bytes.
inline constexpr size_t kMaxRequestIdBytes = 64;

struct HandleTableOptions {
  size_t max_sessions = 0;           // 0 = unlimited
  uint64_t session_max_bytes = 0;    // 0 = unlimited
  uint64_t session_max_tensors = 0;  // 0 = unlimited
  // The request log of each session: at most this many ids, none older than
  // `dedupe_max_age`.
  size_t dedupe_entries = 1024;
  // Shared-memory regions one session may hold registered at once.
  size_t session_max_regions = 16;
  // Programs one session holds (AddProgram drops the least recently used
  // past it).
  size_t session_max_programs = 16;
  std::chrono::milliseconds dedupe_max_age = std::chrono::minutes(5);
  // Called once a tensor has handle `handle` in a session (Insert, Rename),
  // outside the table's locks: charges what autograd holds for the tensor
  // to the session's memory. The runtime sets autograd's ChargeToSession
  // (core/autograd/autograd.h); the table itself knows nothing of autograd.
  std::function<void(const StoredTensor& tensor,
                     const std::shared_ptr<SessionMemory>& memory,
                     uint64_t handle)>
      on_registered;
};

// A session removed because its lease ran out.
struct ExpiredSession {
  std::string id_prefix;
  std::string client_name;
  std::vector<HandleEntry> entries;  // the caller drops them
};

class HandleTable {
 private:
  struct Session;

 public:
  HandleTable();
  explicit HandleTable(HandleTableOptions options);
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;

  // Creates a session that never expires and returns its id (32 hex digits),
  // ignoring max_sessions.
  std::string OpenSession(std::string_view client_name);
  // Creates a session leased for `ttl` (0 = never expires). RESOURCE_EXHAUSTED
  // when max_sessions are open.
  absl::StatusOr<std::string> OpenSession(std::string_view client_name,
                                          std::chrono::milliseconds ttl);
  // Renews the lease; returns the session's TTL. NOT_FOUND as CheckSession.
  absl::StatusOr<std::chrono::milliseconds> Renew(std::string_view session);

  // A call in progress on a session. While one is alive the session's lease
  // does not run out (the reaper skips it); the lease is renewed when the
  // call begins and again when it ends. Movable; ending it is destroying it.
  class ActiveCall {
   public:
    ActiveCall() = default;
    ActiveCall(ActiveCall&& other) noexcept;
    ActiveCall& operator=(ActiveCall&& other) noexcept;
    ActiveCall(const ActiveCall&) = delete;
    ActiveCall& operator=(const ActiveCall&) = delete;
    ~ActiveCall();

   private:
    friend class HandleTable;
    std::shared_ptr<Session> session_;
  };
  // NOT_FOUND as CheckSession.
  absl::StatusOr<ActiveCall> BeginCall(std::string_view session);

  // Ties `bound` to the session: when the session ends (CloseSession,
  // ReapExpired, CloseAll), bound->OnSessionEnded runs if `bound` is still
  // alive. NOT_FOUND for an unknown (or concurrently closed) session.
  absl::Status Bind(std::string_view session,
                    std::weak_ptr<SessionBound> bound);
  // Removes every session whose lease ran out before `now`.
  std::vector<ExpiredSession> ReapExpired(HandleEntry::Clock::time_point now);
  // For admission only (core/runtime/admission.h, the one caller): when `tensors`
  // more tensors of `bytes` in all fit the session's quotas beside what it
  // holds (entries, autograd's memory and its in-flight memory), reserves
  // them in the session's memory and returns it; the caller gives them
  // back or turns them into a buffer there. RESOURCE_EXHAUSTED naming the
  // quota, the amount requested, what the session holds (and how much of
  // it autograd holds) and the limit otherwise; NOT_FOUND for an unknown
  // session.
  absl::StatusOr<std::shared_ptr<SessionMemory>> Reserve(
      std::string_view session, uint64_t bytes, uint64_t tensors);

  // Exactly-once requests. BeginRequest returns the remembered response of
  // a finished request `id`, or nullopt when the caller is to run it (and
  // must then call EndRequest). UNAVAILABLE while another call with that id
  // runs; INVALID_ARGUMENT for an id that is empty, longer than 64
  // characters or not printable; NOT_FOUND for an unknown session.
  absl::StatusOr<std::optional<std::string>> BeginRequest(
      std::string_view session, std::string_view id);
  // Remembers `response` for `id` (nullptr: the request failed; forget it).
  void EndRequest(std::string_view session, std::string_view id,
                  const std::string* response);
  // OK if `session` is open; NOT_FOUND "unknown session '<id>'" otherwise.
  absl::Status CheckSession(std::string_view session) const;

  // While a SessionPin lives, this thread's calls naming its session find
  // it without the table's lock and lease renewal (which the Pin did once):
  // an Execute pins its session for its thousands of lookups and
  // admissions. A session closed meanwhile still refuses what checks
  // `closed` (admission) and finds no entries. Pins nest; a pin belongs to
  // the thread that made it.
  class SessionPin {
   public:
    SessionPin(const SessionPin&) = delete;
    SessionPin& operator=(const SessionPin&) = delete;
    ~SessionPin();

   private:
    friend class HandleTable;
    SessionPin(const HandleTable* table, std::string id,
               std::shared_ptr<Session> session);
    const HandleTable* table_;
    std::string id_;
    std::shared_ptr<Session> session_;
    const SessionPin* outer_;
  };
  // NOT_FOUND as CheckSession.
  absl::StatusOr<std::unique_ptr<SessionPin>> Pin(std::string_view session);
  // The session's memory account (core/runtime/session_memory.h). NOT_FOUND as
  // CheckSession.
  absl::StatusOr<std::shared_ptr<SessionMemory>> MemoryOf(
      std::string_view session) const;
  // Removes the session and returns its entries (the caller drops them,
  // which frees their memory unless a reader still holds it).
  absl::StatusOr<std::vector<HandleEntry>> CloseSession(
      std::string_view session);
  // Closes every session; returns all entries. For shutdown.
  std::vector<HandleEntry> CloseAll();
  size_t session_count() const;
  // Every open session, oldest first (by serial); with each one's entries if
  // `with_entries`.
  std::vector<SessionSummary> ListSessions(bool with_entries = false) const;

  // Registers `tensor` under a new handle. NOT_FOUND for an unknown (or
  // concurrently closed) session; RESOURCE_EXHAUSTED past a session quota.
  absl::StatusOr<HandleEntry> Insert(std::string_view session,
                                     std::shared_ptr<const StoredTensor> tensor,
                                     std::string_view tag);
  // Returns the entry and marks it used now. NOT_FOUND for an unknown
  // session or a handle not in this session.
  absl::StatusOr<HandleEntry> Lookup(std::string_view session, uint64_t handle);
  // All entries of the session, ordered by handle; does not mark them used.
  absl::StatusOr<std::vector<HandleEntry>> List(std::string_view session) const;
  // What the session holds without a handle (SessionMemory::ListExtra).
  absl::StatusOr<std::vector<HeldTensor>> ListHeld(
      std::string_view session) const;
  // Removes one entry and returns it. NOT_FOUND as Lookup.
  absl::StatusOr<HandleEntry> Remove(std::string_view session, uint64_t handle);
  // Gives entry `from` the handle `to`, a handle the client chose (the
  // session's ordered stream names results itself). `to` must lie in
  // [kFirstClientHandle, 2^64) — the counter never reaches there, so a
  // client's choice never meets a handle the table issued — and not be in
  // use in the session: INVALID_ARGUMENT otherwise. NOT_FOUND as Lookup.
  absl::Status Rename(std::string_view session, uint64_t from, uint64_t to);

  // Shared-memory regions of a session (see core/runtime/shared_memory.h). Region
  // ids come from the handle counter, so one session's id is NOT_FOUND in
  // another. Closing, reaping or CloseAll() drops a session's regions (the
  // mapping goes when the last in-flight copy using it lets go).
  // AddRegion: NOT_FOUND for an unknown session; RESOURCE_EXHAUSTED past
  // session_max_regions.
  absl::StatusOr<uint64_t> AddRegion(
      std::string_view session, std::shared_ptr<SharedMemoryMapping> region);
  // NOT_FOUND for an unknown session or a region not registered in it.
  absl::StatusOr<std::shared_ptr<SharedMemoryMapping>> FindRegion(
      std::string_view session, uint64_t region) const;
  absl::Status RemoveRegion(std::string_view session, uint64_t region);
  // Programs of a session (core/runtime/program.h), as regions are: ids from
  // the handle counter, dropped when the session ends. AddProgram returns
  // the new id; past session_max_programs it first drops the program least
  // recently added or found: a training loop never fails for registering
  // one more (a client meets the dropped one's NOT_FOUND and registers it
  // again). NOT_FOUND for an
  // unknown session. FindProgram marks the program used; NOT_FOUND
  // "unknown program <id> in this session" for one never added, removed
  // or dropped.
  absl::StatusOr<uint64_t> AddProgram(std::string_view session,
                                      std::shared_ptr<const Program> program);
  absl::StatusOr<std::shared_ptr<const Program>> FindProgram(
      std::string_view session, uint64_t program);
  absl::Status RemoveProgram(std::string_view session, uint64_t program);
  // The session's programs by id.
  absl::StatusOr<std::vector<std::pair<uint64_t, std::shared_ptr<const Program>>>>
  ListPrograms(std::string_view session) const;

 private:
  struct Session {
    using Clock = HandleEntry::Clock;
    Session(std::string_view client, std::chrono::milliseconds lease)
        : client_name(client), created(Clock::now()), ttl(lease) {
      Renew();
    }
    void Renew() const {
      expires.store((Clock::now() + ttl).time_since_epoch().count(),
                    std::memory_order_relaxed);
    }
    const std::string client_name;
    uint64_t serial = 0;  // set once, when added to the table
    const Clock::time_point created;
    const std::chrono::milliseconds ttl;  // 0 = never expires
    mutable std::atomic<Clock::rep> expires{0};
    std::atomic<int64_t> active_calls{0};  // ActiveCalls alive
    mutable absl::Mutex mu;
    bool closed ABSL_GUARDED_BY(mu) = false;
    absl::flat_hash_map<uint64_t, HandleEntry> entries ABSL_GUARDED_BY(mu);
    uint64_t bytes ABSL_GUARDED_BY(mu) = 0;  // of `entries`
    // Autograd's memory beyond the entries; told of every entry.
    const std::shared_ptr<SessionMemory> memory =
        std::make_shared<SessionMemory>();
    // The request log: id -> response (nullopt while running), oldest first.
    struct Logged {
      std::optional<std::string> response;
      Clock::time_point at;
    };
    absl::flat_hash_map<std::string, Logged> requests ABSL_GUARDED_BY(mu);
    std::deque<std::string> request_order ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<uint64_t, std::shared_ptr<SharedMemoryMapping>> regions
        ABSL_GUARDED_BY(mu);
    std::vector<std::weak_ptr<SessionBound>> bound ABSL_GUARDED_BY(mu);
    // Programs with the tick of their last use (least recently used goes
    // first past the bound).
    struct HeldProgram {
      std::shared_ptr<const Program> program;
      uint64_t used = 0;
    };
    absl::flat_hash_map<uint64_t, HeldProgram> programs ABSL_GUARDED_BY(mu);
    uint64_t program_tick ABSL_GUARDED_BY(mu) = 0;
  };
  // Marks `s` closed, moves its entries into `entries` and drops its
  // requests and regions; returns what was bound to it, for the caller to
  // notify once no lock is held.
  static std::vector<std::weak_ptr<SessionBound>> EndSession(
      Session& s, std::vector<HandleEntry>* entries);
  static void NotifyEnded(std::vector<std::weak_ptr<SessionBound>> bound,
                          const absl::Status& why);
  absl::Status QuotaCheck(const Session& s, uint64_t bytes,
                          uint64_t tensors) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  std::string AddSession(std::shared_ptr<Session> session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<std::shared_ptr<Session>> FindSession(
      std::string_view session) const;

  const HandleTableOptions options_;
  std::atomic<uint64_t> next_handle_;
  uint64_t next_serial_ ABSL_GUARDED_BY(mu_) = 1;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_HANDLE_TABLE_H_
