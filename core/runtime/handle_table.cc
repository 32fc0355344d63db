#include "core/runtime/handle_table.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/absl_compat.h"
#include "core/base/refusal.h"
#include "core/runtime/shared_memory.h"
#include "core/base/status.h"

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

// How much of a session's use autograd holds, for quota messages.
std::string HeldNote(uint64_t held, const char* unit) {
  if (held == 0) return "";
  return absl::StrCat(" (", held, " ", unit,
                      " of them held by autograd without a handle: tensors "
                      "saved for backward and leaves' grads, listed by "
                      "ListTensors as `held`)");
}

// How much of a session's use is a request in progress, for quota messages.
std::string InFlightNote(uint64_t in_flight, const char* unit) {
  if (in_flight == 0) return "";
  return absl::StrCat(" (", in_flight, " ", unit,
                      " of them made by requests in progress and not kept "
                      "yet: intermediates and results being computed)");
}

absl::Status UnknownHandle(uint64_t handle) {
  return absl::NotFoundError(
      absl::StrCat("unknown tensor handle ", handle, " in this session"));
}

absl::Status UnknownProgram(uint64_t program) {
  return absl::NotFoundError(
      absl::StrCat("unknown program ", program,
                   " in this session (never registered, released, or dropped "
                   "as the least recently used past the session's bound)"));
}

absl::Status UnknownRegion(uint64_t region) {
  return absl::NotFoundError(absl::StrCat("unknown shared memory region ",
                                          region, " in this session"));
}

}  // namespace

// Handles start at a random nonzero 32-bit value: a client cannot assume
// small ids, and 0 is never a handle.
HandleTable::HandleTable() : HandleTable(HandleTableOptions{}) {}

HandleTable::HandleTable(HandleTableOptions options)
    : options_(options), next_handle_((RandomU64() >> 32) | 1) {}

std::string HandleTable::AddSession(std::shared_ptr<Session> session) {
  session->serial = next_serial_++;
  while (true) {
    std::string id = absl::StrFormat("%016x%016x", RandomU64(), RandomU64());
    if (sessions_.emplace(id, session).second) return id;
  }
}

std::string HandleTable::OpenSession(std::string_view client_name) {
  auto session =
      std::make_shared<Session>(client_name, std::chrono::milliseconds(0));
  absl::MutexLock lock(&mu_);
  return AddSession(std::move(session));
}

absl::StatusOr<std::string> HandleTable::OpenSession(
    std::string_view client_name, std::chrono::milliseconds ttl) {
  auto session = std::make_shared<Session>(
      client_name, std::max(ttl, std::chrono::milliseconds(0)));
  absl::MutexLock lock(&mu_);
  if (options_.max_sessions != 0 && sessions_.size() >= options_.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many sessions: ", sessions_.size(),
                     " are open and the server's "
                     "limit is ",
                     options_.max_sessions,
                     " (--max-sessions); close sessions you no longer use"));
  }
  return AddSession(std::move(session));
}

namespace {
// This thread's innermost SessionPin (HandleTable::Pin).
thread_local const HandleTable::SessionPin* current_pin = nullptr;
}  // namespace

HandleTable::SessionPin::SessionPin(const HandleTable* table, std::string id,
                                    std::shared_ptr<Session> session)
    : table_(table),
      id_(std::move(id)),
      session_(std::move(session)),
      outer_(current_pin) {
  current_pin = this;
}

HandleTable::SessionPin::~SessionPin() { current_pin = outer_; }

absl::StatusOr<std::unique_ptr<HandleTable::SessionPin>> HandleTable::Pin(
    std::string_view session) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  return std::unique_ptr<SessionPin>(
      new SessionPin(this, std::string(session), std::move(s)));
}

absl::StatusOr<std::shared_ptr<HandleTable::Session>> HandleTable::FindSession(
    std::string_view session) const {
  for (const SessionPin* pin = current_pin; pin != nullptr; pin = pin->outer_) {
    if (pin->table_ == this && pin->id_ == session) return pin->session_;
  }
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(ToAbsl(session));
  if (it == sessions_.end()) return UnknownSession(session);
  // Any call naming the session renews its lease.
  if (it->second->ttl.count() > 0) it->second->Renew();
  return it->second;
}

absl::StatusOr<std::chrono::milliseconds> HandleTable::Renew(
    std::string_view session) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  return s->ttl;
}

HandleTable::ActiveCall::ActiveCall(ActiveCall&& other) noexcept
    : session_(std::move(other.session_)) {}

HandleTable::ActiveCall& HandleTable::ActiveCall::operator=(
    ActiveCall&& other) noexcept {
  if (this != &other) {
    ActiveCall ended(std::move(*this));
    session_ = std::move(other.session_);
  }
  return *this;
}

