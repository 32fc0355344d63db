#include "core/runtime/runtime_impl.h"

namespace tensord::core {
namespace {

constexpr int kMaxHostDevices = 64;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kMinAcceleratorReserve = 256 * kMiB;

}  // namespace

HandleTableOptions TableOptions(const RuntimeOptions& o) {
  HandleTableOptions t;
  t.max_sessions = o.max_sessions;
  t.session_max_bytes = o.session_max_bytes;
  t.session_max_tensors = o.session_max_tensors;
  t.on_registered = ChargeToSession;
  return t;
}

std::chrono::milliseconds Runtime::Impl::ClampTtl(
    std::chrono::milliseconds requested) const {
  if (requested.count() <= 0) return session_ttl_;
  return std::clamp(requested, min_session_ttl_,
                    std::max(min_session_ttl_, max_session_ttl_));
}

size_t Runtime::Impl::ReapExpired() {
  std::vector<ExpiredSession> expired =
      table_.ReapExpired(HandleEntry::Clock::now());
  for (ExpiredSession& e : expired) {
    ExpiredSessionInfo info;
    info.id_prefix = e.id_prefix;
    info.client_name = e.client_name;
    SessionCloseStats stats = Forget(std::move(e.entries));
    info.released_tensors = stats.released_tensors;
    info.released_bytes = stats.released_bytes;
    if (on_session_expired_) on_session_expired_(info);
  }
  return expired.size();
}

void Runtime::Impl::ReaperLoop() {
  absl::MutexLock lock(&reaper_mu_);
  while (!stopping_) {
    // Sleeps until the interval passes or shutdown flips `stopping_`.
    reaper_mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                                absl::FromChrono(reap_interval_));
    if (stopping_) break;
    reaper_mu_.Unlock();
    ReapExpired();
    reaper_mu_.Lock();
  }
}

absl::Status Runtime::Impl::Init(RuntimeOptions options) {
  if (options.host_devices < 1 || options.host_devices > kMaxHostDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("host_devices is ", options.host_devices,
                     "; expected 1 to ", kMaxHostDevices));
  }
  if (options.session_ttl.count() < 0 || options.min_session_ttl.count() < 0 ||
      options.reap_interval.count() <= 0) {
    return absl::InvalidArgumentError(
        "session TTLs must be >= 0 and the reap interval > 0");
  }
  if (options.collective_timeout.count() <= 0) {
    return absl::InvalidArgumentError("the collective timeout must be > 0");
  }
  if (!options.node_name.empty())
    RETURN_IF_ERROR(CheckNodeName(options.node_name));
  node_name_ = options.node_name;
  max_tensor_bytes_ = options.max_tensor_bytes;
  session_ttl_ = options.session_ttl;
  min_session_ttl_ = options.min_session_ttl;
  max_session_ttl_ = options.max_session_ttl;
  reap_interval_ = options.reap_interval;
  on_session_expired_ = std::move(options.on_session_expired);
  const HandleTableOptions table = TableOptions(options);
  limits_.default_session_ttl = session_ttl_;
  limits_.min_session_ttl = min_session_ttl_;
  limits_.max_session_ttl = std::max(min_session_ttl_, max_session_ttl_);
  limits_.max_sessions = table.max_sessions;
  limits_.session_max_bytes = table.session_max_bytes;
  limits_.session_max_tensors = table.session_max_tensors;
  limits_.max_tensor_bytes = max_tensor_bytes_;
  limits_.session_max_regions = table.session_max_regions;
  limits_.session_max_programs = table.session_max_programs;
  limits_.session_max_groups = groups_.max_per_session();
  limits_.collective_timeout = collective_timeout_;
  limits_.max_request_id_bytes = kMaxRequestIdBytes;
  const int n = options.host_devices;
  for (int i = 0; i < n; ++i) {
    CpuDeviceOptions cpu;
    cpu.name = n == 1 ? "cpu" : absl::StrCat("cpu:", i);
    cpu.index = i;
    cpu.kernel_libraries = options.kernel_libraries;
    auto slot = std::make_unique<DeviceSlot>();
    slot->device = CreateCpuDevice(cpu);
    slot->budget = options.host_memory_budget;
    if (slot->budget == 0) {
      const uint64_t ram = slot->device->Properties().total_memory;
      slot->budget = ram / 10 * 8 / static_cast<uint64_t>(n);
    }
    slots_.push_back(std::move(slot));
  }
  for (std::unique_ptr<Device>& device : options.extra_devices) {
    if (device == nullptr) {
      return absl::InvalidArgumentError("extra_devices holds a null device");
    }
    for (const auto& s : slots_) {
      if (s->device->kind() == device->kind() &&
          s->device->index() == device->index()) {
        return absl::InvalidArgumentError(
            absl::StrCat("device ", device->name(), " is configured twice"));
      }
    }
    auto slot = std::make_unique<DeviceSlot>();
    slot->budget = options.accelerator_memory_budget;
    if (slot->budget == 0) {
      const uint64_t total = device->Properties().total_memory;
      const uint64_t reserve = std::max(total / 20, kMinAcceleratorReserve);
      slot->budget = total > reserve ? total - reserve : 0;
    }
    slot->device = std::move(device);
    slots_.push_back(std::move(slot));
  }
  reaper_ = std::thread([this] { ReaperLoop(); });
  return absl::OkStatus();
}

