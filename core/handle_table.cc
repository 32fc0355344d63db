#include "core/handle_table.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/absl_compat.h"

namespace tensord::core {
namespace {

uint64_t RandomU64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

absl::Status UnknownSession(std::string_view session) {
  // Echo at most a prefix of whatever the caller sent.
  constexpr size_t kMaxEcho = 64;
  const bool cut = session.size() > kMaxEcho;
  return absl::NotFoundError(absl::StrCat("unknown session '",
                                          ToAbsl(session.substr(0, kMaxEcho)),
                                          cut ? "...'" : "'"));
}

absl::Status UnknownHandle(uint64_t handle) {
  return absl::NotFoundError(
      absl::StrCat("unknown tensor handle ", handle, " in this session"));
}

}  // namespace

// Handles start at a random nonzero 32-bit value: a client cannot assume
// small ids, and 0 is never a handle.
HandleTable::HandleTable() : next_handle_((RandomU64() >> 32) | 1) {}

std::string HandleTable::OpenSession(std::string_view client_name) {
  auto session = std::make_shared<Session>(client_name);
  absl::MutexLock lock(&mu_);
  while (true) {
    std::string id = absl::StrFormat("%016x%016x", RandomU64(), RandomU64());
    if (sessions_.emplace(id, session).second) return id;
  }
}

absl::StatusOr<std::shared_ptr<HandleTable::Session>> HandleTable::FindSession(
    std::string_view session) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(ToAbsl(session));
  if (it == sessions_.end()) return UnknownSession(session);
  return it->second;
}

absl::Status HandleTable::CheckSession(std::string_view session) const {
  return FindSession(session).status();
}

absl::StatusOr<std::vector<HandleEntry>> HandleTable::CloseSession(
    std::string_view session) {
  std::shared_ptr<Session> s;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(ToAbsl(session));
    if (it == sessions_.end()) return UnknownSession(session);
    s = std::move(it->second);
    sessions_.erase(it);
  }
  std::vector<HandleEntry> out;
  absl::MutexLock lock(&s->mu);
  s->closed = true;
  out.reserve(s->entries.size());
  for (auto& [handle, entry] : s->entries) out.push_back(std::move(entry));
  s->entries.clear();
  return out;
}

std::vector<HandleEntry> HandleTable::CloseAll() {
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions;
  {
    absl::MutexLock lock(&mu_);
    sessions.swap(sessions_);
  }
  std::vector<HandleEntry> out;
  for (auto& [id, s] : sessions) {
    absl::MutexLock lock(&s->mu);
    s->closed = true;
    for (auto& [handle, entry] : s->entries) out.push_back(std::move(entry));
    s->entries.clear();
  }
  return out;
}

std::vector<SessionSummary> HandleTable::ListSessions(bool with_entries) const {
  std::vector<std::pair<std::string, std::shared_ptr<Session>>> sessions;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, session] : sessions_) {
      sessions.emplace_back(id, session);
    }
  }
  std::vector<SessionSummary> out;
  for (const auto& [id, session] : sessions) {
    SessionSummary summary;
    summary.id_prefix = id.substr(0, 8);
    summary.client_name = session->client_name;
    summary.created = session->created;
    absl::MutexLock lock(&session->mu);
    for (const auto& [handle, entry] : session->entries) {
      ++summary.tensors;
      summary.bytes += entry.tensor->nbytes;
      if (with_entries) summary.entries.push_back(entry);
    }
    out.push_back(std::move(summary));
  }
  std::sort(out.begin(), out.end(),
            [](const SessionSummary& a, const SessionSummary& b) {
              return a.created < b.created;
            });
  return out;
}

size_t HandleTable::session_count() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

absl::StatusOr<HandleEntry> HandleTable::Insert(
    std::string_view session, std::shared_ptr<const StoredTensor> tensor,
    std::string_view tag) {
  auto s = FindSession(session);
  if (!s.ok()) return s.status();
  HandleEntry entry;
  entry.handle = next_handle_.fetch_add(1, std::memory_order_relaxed);
  entry.tensor = std::move(tensor);
  entry.tag = std::string(tag);
  entry.created = entry.last_used = HandleEntry::Clock::now();
  absl::MutexLock lock(&(*s)->mu);
  if ((*s)->closed) return UnknownSession(session);
  (*s)->entries.emplace(entry.handle, entry);
  return entry;
}

absl::StatusOr<HandleEntry> HandleTable::Lookup(std::string_view session,
                                                uint64_t handle) {
  auto s = FindSession(session);
  if (!s.ok()) return s.status();
  absl::MutexLock lock(&(*s)->mu);
  auto it = (*s)->entries.find(handle);
  if (it == (*s)->entries.end()) return UnknownHandle(handle);
  it->second.last_used = HandleEntry::Clock::now();
  return it->second;
}

absl::StatusOr<std::vector<HandleEntry>> HandleTable::List(
    std::string_view session) const {
  auto s = FindSession(session);
  if (!s.ok()) return s.status();
  std::vector<HandleEntry> out;
  {
    absl::MutexLock lock(&(*s)->mu);
    out.reserve((*s)->entries.size());
    for (const auto& [handle, entry] : (*s)->entries) out.push_back(entry);
  }
  std::sort(out.begin(), out.end(),
            [](const HandleEntry& a, const HandleEntry& b) {
              return a.handle < b.handle;
            });
  return out;
}

absl::StatusOr<HandleEntry> HandleTable::Remove(std::string_view session,
                                                uint64_t handle) {
  auto s = FindSession(session);
  if (!s.ok()) return s.status();
  absl::MutexLock lock(&(*s)->mu);
  auto it = (*s)->entries.find(handle);
  if (it == (*s)->entries.end()) return UnknownHandle(handle);
  HandleEntry entry = std::move(it->second);
  (*s)->entries.erase(it);
  return entry;
}

}  // namespace tensord::core