HandleTable::ActiveCall::~ActiveCall() {
  if (session_ == nullptr) return;
  // Renewed before it counts as idle again, so the reaper never sees the
  // lease as it was when the call began.
  if (session_->ttl.count() > 0) session_->Renew();
  session_->active_calls.fetch_sub(1);
}

absl::StatusOr<HandleTable::ActiveCall> HandleTable::BeginCall(
    std::string_view session) {
  ActiveCall call;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(ToAbsl(session));
    if (it == sessions_.end()) return UnknownSession(session);
    // Counted under the map's lock: the reaper, which removes under it,
    // either sees the count or removed the session before we found it.
    it->second->active_calls.fetch_add(1);
    if (it->second->ttl.count() > 0) it->second->Renew();
    call.session_ = it->second;
  }
  return call;
}

absl::Status HandleTable::Bind(std::string_view session,
                               std::weak_ptr<SessionBound> bound) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  absl::MutexLock lock(&s->mu);
  if (s->closed) return UnknownSession(session);
  // Forget streams that have ended, so a long session's list stays short.
  std::erase_if(s->bound, [](const std::weak_ptr<SessionBound>& b) {
    return b.expired();
  });
  s->bound.push_back(std::move(bound));
  return absl::OkStatus();
}

std::vector<std::weak_ptr<SessionBound>> HandleTable::EndSession(
    Session& s, std::vector<HandleEntry>* entries) {
  absl::MutexLock lock(&s.mu);
  s.closed = true;
  entries->reserve(entries->size() + s.entries.size());
  for (auto& [handle, entry] : s.entries) entries->push_back(std::move(entry));
  s.entries.clear();
  s.bytes = 0;
  s.memory->End();
  s.requests.clear();
  s.request_order.clear();
  s.regions.clear();
  s.programs.clear();
  return std::move(s.bound);
}

void HandleTable::NotifyEnded(std::vector<std::weak_ptr<SessionBound>> bound,
                              const absl::Status& why) {
  for (const std::weak_ptr<SessionBound>& b : bound) {
    if (std::shared_ptr<SessionBound> alive = b.lock()) {
      alive->OnSessionEnded(why);
    }
  }
}