std::vector<DeviceStatus> Runtime::Impl::ListDevices() const {
  std::vector<DeviceStatus> out;
  out.reserve(slots_.size());
  for (const auto& slot : slots_) {
    DeviceStatus s;
    s.name = slot->device->name();
    s.kind = slot->device->kind();
    s.properties = slot->device->Properties();
    s.held_bytes = slot->held.load();
    s.budget_bytes = slot->budget;
    s.live_tensors = slot->live_tensors.load();
    s.allocation_failures = slot->allocation_failures.load();
    s.capabilities = slot->device->capabilities();
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<DeviceSlot*> Runtime::Impl::FindSlot(
    std::string_view name) const {
  if (name.empty()) name = "cpu";
  if (name.size() > kMaxDeviceNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid device name '", Echo(name), "': longer than ",
                     kMaxDeviceNameBytes, " bytes"));
  }
  if (const size_t slash = name.find('/'); slash != std::string_view::npos) {
    const std::string_view node = name.substr(0, slash);
    if (node_name_.empty() || node != node_name_) {
      return absl::NotFoundError(absl::StrCat(
          "device '", Echo(name), "' is on node '", Echo(node),
          "', but this server is ",
          node_name_.empty() ? "unnamed (start it with --node-name)"
                             : absl::StrCat("node '", node_name_, "'"),
          ": a cluster client sends each node its own devices' names"));
    }
    name = name.substr(slash + 1);
  }
  std::string_view kind_name = name;
  std::string_view index_text;
  const size_t colon = name.find(':');
  if (colon != std::string_view::npos) {
    kind_name = name.substr(0, colon);
    index_text = name.substr(colon + 1);
  }
  const bool kind_ok = kind_name == "cpu" || kind_name == "cuda";
  const bool index_ok =
      colon == std::string_view::npos ||
      (!index_text.empty() && index_text.size() <= 6 &&
       std::all_of(index_text.begin(), index_text.end(), absl::ascii_isdigit));
  int index = 0;
  if (!kind_ok || !index_ok ||
      (!index_text.empty() && !absl::SimpleAtoi(ToAbsl(index_text), &index))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid device name '", Echo(name),
        "': expected 'cpu', 'cpu:<index>', 'cuda' or 'cuda:<index>'"));
  }
  const DeviceKind kind =
      kind_name == "cpu" ? DeviceKind::kCpu : DeviceKind::kCuda;
  std::vector<std::string> names;
  for (const auto& slot : slots_) {
    if (slot->device->kind() == kind && slot->device->index() == index) {
      return slot.get();
    }
    names.push_back(slot->device->name());
  }
  return absl::NotFoundError(absl::StrCat(
      "device ", Echo(name),
      " not found; available devices: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<TensorMeta> Runtime::Impl::Register(
    std::string_view session, DeviceSlot& slot, DType dtype, Shape shape,
    uint64_t nbytes, std::shared_ptr<Buffer> buffer, std::string_view tag) {
  auto tensor = NewStoredTensor();
  tensor->device = slot.device.get();
  tensor->dtype = dtype;
  tensor->shape = std::move(shape);
  tensor->nbytes = nbytes;
  tensor->buffer = std::move(buffer);
  return Register(session, std::move(tensor), tag);
}

absl::StatusOr<TensorMeta> Runtime::Impl::Register(std::string_view session,
                                                   TensorPtr tensor,
                                                   std::string_view tag) {
  DeviceSlot& slot = SlotOf(tensor->device);
  ASSIGN_OR_RETURN(HandleEntry entry,
                   table_.Insert(session, std::move(tensor), tag));
  slot.live_tensors.fetch_add(1);
  return MetaOf(entry);
}

SessionCloseStats Runtime::Impl::Forget(std::vector<HandleEntry> entries) {
  SessionCloseStats stats;
  for (const HandleEntry& e : entries) {
    SlotOf(e.tensor->device).live_tensors.fetch_sub(1);
    ++stats.released_tensors;
    stats.released_bytes += e.tensor->nbytes;
  }
  return stats;  // `entries` goes now, freeing what no reader holds
}

// --- Runtime -----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(
    RuntimeOptions options) {
  auto impl = std::make_unique<Impl>(options);
  RETURN_IF_ERROR(impl->Init(std::move(options)));
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

std::vector<DeviceStatus> Runtime::ListDevices() const {
  return impl_->ListDevices();
}

RuntimeLimits Runtime::limits() const { return impl_->limits(); }

absl::Status CheckNodeName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNodeNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("node name '", Echo(name), "' is ", name.size(),
                     " bytes long; expected 1 to ", kMaxNodeNameBytes));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("node name '", Echo(name),
                       "' may hold only letters, digits, '-', '_' and '.'"));
    }
  }
  return absl::OkStatus();
}

