#include "core/runtime/group_table.h"

#include "absl/strings/str_cat.h"

namespace tensord::core {

absl::StatusOr<uint64_t> GroupTable::Add(
    std::string_view session, std::shared_ptr<Group> group,
    const std::function<absl::Status(std::weak_ptr<SessionBound>)>& bind) {
  std::shared_ptr<SessionGroups> fresh;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session);
    if (it != sessions_.end()) {
      if (it->second.groups.size() >= max_per_session_) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "this session holds ", it->second.groups.size(),
            " process groups, the server's limit (Limits.max_session_groups)"
            ": destroy one first"));
      }
      const uint64_t id = next_id_++;
      it->second.groups.emplace(id, std::move(group));
      return id;
    }
    fresh = std::make_shared<SessionGroups>(this, std::string(session));
  }
  // Tied outside the lock: the session may end meanwhile, and its end
  // calls DropSession.
  if (absl::Status s = bind(fresh); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  Held& held = sessions_[std::string(session)];
  if (held.bound == nullptr) held.bound = std::move(fresh);
  if (held.groups.size() >= max_per_session_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this session holds ", held.groups.size(),
        " process groups, the server's limit (Limits.max_session_groups)"));
  }
  const uint64_t id = next_id_++;
  held.groups.emplace(id, std::move(group));
  return id;
}

absl::StatusOr<std::shared_ptr<Group>> GroupTable::Find(
    std::string_view session, uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session);
  if (it != sessions_.end()) {
    auto g = it->second.groups.find(id);
    if (g != it->second.groups.end()) return g->second;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown group ", id, " in this session"));
}

absl::Status GroupTable::Remove(std::string_view session, uint64_t id) {
  std::shared_ptr<Group> dropped;  // destroyed outside the lock
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session);
  if (it != sessions_.end()) {
    auto g = it->second.groups.find(id);
    if (g != it->second.groups.end()) {
      dropped = std::move(g->second);
      it->second.groups.erase(g);
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(
      absl::StrCat("unknown group ", id, " in this session"));
}

std::vector<std::pair<uint64_t, std::shared_ptr<Group>>> GroupTable::List(
    std::string_view session) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, std::shared_ptr<Group>>> out;
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return out;
  for (const auto& [id, group] : it->second.groups) out.emplace_back(id, group);
  return out;
}

void GroupTable::DropSession(std::string_view session) {
  Held dropped;  // the groups close their connections outside the lock
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  dropped = std::move(it->second);
  sessions_.erase(it);
}

}  // namespace tensord::core
