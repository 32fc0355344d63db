// Internal: the process groups of each session (Runtime::CreateGroup).
//
// A group is a session resource, as a program is: ids from one counter of
// the table (never reused), at most `max_per_session` per session
// (RESOURCE_EXHAUSTED past it: a group holds connections, so none is
// dropped behind the user's back), freed with the session — the Runtime
// ties each session's groups to it (SessionBound) when it adds the first.
//
// Thread-safety: all methods are thread-safe; a group found stays alive for
// its finder while the table drops it.
#ifndef TENSORD_CORE_RUNTIME_GROUP_TABLE_H_
#define TENSORD_CORE_RUNTIME_GROUP_TABLE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/collectives/host_communicator.h"
#include "core/runtime/session_bound.h"

namespace tensord::core {

struct DeviceSlot;  // core/executor/executor.h

struct Group {
  std::vector<DeviceSlot*> members;  // in rank order
  std::unique_ptr<HostCommunicator> communicator;
  std::string tag;
  std::atomic<uint64_t> collectives{0};  // that succeeded
};

class GroupTable {
 public:
  explicit GroupTable(size_t max_per_session)
      : max_per_session_(max_per_session) {}

  size_t max_per_session() const { return max_per_session_; }

  // The session's groups, made for it on first use: the caller ties the
  // returned object to the session (Runtime::BindToSession) when `fresh`.
  class SessionGroups final : public SessionBound {
   public:
    SessionGroups(GroupTable* table, std::string session)
        : table_(table), session_(std::move(session)) {}
    void OnSessionEnded(const absl::Status& why) override {
      table_->DropSession(session_);
    }

   private:
    GroupTable* const table_;
    const std::string session_;
  };

  // Adds `group` to the session and returns its id; `bind` is called with
  // the session's holder the first time the session adds one (and the add
  // fails with its status). RESOURCE_EXHAUSTED past max_per_session.
  absl::StatusOr<uint64_t> Add(
      std::string_view session, std::shared_ptr<Group> group,
      const std::function<absl::Status(std::weak_ptr<SessionBound>)>& bind);
  // NOT_FOUND "unknown group <id> in this session" for one never added or
  // destroyed.
  absl::StatusOr<std::shared_ptr<Group>> Find(std::string_view session,
                                              uint64_t id) const;
  absl::Status Remove(std::string_view session, uint64_t id);
  // By id.
  std::vector<std::pair<uint64_t, std::shared_ptr<Group>>> List(
      std::string_view session) const;
  void DropSession(std::string_view session);

 private:
  struct Held {
    std::shared_ptr<SessionGroups> bound;
    std::map<uint64_t, std::shared_ptr<Group>> groups;
  };
  const size_t max_per_session_;
  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Held, std::less<>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_GROUP_TABLE_H_