const std::string& Runtime::node_name() const { return impl_->node_name(); }

absl::StatusOr<Device*> Runtime::FindDevice(std::string_view name) const {
  ASSIGN_OR_RETURN(DeviceSlot * slot, impl_->FindSlot(name));
  return slot->device.get();
}

absl::StatusOr<std::string> Runtime::OpenSession(std::string_view client_name) {
  ASSIGN_OR_RETURN(SessionLease lease,
                   OpenSession(client_name, std::chrono::milliseconds(0)));
  return std::move(lease.id);
}

absl::StatusOr<SessionLease> Runtime::OpenSession(
    std::string_view client_name, std::chrono::milliseconds ttl) {
  if (ttl.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ttl_ms is ", ttl.count(),
        "; expected 0 (the server's default lease) or a positive number of "
        "milliseconds"));
  }
  RETURN_IF_ERROR(CheckLength("client_name", client_name, kMaxClientNameBytes));
  SessionLease lease;
  lease.ttl = impl_->ClampTtl(ttl);
  ASSIGN_OR_RETURN(lease.id,
                   impl_->table().OpenSession(client_name, lease.ttl));
  return lease;
}

absl::StatusOr<std::chrono::milliseconds> Runtime::KeepAlive(
    std::string_view session) {
  return impl_->table().Renew(session);
}

size_t Runtime::ReapExpiredSessions() { return impl_->ReapExpired(); }

absl::StatusOr<std::optional<std::string>> Runtime::BeginRequest(
    std::string_view session, std::string_view id) {
  return impl_->table().BeginRequest(session, id);
}

void Runtime::EndRequest(std::string_view session, std::string_view id,
                         const std::string* response) {
  impl_->table().EndRequest(session, id, response);
}

absl::StatusOr<SessionCloseStats> Runtime::CloseSession(
    std::string_view session) {
  ASSIGN_OR_RETURN(std::vector<HandleEntry> entries,
                   impl_->table().CloseSession(session));
  return impl_->Forget(std::move(entries));
}