std::vector<ExpiredSession> HandleTable::ReapExpired(
    HandleEntry::Clock::time_point now) {
  const HandleEntry::Clock::rep now_ticks = now.time_since_epoch().count();
  std::vector<std::pair<std::string, std::shared_ptr<Session>>> expired;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      const Session& s = *it->second;
      if (s.ttl.count() > 0 && s.active_calls.load() == 0 &&
          s.expires.load(std::memory_order_relaxed) < now_ticks) {
        expired.emplace_back(it->first, std::move(it->second));
        sessions_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  std::vector<ExpiredSession> out;
  for (auto& [id, s] : expired) {
    ExpiredSession e;
    e.id_prefix = id.substr(0, 8);
    e.client_name = s->client_name;
    NotifyEnded(
        EndSession(*s, &e.entries),
        absl::NotFoundError(absl::StrCat(
            "session ", e.id_prefix, "... ended: its lease of ", s->ttl.count(),
            " ms ran out with no call or stream message naming it")));
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status HandleTable::QuotaCheck(const Session& s, uint64_t bytes,
                                     uint64_t tensors) const {
  const uint64_t max_tensors = options_.session_max_tensors;
  const uint64_t max_bytes = options_.session_max_bytes;
  if (max_tensors == 0 && max_bytes == 0) return absl::OkStatus();
  const uint64_t extra_tensors = s.memory->extra_tensors();
  const uint64_t extra_bytes = s.memory->extra_bytes();
  const uint64_t flight_tensors = s.memory->in_flight_tensors();
  const uint64_t flight_bytes = s.memory->in_flight_bytes();
  const uint64_t held_tensors =
      s.entries.size() + extra_tensors + flight_tensors;
  const uint64_t held_bytes = s.bytes + extra_bytes + flight_bytes;
  if (max_tensors != 0 &&
      (tensors > max_tensors || held_tensors > max_tensors - tensors)) {
    return MarkRefusal(
        absl::ResourceExhaustedError(absl::StrCat(
            "session tensor quota exceeded (--session-max-tensors): requested ",
            tensors, " more tensor", tensors == 1 ? "" : "s",
            "; the session holds ", held_tensors, " of its limit of ",
            max_tensors, " tensors", HeldNote(extra_tensors, "tensors"),
            InFlightNote(flight_tensors, "tensors"))),
        Refusal::kSessionQuota);
  }
  if (max_bytes != 0 && (bytes > max_bytes || held_bytes > max_bytes - bytes)) {
    return MarkRefusal(
        absl::ResourceExhaustedError(absl::StrCat(
            "session memory quota exceeded (--session-max-bytes): requested ",
            bytes, " bytes; the session holds ", held_bytes,
            " of its limit of ", max_bytes, " bytes",
            HeldNote(extra_bytes, "bytes"),
            InFlightNote(flight_bytes, "bytes"))),
        Refusal::kSessionQuota);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<SessionMemory>> HandleTable::Reserve(
    std::string_view session, uint64_t bytes, uint64_t tensors) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  absl::MutexLock lock(&s->mu);
  if (s->closed) return UnknownSession(session);
  RETURN_IF_ERROR(QuotaCheck(*s, bytes, tensors));
  s->memory->Reserve(bytes, tensors);
  return s->memory;
}

absl::StatusOr<std::optional<std::string>> HandleTable::BeginRequest(
    std::string_view session, std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdBytes ||
      !std::all_of(id.begin(), id.end(),
                   [](char c) { return c > ' ' && c < 0x7f; })) {
    return absl::InvalidArgumentError(
        "request id must be 1 to 64 printable characters");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  const auto now = HandleEntry::Clock::now();
  absl::MutexLock lock(&s->mu);
  if (s->closed) return UnknownSession(session);
  // Drop what the window no longer covers (ids still running stay).
  while (!s->request_order.empty()) {
    auto it = s->requests.find(s->request_order.front());
    const bool stale = it == s->requests.end() ||
                       (it->second.response.has_value() &&
                        (s->request_order.size() > options_.dedupe_entries ||
                         now - it->second.at > options_.dedupe_max_age));
    if (!stale) break;
    if (it != s->requests.end()) s->requests.erase(it);
    s->request_order.pop_front();
  }
  auto [it, inserted] = s->requests.try_emplace(std::string(id));
  if (!inserted) {
    if (!it->second.response.has_value()) {
      return absl::UnavailableError(
          absl::StrCat("request ", ToAbsl(id),
                       " is still in progress; retry it once it has finished"));
    }
    return it->second.response;
  }
  it->second.at = now;
  s->request_order.push_back(std::string(id));
  return std::optional<std::string>();
}

void HandleTable::EndRequest(std::string_view session, std::string_view id,
                             const std::string* response) {
  absl::StatusOr<std::shared_ptr<Session>> s = FindSession(session);
  if (!s.ok()) return;
  absl::MutexLock lock(&(*s)->mu);
  auto it = (*s)->requests.find(ToAbsl(id));
  if (it == (*s)->requests.end()) return;
  if (response == nullptr) {
    (*s)->requests.erase(it);  // its order entry is skipped when reached
    return;
  }
  it->second.response = *response;
  it->second.at = HandleEntry::Clock::now();
}

absl::Status HandleTable::CheckSession(std::string_view session) const {
  return FindSession(session).status();
}

absl::StatusOr<std::shared_ptr<SessionMemory>> HandleTable::MemoryOf(
    std::string_view session) const {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  return s->memory;
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
  NotifyEnded(
      EndSession(*s, &out),
      absl::NotFoundError(absl::StrCat("session ", ToAbsl(session.substr(0, 8)),
                                       "... was closed (CloseSession)")));
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
    NotifyEnded(EndSession(*s, &out),
                absl::UnavailableError("server is shutting down"));
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
    summary.serial = session->serial;
    summary.created = session->created;
    absl::MutexLock lock(&session->mu);
    for (const auto& [handle, entry] : session->entries) {
      ++summary.tensors;
      summary.bytes += entry.tensor->nbytes;
      if (with_entries) summary.entries.push_back(entry);
    }
    summary.tensors += session->memory->extra_tensors();
    summary.bytes += session->memory->extra_bytes();
    out.push_back(std::move(summary));
  }
  std::sort(out.begin(), out.end(),
            [](const SessionSummary& a, const SessionSummary& b) {
              return a.serial < b.serial;
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
  {
    absl::MutexLock lock(&(*s)->mu);
    if ((*s)->closed) return UnknownSession(session);
    // Memory admitted for the session (or held by its autograd) is counted
    // already: registering it moves the charge. Anything else (a second
    // handle to a buffer, as detach makes) is checked here.
    if (entry.tensor->buffer == nullptr ||
        !(*s)->memory->CountedWithoutEntry(entry.tensor->buffer.get())) {
      RETURN_IF_ERROR(QuotaCheck(**s, entry.tensor->nbytes, 1));
    }
    (*s)->bytes += entry.tensor->nbytes;
    (*s)->entries.emplace(entry.handle, entry);
    (*s)->memory->AddEntry(*entry.tensor);
  }
  if (options_.on_registered) {
    options_.on_registered(*entry.tensor, (*s)->memory, entry.handle);
  }
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

absl::StatusOr<std::vector<HeldTensor>> HandleTable::ListHeld(
    std::string_view session) const {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  return s->memory->ListExtra();
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
  (*s)->bytes -= entry.tensor->nbytes;
  (*s)->memory->RemoveEntry(*entry.tensor);
  return entry;
}

absl::Status HandleTable::Rename(std::string_view session, uint64_t from,
                                 uint64_t to) {
  if (to < kFirstClientHandle) {
    return absl::InvalidArgumentError(absl::StrCat(
        "result handle ", to, " is not one a client may choose: those are ",
        kFirstClientHandle, " (2^63) and above"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  absl::ReleasableMutexLock lock(&s->mu);
  auto it = s->entries.find(from);
  if (it == s->entries.end()) return UnknownHandle(from);
  if (s->entries.contains(to)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "result handle ", to, " is already in use in this session"));
  }
  HandleEntry entry = std::move(it->second);
  s->entries.erase(it);
  entry.handle = to;
  std::shared_ptr<const StoredTensor> tensor = entry.tensor;
  s->entries.emplace(to, std::move(entry));
  lock.Release();
  if (options_.on_registered) {
    options_.on_registered(*tensor, s->memory, to);  // grads now name `to`
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> HandleTable::AddRegion(
    std::string_view session, std::shared_ptr<SharedMemoryMapping> region) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  absl::MutexLock lock(&s->mu);
  if (s->closed) return UnknownSession(session);
  if (s->regions.size() >= options_.session_max_regions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the session already has ", s->regions.size(),
        " shared memory regions registered, the server's limit; unregister "
        "one first"));
  }
  const uint64_t id = next_handle_.fetch_add(1, std::memory_order_relaxed);
  s->regions.emplace(id, std::move(region));
  return id;
}

absl::StatusOr<std::shared_ptr<SharedMemoryMapping>> HandleTable::FindRegion(
    std::string_view session, uint64_t region) const {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  absl::MutexLock lock(&s->mu);
  auto it = s->regions.find(region);
  if (it == s->regions.end()) return UnknownRegion(region);
  return it->second;
}

absl::Status HandleTable::RemoveRegion(std::string_view session,
                                       uint64_t region) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  std::shared_ptr<SharedMemoryMapping> removed;  // unmapped after the lock
  absl::MutexLock lock(&s->mu);
  auto it = s->regions.find(region);
  if (it == s->regions.end()) return UnknownRegion(region);
  removed = std::move(it->second);
  s->regions.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> HandleTable::AddProgram(
    std::string_view session, std::shared_ptr<const Program> program) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  std::shared_ptr<const Program> evicted;  // destroyed after the lock
  absl::MutexLock lock(&s->mu);
  if (s->closed) return UnknownSession(session);
  if (s->programs.size() >= std::max<size_t>(options_.session_max_programs, 1)) {
    auto oldest = s->programs.begin();
    for (auto it = s->programs.begin(); it != s->programs.end(); ++it) {
      if (it->second.used < oldest->second.used) oldest = it;
    }
    evicted = std::move(oldest->second.program);
    s->programs.erase(oldest);
  }
  const uint64_t id = next_handle_.fetch_add(1, std::memory_order_relaxed);
  s->programs.emplace(
      id, Session::HeldProgram{std::move(program), ++s->program_tick});
  return id;
}

absl::StatusOr<std::shared_ptr<const Program>> HandleTable::FindProgram(
    std::string_view session, uint64_t program) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  absl::MutexLock lock(&s->mu);
  auto it = s->programs.find(program);
  if (it == s->programs.end()) return UnknownProgram(program);
  it->second.used = ++s->program_tick;
  return it->second.program;
}

absl::Status HandleTable::RemoveProgram(std::string_view session,
                                        uint64_t program) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  std::shared_ptr<const Program> removed;  // destroyed after the lock
  absl::MutexLock lock(&s->mu);
  auto it = s->programs.find(program);
  if (it == s->programs.end()) return UnknownProgram(program);
  removed = std::move(it->second.program);
  s->programs.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<uint64_t, std::shared_ptr<const Program>>>>
HandleTable::ListPrograms(std::string_view session) const {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(session));
  std::vector<std::pair<uint64_t, std::shared_ptr<const Program>>> out;
  {
    absl::MutexLock lock(&s->mu);
    for (const auto& [id, held] : s->programs) out.emplace_back(id, held.program);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

}  // namespace tensord::core