size_t Runtime::session_count() const { return impl_->table().session_count(); }

std::vector<std::pair<std::string, TensorMeta>> Runtime::ListAllTensors()
    const {
  std::vector<std::pair<std::string, TensorMeta>> out;
  for (const SessionSummary& s :
       impl_->table().ListSessions(/*with_entries=*/true)) {
    for (const HandleEntry& e : s.entries)
      out.emplace_back(s.id_prefix, MetaOf(e));
  }
  // Handles are unique across sessions: a stable order to page through.
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second.handle < b.second.handle;
  });
  return out;
}

std::vector<SessionInfo> Runtime::ListSessions() const {
  const auto now = HandleEntry::Clock::now();
  std::vector<SessionInfo> out;
  for (const SessionSummary& s : impl_->table().ListSessions()) {
    SessionInfo info;
    info.id_prefix = s.id_prefix;
    info.client_name = s.client_name;
    info.serial = s.serial;
    info.tensors = s.tensors;
    info.bytes = s.bytes;
    info.age_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - s.created)
            .count();
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<TensorMeta> Runtime::GetTensor(std::string_view session,
                                              uint64_t handle) {
  ASSIGN_OR_RETURN(HandleEntry entry, impl_->table().Lookup(session, handle));
  return MetaOf(entry);
}

absl::StatusOr<std::vector<TensorMeta>> Runtime::ListTensors(
    std::string_view session) {
  ASSIGN_OR_RETURN(std::vector<HandleEntry> entries,
                   impl_->table().List(session));
  std::vector<TensorMeta> out;
  out.reserve(entries.size());
  for (const HandleEntry& e : entries) out.push_back(MetaOf(e));
  return out;
}

absl::StatusOr<std::vector<TensorMeta>> Runtime::ListHeld(
    std::string_view session) {
  ASSIGN_OR_RETURN(std::vector<HeldTensor> held,
                   impl_->table().ListHeld(session));
  std::vector<TensorMeta> out;
  out.reserve(held.size());
  for (HeldTensor& h : held) {
    TensorMeta meta;
    meta.device = std::move(h.device);
    meta.dtype = h.dtype;
    meta.shape = std::move(h.shape);
    meta.nbytes = h.nbytes;
    meta.tag = std::move(h.tag);
    out.push_back(std::move(meta));
  }
  return out;
}

absl::Status Runtime::Release(std::string_view session, uint64_t handle) {
  ASSIGN_OR_RETURN(HandleEntry entry, impl_->table().Remove(session, handle));
  std::vector<HandleEntry> entries;
  entries.push_back(std::move(entry));
  impl_->Forget(std::move(entries));
  return absl::OkStatus();
}

absl::Status Runtime::RenameHandle(std::string_view session, uint64_t from,
                                   uint64_t to) {
  return impl_->table().Rename(session, from, to);
}

absl::Status Runtime::BindToSession(std::string_view session,
                                    std::weak_ptr<SessionBound> bound) {
  return impl_->table().Bind(session, std::move(bound));
}

size_t Runtime::ReleaseIfPresent(std::string_view session,
                                 std::span<const uint64_t> handles) {
  std::vector<HandleEntry> entries;
  for (uint64_t handle : handles) {
    absl::StatusOr<HandleEntry> entry = impl_->table().Remove(session, handle);
    if (entry.ok()) entries.push_back(*std::move(entry));
  }
  const size_t released = entries.size();
  if (released != 0) impl_->Forget(std::move(entries));
  return released;
}

absl::StatusOr<std::unique_ptr<Runtime::CallScope>> Runtime::BeginCall(
    std::string_view session) {
  struct Scope final : CallScope {
    explicit Scope(HandleTable::ActiveCall c) : call(std::move(c)) {}
    HandleTable::ActiveCall call;
  };
  ASSIGN_OR_RETURN(HandleTable::ActiveCall call,
                   impl_->table().BeginCall(session));
  return std::make_unique<Scope>(std::move(call));
}

}  // namespace tensord::core
