#include "core/runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/absl_compat.h"
#include "core/cpu/cpu_device.h"
#include "core/handle_table.h"
#include "core/op_checks.h"
#include "core/shared_memory.h"
#include "core/status.h"

namespace tensord::core {
namespace {

constexpr int kMaxHostDevices = 64;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kMinAcceleratorReserve = 256 * kMiB;

// A device with its budget. Held bytes are counted from admission until the
// buffer (or a failed allocation) gives them back.
struct DeviceSlot {
  std::unique_ptr<Device> device;
  uint64_t budget = 0;
  std::atomic<uint64_t> held{0};
  std::atomic<uint64_t> live_tensors{0};
  std::atomic<uint64_t> allocation_failures{0};
};

int64_t MillisSince(HandleEntry::Clock::time_point t,
                    HandleEntry::Clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count();
}

TensorMeta MetaOf(const HandleEntry& entry) {
  const auto now = HandleEntry::Clock::now();
  const StoredTensor& t = *entry.tensor;
  TensorMeta meta;
  meta.handle = entry.handle;
  meta.device = t.device->name();
  meta.dtype = t.dtype;
  meta.shape = t.shape;
  meta.nbytes = t.nbytes;
  meta.tag = entry.tag;
  meta.age_ms = MillisSince(entry.created, now);
  meta.idle_ms = MillisSince(entry.last_used, now);
  return meta;
}

TensorRef RefOf(const StoredTensor& t) {
  return TensorRef{t.buffer.get(), t.dtype, t.shape};
}

absl::Status SameDevice(const StoredTensor& a, const StoredTensor& b) {
  if (a.device == b.device) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "Expected all tensors to be on the same device, but found at least two "
      "devices, ",
      a.device->name(), " and ", b.device->name(), "!"));
}

bool IsRandom(FillSpec::Kind kind) {
  return kind == FillSpec::Kind::kRand || kind == FillSpec::Kind::kRandn;
}

// Checks the parameters of a fill; for an arange with no dims, returns its
// 1-D length in `arange_length`.
absl::Status ValidateFill(const FillSpec& fill, bool shape_from_range,
                          double arange_end, int64_t* arange_length) {
  switch (fill.kind) {
    case FillSpec::Kind::kZeros:
    case FillSpec::Kind::kOnes:
    case FillSpec::Kind::kFull:
      return absl::OkStatus();
    case FillSpec::Kind::kArange: {
      if (!std::isfinite(fill.start) || !std::isfinite(fill.step)) {
        return absl::InvalidArgumentError(
            absl::StrCat("arange: start (", fill.start, ") and step (",
                         fill.step, ") must be finite"));
      }
      if (fill.step == 0) {
        return absl::InvalidArgumentError("arange: step must be nonzero");
      }
      if (!shape_from_range) return absl::OkStatus();
      if (!std::isfinite(arange_end)) {
        return absl::InvalidArgumentError(
            absl::StrCat("arange: end (", arange_end, ") must be finite"));
      }
      const double length = std::ceil((arange_end - fill.start) / fill.step);
      if (length < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "arange: upper bound and larger bound inconsistent with step sign "
            "(start ",
            fill.start, ", end ", arange_end, ", step ", fill.step, ")"));
      }
      if (!(length <= static_cast<double>(kMaxTensorBytes))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "arange: ", length, " elements are too many for one tensor"));
      }
      *arange_length = static_cast<int64_t>(length);
      return absl::OkStatus();
    }
    case FillSpec::Kind::kRand:
      if (!std::isfinite(fill.low) || !std::isfinite(fill.high) ||
          fill.low > fill.high) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rand expects a finite [low, high) range with low <= high, but "
            "found low=",
            fill.low, " and high=", fill.high));
      }
      return absl::OkStatus();
    case FillSpec::Kind::kRandn:
      if (!std::isfinite(fill.mean) || !std::isfinite(fill.stddev) ||
          fill.stddev < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "randn expects a finite mean and stddev >= 0, but found mean=",
            fill.mean, " and stddev=", fill.stddev));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid fill kind ", static_cast<int>(fill.kind)));
}

// The dtype of `t` (op) a Python number: the number counts only by category
// (bool < integral < floating); a higher-category number gives that
// category's default dtype (int64, float32).
DType ScalarResultType(DType t, const Scalar& s) {
  const int scalar_category = s.is_integral ? 1 : 2;
  const int tensor_category = t == DType::kBool ? 0 : IsIntegral(t) ? 1 : 2;
  if (scalar_category > tensor_category) {
    return s.is_integral ? DType::kInt64 : DType::kFloat32;
  }
  return t;
}

// PyTorch's canCast(from, to) for in-place results.
bool CanCast(DType from, DType to) {
  if (IsFloating(from) && !IsFloating(to)) return false;
  if (from != DType::kBool && to == DType::kBool) return false;
  return true;
}

// Wraps a possibly negative dim into [0, rank) (a 0-d tensor accepts 0 and
// -1, like PyTorch).
absl::StatusOr<int> WrapDim(int64_t dim, int rank) {
  const int64_t r = std::max(rank, 1);
  if (dim < -r || dim >= r) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Dimension out of range (expected to be in range of [", -r, ", ",
        r - 1, "], but got ", dim, ")"));
  }
  return static_cast<int>(dim < 0 ? dim + r : dim);
}

int64_t Product(const Shape& shape, int begin, int end) {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= shape.dim(i);
  return n;
}

std::string Describe(const StoredTensor& t) {
  return absl::StrCat(t.shape.ToString(), " ", ToAbsl(DTypeName(t.dtype)));
}

// INVALID_ARGUMENT unless `text` (the request's `field`) fits `max` bytes.
absl::Status CheckLength(std::string_view field, std::string_view text,
                         size_t max) {
  if (text.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      ToAbsl(field), " is ", text.size(), " bytes long ('", Echo(text, 32),
      "'); the server's limit is ", max, " bytes"));
}

absl::Status CheckTag(std::string_view tag) {
  return CheckLength("tag", tag, kMaxTagBytes);
}

}  // namespace

HandleTableOptions TableOptions(const RuntimeOptions& o) {
  HandleTableOptions t;
  t.max_sessions = o.max_sessions;
  t.session_max_bytes = o.session_max_bytes;
  t.session_max_tensors = o.session_max_tensors;
  return t;
}

class Runtime::Impl {
 public:
  explicit Impl(const RuntimeOptions& options)
      : table_(TableOptions(options)) {}
  // The reaper stops first; then sessions go: their buffers give bytes back
  // to the slots.
  ~Impl() {
    {
      absl::MutexLock lock(&reaper_mu_);
      stopping_ = true;
    }
    if (reaper_.joinable()) reaper_.join();
    table_.CloseAll();
  }

  absl::Status Init(RuntimeOptions options);

  // Closes the expired sessions, frees their tensors, reports each one.
  size_t ReapExpired();
  // The reaper thread's body: wakes every reap_interval (or at once on
  // shutdown) and reaps.
  void ReaperLoop();
  std::chrono::milliseconds ClampTtl(std::chrono::milliseconds requested) const;

  std::vector<DeviceStatus> ListDevices() const;
  RuntimeLimits limits() const { return limits_; }
  absl::StatusOr<DeviceSlot*> FindSlot(std::string_view name) const;
  DeviceSlot& SlotOf(const Device* device) const;

  HandleTable& table() { return table_; }

  // Admits `bytes` against the slot's budget and allocates them. The
  // returned buffer gives the bytes back when its last owner drops it.
  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(DeviceSlot& slot,
                                                   uint64_t bytes);

  // Registers a finished tensor in the session.
  absl::StatusOr<TensorMeta> Register(std::string_view session,
                                      DeviceSlot& slot, DType dtype,
                                      Shape shape, uint64_t nbytes,
                                      std::shared_ptr<Buffer> buffer,
                                      std::string_view tag);
  // Drops removed entries, keeping the live-tensor counts right.
  SessionCloseStats Forget(std::vector<HandleEntry> entries);

  // Allocates an output tensor of `dtype`/`shape` on `slot`.
  struct Output {
    Shape shape;
    DType dtype;
    uint64_t nbytes;
    std::shared_ptr<Buffer> buffer;
    TensorRef ref() const { return TensorRef{buffer.get(), dtype, shape}; }
  };
  absl::StatusOr<Output> AllocateOutput(DeviceSlot& slot, DType dtype,
                                        Shape shape);
  // `t` as `dtype`: itself, or a cast into a temporary kept in `temp`.
  absl::StatusOr<TensorRef> AsDType(DeviceSlot& slot, const StoredTensor& t,
                                    DType dtype, Output& temp);

  // --- Ops (Run / Execute) ---
  using TensorPtr = std::shared_ptr<const StoredTensor>;
  // One value of an op list: a tensor, with its handle entry when it is a
  // tensor of the session (given by handle, or updated in place).
  struct Value {
    TensorPtr tensor;
    std::optional<HandleEntry> entry;
  };
  // Runs one op on resolved inputs. The result is a new, unregistered
  // tensor, or for an in-place op inputs[0] itself.
  absl::StatusOr<Value> Apply(const OpSpec& op, std::span<const Value> in);

  TensorPtr Stored(DeviceSlot& slot, Output out) const;
  absl::StatusOr<Output> ScalarTensor(DeviceSlot& slot, const Scalar& s,
                                      DType dtype);
  // a (op) b, or a (op) scalar (scalar (op) a when scalar_first). With
  // `into`, the result is written into that tensor (in-place ops): its
  // shape must be the broadcast shape and the result dtype castable to its
  // dtype; the returned Output is then empty.
  absl::StatusOr<Output> BinaryOut(BinaryOp op, const StoredTensor& a,
                                   const StoredTensor* b, const Scalar* scalar,
                                   bool scalar_first,
                                   const StoredTensor* into);
  absl::StatusOr<Output> UnaryOut(UnaryOp op, const StoredTensor& x);
  absl::StatusOr<Output> MatMulOut(const StoredTensor& a, const StoredTensor& b);
  absl::StatusOr<Output> LinearOut(const StoredTensor& x, const StoredTensor& w,
                                   const StoredTensor* bias);
  absl::StatusOr<Output> ReduceOut(ReduceOp op, const StoredTensor& x,
                                   std::optional<int64_t> dim, bool keepdim);
  absl::StatusOr<Output> PermuteOut(const StoredTensor& x,
                                    std::span<const int64_t> dims);
  absl::StatusOr<Output> ReshapeOut(const StoredTensor& x,
                                    std::span<const int64_t> dims);
  // x's elements [start, start + length) along `axis`, shaped `out_dims`.
  absl::StatusOr<Output> SliceOut(const StoredTensor& x, int axis,
                                  int64_t start, int64_t length,
                                  std::vector<int64_t> out_dims);
  absl::StatusOr<Output> CatOut(std::span<const Value> xs, int64_t dim);
  absl::StatusOr<Output> CastOut(const StoredTensor& x, DType dtype);
  absl::Status InPlace(const OpSpec& op, const StoredTensor& self,
                       const StoredTensor* other);

  class UploadImpl;
  class ReaderImpl;

  // Shared-memory mappings alive, and transfers through them.
  std::atomic<int64_t> shm_regions{0};
  std::atomic<uint64_t> shm_uploads{0};
  std::atomic<uint64_t> shm_fetches{0};

 private:
  std::vector<std::unique_ptr<DeviceSlot>> slots_;
  HandleTable table_;  // after slots_: destroyed before them
  uint64_t max_tensor_bytes_ = 0;
  RuntimeLimits limits_;
  std::chrono::milliseconds session_ttl_{0};
  std::chrono::milliseconds min_session_ttl_{0};
  std::chrono::milliseconds max_session_ttl_{0};
  std::chrono::milliseconds reap_interval_{100};
  std::function<void(const ExpiredSessionInfo&)> on_session_expired_;
  absl::Mutex reaper_mu_;
  bool stopping_ ABSL_GUARDED_BY(reaper_mu_) = false;
  std::thread reaper_;  // last: started once everything else is set
};

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
  limits_.max_request_id_bytes = kMaxRequestIdBytes;
  const int n = options.host_devices;
  for (int i = 0; i < n; ++i) {
    CpuDeviceOptions cpu;
    cpu.name = n == 1 ? "cpu" : absl::StrCat("cpu:", i);
    cpu.index = i;
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

DeviceSlot& Runtime::Impl::SlotOf(const Device* device) const {
  for (const auto& slot : slots_) {
    if (slot->device.get() == device) return *slot;
  }
  // Every stored tensor's device is one of ours.
  std::abort();
}

absl::StatusOr<std::shared_ptr<Buffer>> Runtime::Impl::Allocate(
    DeviceSlot& slot, uint64_t bytes) {
  if (max_tensor_bytes_ != 0 && bytes > max_tensor_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a tensor of ", FormatBytes(bytes), " (", bytes,
        " bytes) exceeds the server's per-tensor limit of ",
        FormatBytes(max_tensor_bytes_), " (--max-tensor-bytes)"));
  }
  uint64_t held = slot.held.load();
  do {
    if (bytes > slot.budget || held > slot.budget - bytes) {
      const uint64_t left = held < slot.budget ? slot.budget - held : 0;
      slot.allocation_failures.fetch_add(1);
      return absl::ResourceExhaustedError(absl::StrCat(
          slot.device->name(), " out of memory: tried to allocate ",
          FormatBytes(bytes), " (", bytes, " bytes); tensord holds ",
          FormatBytes(held), " of a ", FormatBytes(slot.budget), " budget, ",
          FormatBytes(left), " left"));
    }
  } while (!slot.held.compare_exchange_weak(held, held + bytes));
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      slot.device->Allocate(static_cast<size_t>(bytes));
  if (!buffer.ok()) {
    slot.held.fetch_sub(bytes);
    slot.allocation_failures.fetch_add(1);
    return buffer.status();
  }
  DeviceSlot* s = &slot;
  return std::shared_ptr<Buffer>(buffer->release(), [s, bytes](Buffer* b) {
    delete b;
    s->held.fetch_sub(bytes);
  });
}

absl::StatusOr<TensorMeta> Runtime::Impl::Register(
    std::string_view session, DeviceSlot& slot, DType dtype, Shape shape,
    uint64_t nbytes, std::shared_ptr<Buffer> buffer, std::string_view tag) {
  auto tensor = std::make_shared<StoredTensor>();
  tensor->device = slot.device.get();
  tensor->dtype = dtype;
  tensor->shape = std::move(shape);
  tensor->nbytes = nbytes;
  tensor->buffer = std::move(buffer);
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

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::AllocateOutput(
    DeviceSlot& slot, DType dtype, Shape shape) {
  Output out;
  ASSIGN_OR_RETURN(out.nbytes, shape.ByteSize(dtype));
  ASSIGN_OR_RETURN(out.buffer, Allocate(slot, out.nbytes));
  out.shape = std::move(shape);
  out.dtype = dtype;
  return out;
}

absl::StatusOr<TensorRef> Runtime::Impl::AsDType(DeviceSlot& slot,
                                                 const StoredTensor& t,
                                                 DType dtype, Output& temp) {
  if (t.dtype == dtype) return RefOf(t);
  ASSIGN_OR_RETURN(temp, AllocateOutput(slot, dtype, t.shape));
  RETURN_IF_ERROR(slot.device->Cast(RefOf(t), temp.ref()));
  return temp.ref();
}

// --- Upload ------------------------------------------------------------------

// Copies through host memory (Upload::AppendFrom and Reader::ReadWith on a
// device whose memory is not host memory) go in pieces of this size: small
// enough that the extra pass stays in cache.
constexpr uint64_t kBounceBytes = uint64_t{1} << 20;

// What an open stream of a session holds (an upload's buffer, a reader's
// tensor), tied to the session (HandleTable::Bind): when the session ends
// the hold lets go of it at once, so a stalled stream keeps no memory past
// its session, and the stream's next use fails with the reason.
template <typename T>
class SessionHold final : public SessionBound {
 public:
  explicit SessionHold(std::shared_ptr<T> held) : held_(std::move(held)) {}

  void OnSessionEnded(const absl::Status& why) override {
    std::shared_ptr<T> dropped;  // freed after the lock
    absl::MutexLock lock(&mu_);
    ended_ = why;
    dropped = std::move(held_);
  }

  // Runs `use(T&)` under the hold's lock (the session cannot drop the
  // object meanwhile). The session's end status once it ended;
  // FAILED_PRECONDITION once taken.
  template <typename Use>
  absl::Status With(Use&& use) {
    absl::MutexLock lock(&mu_);
    if (!ended_.ok()) return ended_;
    if (held_ == nullptr) {
      return absl::FailedPreconditionError("the stream is already finished");
    }
    return use(*held_);
  }

  // OK while the session lives; its end status once it ended.
  absl::Status Alive() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

  // Takes the object out (the stream is done with the session).
  absl::StatusOr<std::shared_ptr<T>> Take() {
    absl::MutexLock lock(&mu_);
    if (!ended_.ok()) return ended_;
    if (held_ == nullptr) {
      return absl::FailedPreconditionError("the stream is already finished");
    }
    return std::move(held_);
  }

 private:
  absl::Mutex mu_;
  absl::Status ended_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<T> held_ ABSL_GUARDED_BY(mu_);
};

// Binds a new hold of `held` to the session.
template <typename T>
absl::StatusOr<std::shared_ptr<SessionHold<T>>> HoldFor(
    HandleTable& table, std::string_view session, std::shared_ptr<T> held) {
  auto hold = std::make_shared<SessionHold<T>>(std::move(held));
  RETURN_IF_ERROR(table.Bind(session, hold));
  return hold;
}

// Renews the session's lease for a message of a stream holding `hold`. Once
// the session has ended, the reason it ended (rather than "unknown
// session").
template <typename T>
absl::Status RenewFor(HandleTable& table, std::string_view session,
                      SessionHold<T>& hold) {
  RETURN_IF_ERROR(hold.Alive());
  absl::Status renewed = table.Renew(session).status();
  if (!renewed.ok()) {
    // Ended between the two lines: the session has dropped it from the
    // table and is about to tell the hold.
    RETURN_IF_ERROR(hold.Alive());
  }
  return renewed;
}

class Runtime::Impl::UploadImpl final : public Runtime::Upload {
 public:
  UploadImpl(Impl* runtime, std::string_view session, DeviceSlot* slot,
             DType dtype, Shape shape, uint64_t nbytes,
             std::shared_ptr<SessionHold<Buffer>> buffer, std::string_view tag)
      : runtime_(runtime),
        session_(session),
        slot_(slot),
        dtype_(dtype),
        shape_(std::move(shape)),
        nbytes_(nbytes),
        buffer_(std::move(buffer)),
        tag_(tag) {}

  absl::Status Append(std::span<const uint8_t> data) override {
    RETURN_IF_ERROR(CheckRoom(data.size()));
    return buffer_->With([&](Buffer& buffer) -> absl::Status {
      RETURN_IF_ERROR(CheckBoolBytes(data, received_));
      RETURN_IF_ERROR(slot_->device->CopyFromHost(data.data(), buffer,
                                                  received_, data.size()));
      received_ += data.size();
      return absl::OkStatus();
    });
  }

  absl::Status AppendFrom(uint64_t n, const Filler& fill) override {
    RETURN_IF_ERROR(CheckRoom(n));
    if (slot_->device->kind() == DeviceKind::kCpu) {
      return buffer_->With([&](Buffer& buffer) -> absl::Status {
        auto* at = static_cast<uint8_t*>(buffer.data()) + received_;
        const std::span<uint8_t> dst(at, static_cast<size_t>(n));
        RETURN_IF_ERROR(fill(dst, 0));
        // Checked where the bytes now lie: the source may still change.
        RETURN_IF_ERROR(CheckBoolBytes(dst, received_));
        received_ += n;
        return absl::OkStatus();
      });
    }
    // Piece by piece; a failed piece takes back the ones before it, so a
    // failed call appends nothing on every device (as on the CPU).
    const uint64_t start = received_;
    std::vector<uint8_t> bounce(std::min<uint64_t>(n, kBounceBytes));
    for (uint64_t done = 0; done < n; done += bounce.size()) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(bounce.size(), n - done));
      absl::Status status = fill({bounce.data(), k}, done);
      if (status.ok()) status = Append({bounce.data(), k});
      if (!status.ok()) {
        received_ = start;
        return status;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<TensorMeta> Finish() override {
    RETURN_IF_ERROR(Renew());
    if (received_ != nbytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("upload incomplete: received ", received_, " of ",
                       nbytes_, " bytes for shape ", shape_.ToString(),
                       " of dtype ", ToAbsl(DTypeName(dtype_))));
    }
    ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, buffer_->Take());
    return runtime_->Register(session_, *slot_, dtype_, shape_, nbytes_,
                              std::move(buffer), tag_);
  }

  uint64_t expected_bytes() const override { return nbytes_; }
  uint64_t received_bytes() const override { return received_; }

 private:
  // Each piece of the upload renews the session's lease.
  absl::Status Renew() {
    return RenewFor(runtime_->table(), session_, *buffer_);
  }

  // OK when `n` more bytes fit (renewing the lease); the errors of Append
  // otherwise.
  absl::Status CheckRoom(uint64_t n) {
    RETURN_IF_ERROR(Renew());
    if (n > nbytes_ - received_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "upload overflows the tensor: ", n, " more bytes after ", received_,
          " of ", nbytes_, " (shape ", shape_.ToString(), " of dtype ",
          ToAbsl(DTypeName(dtype_)), ")"));
    }
    return absl::OkStatus();
  }

  // BOOL elements are one byte, 0 or 1 (tensord.proto); `at` is the bytes'
  // offset in the tensor.
  absl::Status CheckBoolBytes(std::span<const uint8_t> bytes,
                              uint64_t at) const {
    if (dtype_ != DType::kBool) return absl::OkStatus();
    return CheckBoolData(bytes, at);
  }

  Impl* const runtime_;  // borrowed: the Runtime outlives its uploads
  const std::string session_;
  DeviceSlot* const slot_;
  const DType dtype_;
  const Shape shape_;
  const uint64_t nbytes_;
  const std::shared_ptr<SessionHold<Buffer>> buffer_;
  const std::string tag_;
  uint64_t received_ = 0;
};

// --- Reader ------------------------------------------------------------------

class Runtime::Impl::ReaderImpl final : public Runtime::Reader {
 public:
  ReaderImpl(Impl* runtime, std::string_view session, TensorMeta meta,
             std::shared_ptr<SessionHold<const StoredTensor>> tensor,
             uint64_t nbytes)
      : runtime_(runtime),
        session_(session),
        meta_(std::move(meta)),
        tensor_(std::move(tensor)),
        nbytes_(nbytes) {}

  const TensorMeta& meta() const override { return meta_; }

  absl::Status Read(uint64_t offset, std::span<uint8_t> dst) override {
    RETURN_IF_ERROR(Begin(offset, dst.size()));
    if (dst.empty()) return absl::OkStatus();
    return tensor_->With([&](const StoredTensor& t) {
      return t.device->CopyToHost(*t.buffer, offset, dst.data(), dst.size());
    });
  }

  absl::Status ReadWith(uint64_t offset, uint64_t n,
                        const Consumer& consume) override {
    RETURN_IF_ERROR(Begin(offset, n));
    bool on_host = false;
    RETURN_IF_ERROR(tensor_->With([&](const StoredTensor& t) -> absl::Status {
      on_host = t.device->kind() == DeviceKind::kCpu;
      if (!on_host) return absl::OkStatus();
      const auto* at = static_cast<const uint8_t*>(t.buffer->data()) + offset;
      return consume({at, static_cast<size_t>(n)}, 0);
    }));
    if (on_host) return absl::OkStatus();
    std::vector<uint8_t> bounce(std::min<uint64_t>(n, kBounceBytes));
    for (uint64_t done = 0; done < n; done += bounce.size()) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(bounce.size(), n - done));
      RETURN_IF_ERROR(Read(offset + done, {bounce.data(), k}));
      RETURN_IF_ERROR(consume({bounce.data(), k}, done));
    }
    return absl::OkStatus();
  }

 private:
  // Renews the session's lease (each read is a message of the stream) and
  // checks that [offset, offset + n) lies in the tensor (OUT_OF_RANGE).
  absl::Status Begin(uint64_t offset, uint64_t n) {
    RETURN_IF_ERROR(RenewFor(runtime_->table(), session_, *tensor_));
    if (offset > nbytes_ || n > nbytes_ - offset) {
      return absl::OutOfRangeError(
          absl::StrCat("read of ", n, " bytes at offset ", offset,
                       " is past the end of tensor ", meta_.handle, " (",
                       nbytes_, " bytes)"));
    }
    return absl::OkStatus();
  }

  Impl* const runtime_;  // borrowed: the Runtime outlives its readers
  const std::string session_;
  const TensorMeta meta_;
  // Keeps the memory alive after a release of the handle, until the
  // session ends.
  const std::shared_ptr<SessionHold<const StoredTensor>> tensor_;
  const uint64_t nbytes_;
};

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
  ASSIGN_OR_RETURN(lease.id, impl_->table().OpenSession(client_name, lease.ttl));
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
    for (const HandleEntry& e : s.entries) out.emplace_back(s.id_prefix, MetaOf(e));
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
    info.age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      now - s.created)
                      .count();
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<TensorMeta> Runtime::CreateFromData(
    std::string_view session, std::string_view device, DType dtype,
    std::span<const int64_t> dims, std::span<const uint8_t> data,
    std::string_view tag) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
  RETURN_IF_ERROR(CheckTag(tag));
  ASSIGN_OR_RETURN(DeviceSlot * slot, impl_->FindSlot(device));
  RETURN_IF_ERROR(ValidateDType(dtype));
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
  ASSIGN_OR_RETURN(uint64_t nbytes, shape.ByteSize(dtype));
  if (data.size() != nbytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data is ", data.size(), " bytes but shape ", shape.ToString(),
        " of dtype ", ToAbsl(DTypeName(dtype)), " needs ", nbytes, " bytes"));
  }
  if (dtype == DType::kBool) RETURN_IF_ERROR(CheckBoolData(data, 0));
  RETURN_IF_ERROR(impl_->table().Admit(session, nbytes));
  ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                   impl_->Allocate(*slot, nbytes));
  RETURN_IF_ERROR(slot->device->CopyFromHost(data.data(), *buffer, 0, nbytes));
  return impl_->Register(session, *slot, dtype, std::move(shape), nbytes,
                         std::move(buffer), tag);
}

absl::StatusOr<uint64_t> Runtime::RegisterSharedMemory(
    std::string_view session, std::string_view name, uint64_t size,
    std::string_view cookie) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
  ASSIGN_OR_RETURN(
      std::shared_ptr<SharedMemoryMapping> mapping,
      SharedMemoryMapping::Open(name, size, cookie, &impl_->shm_regions));
  return impl_->table().AddRegion(session, std::move(mapping));
}

absl::Status Runtime::UnregisterSharedMemory(std::string_view session,
                                             uint64_t region) {
  return impl_->table().RemoveRegion(session, region);
}

absl::StatusOr<TensorMeta> Runtime::CreateFromSharedMemory(
    std::string_view session, uint64_t region, uint64_t offset,
    std::string_view device, DType dtype, std::span<const int64_t> dims,
    std::string_view tag) {
  // The mapping stays alive for the copy even if unregistered meanwhile.
  ASSIGN_OR_RETURN(std::shared_ptr<SharedMemoryMapping> mapping,
                   impl_->table().FindRegion(session, region));
  RETURN_IF_ERROR(ValidateDType(dtype));
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
  ASSIGN_OR_RETURN(uint64_t nbytes, shape.ByteSize(dtype));
  // The copy out of the client's mapping must be guarded
  // (core/shared_memory.h): straight into the tensor on the CPU device, into
  // a cache-sized buffer then onto the device elsewhere (a device copy
  // cannot be guarded).
  RETURN_IF_ERROR(mapping->CheckRange(offset, nbytes));
  ASSIGN_OR_RETURN(std::unique_ptr<Upload> upload,
                   BeginUpload(session, device, dtype, dims, tag));
  RETURN_IF_ERROR(upload->AppendFrom(
      nbytes, [&](std::span<uint8_t> dst, uint64_t at) {
        return mapping->CopyOut(offset + at, dst);
      }));
  ASSIGN_OR_RETURN(TensorMeta meta, upload->Finish());
  impl_->shm_uploads.fetch_add(1);
  return meta;
}

absl::StatusOr<TensorMeta> Runtime::FetchToSharedMemory(
    std::string_view session, uint64_t handle, uint64_t region,
    uint64_t offset) {
  ASSIGN_OR_RETURN(std::shared_ptr<SharedMemoryMapping> mapping,
                   impl_->table().FindRegion(session, region));
  ASSIGN_OR_RETURN(std::unique_ptr<Reader> reader, OpenReader(session, handle));
  const uint64_t nbytes = reader->meta().nbytes;
  RETURN_IF_ERROR(mapping->CheckRange(offset, nbytes));
  RETURN_IF_ERROR(reader->ReadWith(
      0, nbytes, [&](std::span<const uint8_t> src, uint64_t at) {
        return mapping->CopyIn(offset + at, src);
      }));
  impl_->shm_fetches.fetch_add(1);
  return reader->meta();
}

Runtime::SharedMemoryStats Runtime::shared_memory_stats() const {
  SharedMemoryStats stats;
  stats.regions = static_cast<uint64_t>(
      std::max<int64_t>(0, impl_->shm_regions.load()));
  stats.uploads = impl_->shm_uploads.load();
  stats.fetches = impl_->shm_fetches.load();
  return stats;
}

absl::StatusOr<TensorMeta> Runtime::CreateFilled(
    std::string_view session, std::string_view device, DType dtype,
    std::span<const int64_t> dims, const FillSpec& fill, double arange_end,
    std::string_view tag) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
  RETURN_IF_ERROR(CheckTag(tag));
  ASSIGN_OR_RETURN(DeviceSlot * slot, impl_->FindSlot(device));
  RETURN_IF_ERROR(ValidateDType(dtype));
  const bool shape_from_range =
      fill.kind == FillSpec::Kind::kArange && dims.empty();
  int64_t arange_length = 0;
  RETURN_IF_ERROR(
      ValidateFill(fill, shape_from_range, arange_end, &arange_length));
  const int64_t range_dims[] = {arange_length};
  ASSIGN_OR_RETURN(
      Shape shape,
      Shape::Make(shape_from_range ? std::span<const int64_t>(range_dims)
                                   : dims));
  RETURN_IF_ERROR(slot->device->Supports(
      IsRandom(fill.kind) ? OpKind::kRandomFill : OpKind::kFill, dtype));
  ASSIGN_OR_RETURN(uint64_t nbytes, shape.ByteSize(dtype));
  RETURN_IF_ERROR(impl_->table().Admit(session, nbytes));
  ASSIGN_OR_RETURN(Impl::Output out,
                   impl_->AllocateOutput(*slot, dtype, std::move(shape)));
  RETURN_IF_ERROR(slot->device->Fill(fill, out.ref()));
  return impl_->Register(session, *slot, dtype, std::move(out.shape),
                         out.nbytes, std::move(out.buffer), tag);
}

absl::StatusOr<std::unique_ptr<Runtime::Upload>> Runtime::BeginUpload(
    std::string_view session, std::string_view device, DType dtype,
    std::span<const int64_t> dims, std::string_view tag) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
  RETURN_IF_ERROR(CheckTag(tag));
  ASSIGN_OR_RETURN(DeviceSlot * slot, impl_->FindSlot(device));
  RETURN_IF_ERROR(ValidateDType(dtype));
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
  ASSIGN_OR_RETURN(uint64_t nbytes, shape.ByteSize(dtype));
  RETURN_IF_ERROR(impl_->table().Admit(session, nbytes));
  ASSIGN_OR_RETURN(Impl::Output out,
                   impl_->AllocateOutput(*slot, dtype, std::move(shape)));
  ASSIGN_OR_RETURN(auto buffer,
                   HoldFor(impl_->table(), session, std::move(out.buffer)));
  return std::make_unique<Impl::UploadImpl>(impl_.get(), session, slot, dtype,
                                            std::move(out.shape), out.nbytes,
                                            std::move(buffer), tag);
}

absl::StatusOr<TensorMeta> Runtime::To(std::string_view session,
                                       uint64_t handle, std::string_view device,
                                       bool copy) {
  ASSIGN_OR_RETURN(HandleEntry src, impl_->table().Lookup(session, handle));
  if (device.empty()) {
    return absl::InvalidArgumentError(
        "To needs a target device ('cpu', 'cpu:<index>', 'cuda' or "
        "'cuda:<index>'); an empty name names none");
  }
  ASSIGN_OR_RETURN(DeviceSlot * dst_slot, impl_->FindSlot(device));
  const StoredTensor& t = *src.tensor;
  if (dst_slot->device.get() == t.device && !copy) return MetaOf(src);
  RETURN_IF_ERROR(impl_->table().Admit(session, t.nbytes));
  ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                   impl_->Allocate(*dst_slot, t.nbytes));
  RETURN_IF_ERROR(dst_slot->device->CopyFromDevice(*t.device, *t.buffer,
                                                   *buffer, t.nbytes));
  return impl_->Register(session, *dst_slot, t.dtype, t.shape, t.nbytes,
                         std::move(buffer), src.tag);
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::MatMulOut(
    const StoredTensor& a, const StoredTensor& b) {
  DeviceSlot& slot = SlotOf(a.device);
  Device& device = *a.device;
  const std::string shapes =
      absl::StrCat(a.shape.ToString(), " and ", b.shape.ToString());

  if (a.shape.rank() == 0 || b.shape.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "both arguments to matmul need to be at least 1D, but they are ",
        a.shape.rank(), "D and ", b.shape.rank(), "D (shapes ", shapes, ")"));
  }
  if (a.dtype != b.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected both operands to have the same dtype, but got ",
                     ToAbsl(DTypeName(a.dtype)), " and ",
                     ToAbsl(DTypeName(b.dtype)), " (shapes ", shapes, ")"));
  }
  const DType dtype = a.dtype;

  // torch.matmul: a 1-D lhs is a row [1, k], a 1-D rhs a column [k, 1]; the
  // added dim is dropped from the result. Leading dims are batch dims and
  // broadcast.
  const std::vector<int64_t>& ad = a.shape.dims();
  const std::vector<int64_t>& bd = b.shape.dims();
  const bool a_vector = ad.size() == 1, b_vector = bd.size() == 1;
  const int64_t m = a_vector ? 1 : ad[ad.size() - 2];
  const int64_t k = ad.back();
  const int64_t kb = b_vector ? bd[0] : bd[bd.size() - 2];
  const int64_t n = b_vector ? 1 : bd.back();
  if (k != kb) {
    return absl::InvalidArgumentError(absl::StrCat("matmul: shapes ", shapes,
                                                   " cannot be multiplied (", k,
                                                   " != ", kb, ")"));
  }
  const std::span<const int64_t> a_batch_dims(ad.data(),
                                              a_vector ? 0 : ad.size() - 2);
  const std::span<const int64_t> b_batch_dims(bd.data(),
                                              b_vector ? 0 : bd.size() - 2);
  ASSIGN_OR_RETURN(Shape a_batch, Shape::Make(a_batch_dims));
  ASSIGN_OR_RETURN(Shape b_batch, Shape::Make(b_batch_dims));
  absl::StatusOr<Shape> batch = BroadcastShapes(a_batch, b_batch);
  if (!batch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul: shapes ", shapes, " cannot be multiplied: batch dimensions ",
        batch.status().message()));
  }
  std::vector<int64_t> out_dims = batch->dims();
  if (!a_vector) out_dims.push_back(m);
  if (!b_vector) out_dims.push_back(n);
  ASSIGN_OR_RETURN(Shape out_shape, Shape::Make(out_dims));
  RETURN_IF_ERROR(device.Supports(OpKind::kMatMul, dtype));

  ASSIGN_OR_RETURN(Impl::Output out,
                   AllocateOutput(slot, dtype, std::move(out_shape)));
  const int64_t batch_count = batch->NumElements();
  if (out.shape.NumElements() == 0) {
    // Nothing to compute.
  } else if (k == 0) {
    // Empty sums: zeros, without asking BLAS about 0-sized leading dims.
    RETURN_IF_ERROR(device.Fill(FillSpec{}, out.ref()));
  } else {
    // An operand whose batch part is neither the full batch nor a single
    // matrix cannot be read with one batch stride: expand it into a
    // temporary by multiplying with ones of shape batch + [1, 1] (exact).
    Impl::Output ones, a_expanded, b_expanded;
    auto operand = [&](const StoredTensor& t, const Shape& t_batch,
                       int64_t rows, int64_t cols, Impl::Output& expanded,
                       int64_t* stride) -> absl::StatusOr<TensorRef> {
      if (t_batch.NumElements() == batch_count) {
        *stride = rows * cols;
        return RefOf(t);
      }
      if (t_batch.NumElements() == 1) {
        *stride = 0;
        return RefOf(t);
      }
      std::vector<int64_t> dims = batch->dims();
      if (ones.buffer == nullptr) {
        dims.insert(dims.end(), {1, 1});
        ASSIGN_OR_RETURN(Shape ones_shape, Shape::Make(dims));
        ASSIGN_OR_RETURN(ones, AllocateOutput(slot, dtype, ones_shape));
        FillSpec fill;
        fill.kind = FillSpec::Kind::kOnes;
        RETURN_IF_ERROR(device.Fill(fill, ones.ref()));
        dims = batch->dims();
      }
      dims.insert(dims.end(), {rows, cols});
      ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
      ASSIGN_OR_RETURN(expanded, AllocateOutput(slot, dtype, shape));
      RETURN_IF_ERROR(
          device.Binary(BinaryOp::kMul, RefOf(t), ones.ref(), expanded.ref()));
      *stride = rows * cols;
      return expanded.ref();
    };
    Device::MatMulDims dims;
    dims.batch = batch_count;
    dims.m = m;
    dims.n = n;
    dims.k = k;
    dims.out_batch_stride = m * n;
    ASSIGN_OR_RETURN(TensorRef a_ref, operand(a, a_batch, m, k, a_expanded,
                                              &dims.a_batch_stride));
    ASSIGN_OR_RETURN(TensorRef b_ref, operand(b, b_batch, k, n, b_expanded,
                                              &dims.b_batch_stride));
    RETURN_IF_ERROR(device.MatMul(dims, a_ref, b_ref, out.ref()));
  }
  return out;
}

// --- Ops ---------------------------------------------------------------------

Runtime::Impl::TensorPtr Runtime::Impl::Stored(DeviceSlot& slot,
                                               Output out) const {
  auto t = std::make_shared<StoredTensor>();
  t->device = slot.device.get();
  t->dtype = out.dtype;
  t->shape = std::move(out.shape);
  t->nbytes = out.nbytes;
  t->buffer = std::move(out.buffer);
  return t;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::ScalarTensor(
    DeviceSlot& slot, const Scalar& s, DType dtype) {
  // The number goes to the device in its own type (int64 or float64) and
  // is converted there by Cast, whose conversions are defined for every
  // value (saturating, NaN -> 0).
  const DType natural = s.is_integral ? DType::kInt64 : DType::kFloat64;
  ASSIGN_OR_RETURN(Output value, AllocateOutput(slot, natural, Shape()));
  if (s.is_integral) {
    RETURN_IF_ERROR(slot.device->CopyFromHost(&s.i, *value.buffer, 0, 8));
  } else {
    RETURN_IF_ERROR(slot.device->CopyFromHost(&s.f, *value.buffer, 0, 8));
  }
  if (natural == dtype) return value;
  RETURN_IF_ERROR(slot.device->Supports(OpKind::kCast, dtype));
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, Shape()));
  RETURN_IF_ERROR(slot.device->Cast(value.ref(), out.ref()));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::BinaryOut(
    BinaryOp op, const StoredTensor& a, const StoredTensor* b,
    const Scalar* scalar, bool scalar_first, const StoredTensor* into) {
  DeviceSlot& slot = SlotOf(a.device);
  Device& device = *a.device;
  Shape out_shape = a.shape;
  DType dtype;
  if (b != nullptr) {
    ASSIGN_OR_RETURN(out_shape, BroadcastShapes(a.shape, b->shape));
    dtype = ResultType(a.dtype, a.shape.rank() == 0, b->dtype,
                       b->shape.rank() == 0);
  } else {
    dtype = ScalarResultType(a.dtype, *scalar);
  }
  // True division: integer and bool quotients are float32, PyTorch's default
  // floating dtype.
  if (op == BinaryOp::kDiv && !IsFloating(dtype)) dtype = DType::kFloat32;
  const DType out_dtype = IsComparison(op) ? DType::kBool : dtype;
  RETURN_IF_ERROR(CheckBinaryOpDType(op, dtype));
  RETURN_IF_ERROR(device.Supports(OpKind::kBinary, dtype));
  for (DType operand : {a.dtype, b != nullptr ? b->dtype : dtype}) {
    if (operand != dtype) {
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, operand));
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, dtype));
    }
  }
  if (into != nullptr) {
    if (out_shape != into->shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output with shape ", into->shape.ToString(),
          " doesn't match the broadcast shape ", out_shape.ToString()));
    }
    if (!CanCast(out_dtype, into->dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "result type ", ToAbsl(DTypeName(out_dtype)),
          " can't be cast to the desired output type ",
          ToAbsl(DTypeName(into->dtype))));
    }
  }

  Output a_temp, b_temp;  // promotion casts, freed on return
  ASSIGN_OR_RETURN(TensorRef a_ref, AsDType(slot, a, dtype, a_temp));
  TensorRef b_ref;
  if (b != nullptr) {
    ASSIGN_OR_RETURN(b_ref, AsDType(slot, *b, dtype, b_temp));
  } else {
    ASSIGN_OR_RETURN(b_temp, ScalarTensor(slot, *scalar, dtype));
    b_ref = b_temp.ref();
  }
  if (scalar_first) std::swap(a_ref, b_ref);
  if (into != nullptr && out_dtype == into->dtype) {
    RETURN_IF_ERROR(device.Binary(op, a_ref, b_ref, RefOf(*into)));
    return Output{};
  }
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, out_dtype, std::move(out_shape)));
  RETURN_IF_ERROR(device.Binary(op, a_ref, b_ref, out.ref()));
  if (into != nullptr) {
    RETURN_IF_ERROR(device.Supports(OpKind::kCast, into->dtype));
    RETURN_IF_ERROR(device.Cast(out.ref(), RefOf(*into)));
    return Output{};
  }
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::UnaryOut(
    UnaryOp op, const StoredTensor& x) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  RETURN_IF_ERROR(CheckUnaryOpDType(op, x.dtype));
  const DType dtype =
      IsFloatingUnary(op) && !IsFloating(x.dtype) ? DType::kFloat32 : x.dtype;
  RETURN_IF_ERROR(device.Supports(OpKind::kUnary, dtype));
  if (dtype != x.dtype) RETURN_IF_ERROR(device.Supports(OpKind::kCast, x.dtype));
  Output temp;
  ASSIGN_OR_RETURN(TensorRef in, AsDType(slot, x, dtype, temp));
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, x.shape));
  RETURN_IF_ERROR(device.Unary(op, in, out.ref()));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::LinearOut(
    const StoredTensor& x, const StoredTensor& w, const StoredTensor* bias) {
  if (w.shape.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linear: weight must be 2-D [out_features, in_features], but has "
        "shape ",
        w.shape.ToString()));
  }
  if (x.shape.rank() == 0 || x.shape.dim(x.shape.rank() - 1) != w.shape.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linear: input shape ", x.shape.ToString(), " and weight shape ",
        w.shape.ToString(),
        " do not match: the input's last dim must equal in_features (",
        w.shape.dim(1), ")"));
  }
  DeviceSlot& slot = SlotOf(x.device);
  const int64_t perm[] = {1, 0};
  ASSIGN_OR_RETURN(Output wt, PermuteOut(w, perm));
  const TensorPtr wt_stored = Stored(slot, std::move(wt));
  ASSIGN_OR_RETURN(Output y, MatMulOut(x, *wt_stored));
  if (bias == nullptr) return y;
  const TensorPtr y_stored = Stored(slot, std::move(y));
  return BinaryOut(BinaryOp::kAdd, *y_stored, bias, nullptr, false, nullptr);
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::ReduceOut(
    ReduceOp op, const StoredTensor& x, std::optional<int64_t> dim,
    bool keepdim) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  const std::string name(ReduceOpName(op));
  DType dtype = x.dtype;
  if (op == ReduceOp::kSum && !IsFloating(dtype)) dtype = DType::kInt64;
  if (op == ReduceOp::kMean && !IsFloating(dtype)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mean(): could not infer output dtype. Input dtype must be either a "
        "floating point or complex dtype. Got: ",
        ToAbsl(DTypeName(dtype))));
  }
  if (op == ReduceOp::kNorm && !IsFloating(dtype)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "norm(): expected a floating point tensor as input. Got: ",
        ToAbsl(DTypeName(dtype))));
  }
  RETURN_IF_ERROR(device.Supports(OpKind::kReduce, dtype));
  if (dtype != x.dtype) RETURN_IF_ERROR(device.Supports(OpKind::kCast, x.dtype));

  const int rank = x.shape.rank();
  Device::ReduceDims d;
  std::vector<int64_t> out_dims;
  if (!dim.has_value()) {
    d.n = x.shape.NumElements();
    if (keepdim) out_dims.assign(rank, 1);
  } else {
    ASSIGN_OR_RETURN(int axis, WrapDim(*dim, rank));
    if (rank > 0) {
      d.outer = Product(x.shape, 0, axis);
      d.n = x.shape.dim(axis);
      d.inner = Product(x.shape, axis + 1, rank);
      out_dims = x.shape.dims();
      if (keepdim) {
        out_dims[axis] = 1;
      } else {
        out_dims.erase(out_dims.begin() + axis);
      }
    }
  }
  const bool needs_element = op == ReduceOp::kMax || op == ReduceOp::kMin ||
                             op == ReduceOp::kArgmax;
  if (needs_element && d.n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, "(): cannot reduce over an empty dimension (input shape ",
        x.shape.ToString(), ")"));
  }
  ASSIGN_OR_RETURN(Shape out_shape, Shape::Make(out_dims));
  Output temp;
  ASSIGN_OR_RETURN(TensorRef in, AsDType(slot, x, dtype, temp));
  ASSIGN_OR_RETURN(
      Output out,
      AllocateOutput(slot, op == ReduceOp::kArgmax ? DType::kInt64 : dtype,
                     std::move(out_shape)));
  RETURN_IF_ERROR(device.Reduce(op, d, in, out.ref()));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::PermuteOut(
    const StoredTensor& x, std::span<const int64_t> dims) {
  const int rank = x.shape.rank();
  if (static_cast<int>(dims.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "permute: number of dims don't match: the order has ", dims.size(),
        " dims but the input has shape ", x.shape.ToString()));
  }
  std::vector<int> perm;
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> out_dims;
  for (int64_t d : dims) {
    ASSIGN_OR_RETURN(int axis, WrapDim(d, rank));
    if (seen[axis]) {
      return absl::InvalidArgumentError(
          absl::StrCat("permute: dim ", axis, " appears more than once in [",
                       absl::StrJoin(dims, ", "), "]"));
    }
    seen[axis] = true;
    perm.push_back(axis);
    out_dims.push_back(x.shape.dim(axis));
  }
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(out_dims));
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, x.dtype, std::move(shape)));
  RETURN_IF_ERROR(x.device->Permute(RefOf(x), perm, out.ref()));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::ReshapeOut(
    const StoredTensor& x, std::span<const int64_t> dims) {
  const int64_t numel = x.shape.NumElements();
  auto invalid = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("shape '[", absl::StrJoin(dims, ", "),
                     "]' is invalid for input of size ", numel, " (shape ",
                     x.shape.ToString(), ")"));
  };
  std::vector<int64_t> out_dims(dims.begin(), dims.end());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out_dims.size(); ++i) {
    if (out_dims[i] == -1) {
      if (infer >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reshape: only one dimension can be inferred in [",
            absl::StrJoin(dims, ", "), "]"));
      }
      infer = static_cast<int>(i);
    } else if (out_dims[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshape: invalid shape dimension ", out_dims[i], " in [",
          absl::StrJoin(dims, ", "), "]"));
    } else if (__builtin_mul_overflow(known, out_dims[i], &known)) {
      return invalid();
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) return invalid();
    out_dims[infer] = numel / known;
  }
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(out_dims));
  if (shape.NumElements() != numel) return invalid();
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, x.dtype, std::move(shape)));
  Device::BlockCopy copy;
  copy.row_bytes = static_cast<int64_t>(x.nbytes);
  RETURN_IF_ERROR(x.device->CopyBlocks(copy, *x.buffer, *out.buffer));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::SliceOut(
    const StoredTensor& x, int axis, int64_t start, int64_t length,
    std::vector<int64_t> out_dims) {
  const int64_t es = static_cast<int64_t>(DTypeSize(x.dtype));
  const int64_t inner = Product(x.shape, axis + 1, x.shape.rank()) * es;
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(out_dims));
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, x.dtype, std::move(shape)));
  Device::BlockCopy copy;
  copy.rows = Product(x.shape, 0, axis);
  copy.row_bytes = length * inner;
  copy.src_offset = start * inner;
  copy.src_stride = x.shape.dim(axis) * inner;
  copy.dst_stride = copy.row_bytes;
  RETURN_IF_ERROR(x.device->CopyBlocks(copy, *x.buffer, *out.buffer));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::CatOut(
    std::span<const Value> xs, int64_t dim) {
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].tensor->shape.rank() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cat: zero-dimensional tensor (at position ", i,
          ") cannot be concatenated"));
    }
  }
  const StoredTensor& first = *xs[0].tensor;
  const int rank = first.shape.rank();
  ASSIGN_OR_RETURN(int axis, WrapDim(dim, rank));
  DType dtype = first.dtype;
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const StoredTensor& t = *xs[i].tensor;
    if (t.shape.rank() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cat: tensors must have the same number of dimensions: got shapes ",
          first.shape.ToString(), " and ", t.shape.ToString(),
          " (tensor number ", i, ")"));
    }
    for (int d = 0; d < rank; ++d) {
      if (d != axis && t.shape.dim(d) != first.shape.dim(d)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cat: sizes of tensors must match except in dimension ", axis,
            ": shapes ", first.shape.ToString(), " and ", t.shape.ToString(),
            " (tensor number ", i, ") differ in dimension ", d));
      }
    }
    dtype = PromoteTypes(dtype, t.dtype);
    total += t.shape.dim(axis);
  }
  Device& device = *first.device;
  for (const Value& v : xs) {
    if (v.tensor->dtype != dtype) {
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, v.tensor->dtype));
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, dtype));
    }
  }
  std::vector<int64_t> out_dims = first.shape.dims();
  out_dims[axis] = total;
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(out_dims));
  DeviceSlot& slot = SlotOf(first.device);
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, std::move(shape)));
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  const int64_t inner = Product(first.shape, axis + 1, rank) * es;
  int64_t offset = 0;
  for (const Value& v : xs) {
    Output temp;
    ASSIGN_OR_RETURN(TensorRef ref, AsDType(slot, *v.tensor, dtype, temp));
    Device::BlockCopy copy;
    copy.rows = Product(first.shape, 0, axis);
    copy.row_bytes = ref.shape.dim(axis) * inner;
    copy.src_stride = copy.row_bytes;
    copy.dst_offset = offset * inner;
    copy.dst_stride = total * inner;
    RETURN_IF_ERROR(device.CopyBlocks(copy, *ref.buffer, *out.buffer));
    offset += ref.shape.dim(axis);
  }
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::CastOut(
    const StoredTensor& x, DType dtype) {
  RETURN_IF_ERROR(ValidateDType(dtype));
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, x.shape));
  if (dtype == x.dtype) {
    Device::BlockCopy copy;
    copy.row_bytes = static_cast<int64_t>(x.nbytes);
    RETURN_IF_ERROR(x.device->CopyBlocks(copy, *x.buffer, *out.buffer));
    return out;
  }
  RETURN_IF_ERROR(x.device->Supports(OpKind::kCast, x.dtype));
  RETURN_IF_ERROR(x.device->Supports(OpKind::kCast, dtype));
  RETURN_IF_ERROR(x.device->Cast(RefOf(x), out.ref()));
  return out;
}

absl::Status Runtime::Impl::InPlace(const OpSpec& op, const StoredTensor& self,
                                    const StoredTensor* other) {
  const Scalar* scalar = op.scalar.has_value() ? &*op.scalar : nullptr;
  BinaryOp bop = BinaryOp::kAdd;
  TensorPtr scaled;  // kAxpy: alpha * other
  switch (op.in_place) {
    case InPlaceOp::kAdd: bop = BinaryOp::kAdd; break;
    case InPlaceOp::kSub: bop = BinaryOp::kSub; break;
    case InPlaceOp::kMul: bop = BinaryOp::kMul; break;
    case InPlaceOp::kDiv: bop = BinaryOp::kDiv; break;
    case InPlaceOp::kAxpy: {
      if (other == nullptr) {
        return absl::InvalidArgumentError("axpy_ needs a tensor operand x");
      }
      if (!op.alpha.is_integral && !IsFloating(other->dtype)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "axpy_: for integral input tensors, alpha must not be a floating "
            "point number (got ",
            op.alpha.ToString(), ")"));
      }
      ASSIGN_OR_RETURN(Output t, BinaryOut(BinaryOp::kMul, *other, nullptr,
                                           &op.alpha, false, nullptr));
      scaled = Stored(SlotOf(other->device), std::move(t));
      other = scaled.get();
      break;
    }
  }
  return BinaryOut(bop, self, other, other == nullptr ? scalar : nullptr,
                   false, &self)
      .status();
}

absl::StatusOr<Runtime::Impl::Value> Runtime::Impl::Apply(
    const OpSpec& op, std::span<const Value> in) {
  const std::string name = OpName(op);
  auto arity = [&](size_t lo, size_t hi) -> absl::Status {
    if (in.size() >= lo && in.size() <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        name, " takes ", lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, " to ", hi),
        " tensor operand", hi == 1 ? "" : "s", ", got ", in.size()));
  };
  const bool with_scalar = op.scalar.has_value();
  switch (op.kind) {
    case OpSpec::Kind::kBinary:
    case OpSpec::Kind::kInPlace:
      RETURN_IF_ERROR(with_scalar && op.in_place != InPlaceOp::kAxpy
                          ? arity(1, 1)
                          : arity(2, 2));
      break;
    case OpSpec::Kind::kMatMul:
      RETURN_IF_ERROR(arity(2, 2));
      break;
    case OpSpec::Kind::kLinear:
      RETURN_IF_ERROR(arity(2, 3));
      break;
    case OpSpec::Kind::kCat:
      RETURN_IF_ERROR(arity(1, 1024));
      break;
    default:
      RETURN_IF_ERROR(arity(1, 1));
      break;
  }
  for (size_t i = 1; i < in.size(); ++i) {
    RETURN_IF_ERROR(SameDevice(*in[0].tensor, *in[i].tensor));
  }
  const StoredTensor& x = *in[0].tensor;
  const StoredTensor* second = in.size() > 1 ? in[1].tensor.get() : nullptr;
  absl::StatusOr<Output> out;
  switch (op.kind) {
    case OpSpec::Kind::kBinary:
      out = BinaryOut(op.binary, x, second,
                      with_scalar ? &*op.scalar : nullptr,
                      with_scalar && op.scalar_first, nullptr);
      break;
    case OpSpec::Kind::kUnary:
      out = UnaryOut(op.unary, x);
      break;
    case OpSpec::Kind::kMatMul:
      out = MatMulOut(x, *second);
      break;
    case OpSpec::Kind::kLinear:
      out = LinearOut(x, *second, in.size() > 2 ? in[2].tensor.get() : nullptr);
      break;
    case OpSpec::Kind::kReduce:
      out = ReduceOut(op.reduce, x, op.dim, op.keepdim);
      break;
    case OpSpec::Kind::kPermute:
      out = PermuteOut(x, op.dims);
      break;
    case OpSpec::Kind::kTranspose: {
      const int rank = x.shape.rank();
      ASSIGN_OR_RETURN(int d0, WrapDim(op.dim.value_or(0), rank));
      ASSIGN_OR_RETURN(int d1, WrapDim(op.dim1, rank));
      std::vector<int64_t> perm(rank);
      for (int i = 0; i < rank; ++i) perm[i] = i;
      if (rank > 0) std::swap(perm[d0], perm[d1]);
      out = PermuteOut(x, perm);
      break;
    }
    case OpSpec::Kind::kReshape:
      out = ReshapeOut(x, op.dims);
      break;
    case OpSpec::Kind::kNarrow:
    case OpSpec::Kind::kSelect: {
      const bool select = op.kind == OpSpec::Kind::kSelect;
      if (x.shape.rank() == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, "() cannot be applied to a 0-dim tensor."));
      }
      ASSIGN_OR_RETURN(int axis, WrapDim(op.dim.value_or(0), x.shape.rank()));
      const int64_t size = x.shape.dim(axis);
      int64_t start = op.start;
      if (start < 0) start += size;
      std::vector<int64_t> out_dims = x.shape.dims();
      if (select) {
        if (start < 0 || start >= size) {
          return absl::InvalidArgumentError(absl::StrCat(
              "select(): index ", op.start, " out of range for tensor of size ",
              x.shape.ToString(), " at dimension ", axis));
        }
        out_dims.erase(out_dims.begin() + axis);
        out = SliceOut(x, axis, start, 1, std::move(out_dims));
      } else {
        if (start < 0 || start > size || op.length < 0 ||
            op.length > size - start) {
          return absl::InvalidArgumentError(absl::StrCat(
              "narrow(): start ", op.start, " and length ", op.length,
              " are out of range for dimension ", axis, " of size ", size,
              " (shape ", x.shape.ToString(), ")"));
        }
        out_dims[axis] = op.length;
        out = SliceOut(x, axis, start, op.length, std::move(out_dims));
      }
      break;
    }
    case OpSpec::Kind::kCat:
      out = CatOut(in, op.dim.value_or(0));
      break;
    case OpSpec::Kind::kCast:
      out = CastOut(x, op.dtype);
      break;
    case OpSpec::Kind::kInPlace:
      RETURN_IF_ERROR(InPlace(op, x, second));
      return in[0];
  }
  if (!out.ok()) return out.status();
  return Value{Stored(SlotOf(x.device), std::move(*out)), std::nullopt};
}

absl::StatusOr<TensorMeta> Runtime::Run(std::string_view session,
                                        const OpSpec& op) {
  std::vector<Impl::Value> in;
  in.reserve(op.inputs.size());
  for (const Operand& operand : op.inputs) {
    if (operand.is_result) {
      return absl::InvalidArgumentError(
          "result_of operands name an earlier op of an Execute list; a "
          "single op takes handles only");
    }
    ASSIGN_OR_RETURN(HandleEntry entry,
                     impl_->table().Lookup(session, operand.handle));
    in.push_back(Impl::Value{entry.tensor, entry});
  }
  if (in.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " needs at least one tensor operand"));
  }
  ASSIGN_OR_RETURN(Impl::Value result, impl_->Apply(op, in));
  if (result.entry.has_value()) return MetaOf(*result.entry);
  const StoredTensor& t = *result.tensor;
  return impl_->Register(session, impl_->SlotOf(t.device), t.dtype, t.shape,
                         t.nbytes, t.buffer, "");
}

absl::StatusOr<std::vector<TensorMeta>> Runtime::Execute(
    std::string_view session, std::span<const OpSpec> ops,
    std::span<const uint32_t> keep, const std::function<bool()>& cancelled) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
  std::vector<bool> kept(ops.size(), false);
  for (uint32_t k : keep) {
    if (k >= ops.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("keep names op #", k, " but the list has ", ops.size(),
                       " ops"));
    }
    kept[k] = true;
  }
  // The last op reading each result, so that intermediates are freed as
  // soon as nothing reads them (a 1000-step list holds a step's worth).
  std::vector<int64_t> last_use(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    for (const Operand& operand : ops[i].inputs) {
      if (operand.is_result && operand.result_of < i) {
        last_use[operand.result_of] = static_cast<int64_t>(i);
      }
    }
  }
  std::vector<Impl::Value> values(ops.size());
  uint64_t kept_bytes = 0, kept_tensors = 0;  // new tensors to register
  for (size_t i = 0; i < ops.size(); ++i) {
    if (cancelled && cancelled()) {
      // `values` goes with the return: everything made so far is freed.
      return absl::CancelledError(absl::StrCat(
          "Execute cancelled by the client before op #", i, " of ",
          ops.size()));
    }
    const OpSpec& op = ops[i];
    std::vector<Impl::Value> in;
    in.reserve(op.inputs.size());
    absl::Status status;
    for (size_t j = 0; j < op.inputs.size() && status.ok(); ++j) {
      const Operand& operand = op.inputs[j];
      if (!operand.is_result) {
        absl::StatusOr<HandleEntry> entry =
            impl_->table().Lookup(session, operand.handle);
        if (entry.ok()) {
          in.push_back(Impl::Value{entry->tensor, *entry});
        } else {
          status = entry.status();
        }
      } else if (operand.result_of >= i) {
        status = absl::InvalidArgumentError(absl::StrCat(
            "operand ", j, " is the result of op #", operand.result_of,
            ", which is not an earlier op"));
      } else {
        in.push_back(values[operand.result_of]);
      }
    }
    if (status.ok() && in.empty()) {
      status = absl::InvalidArgumentError("the op has no tensor operand");
    }
    absl::StatusOr<Impl::Value> result =
        status.ok() ? impl_->Apply(op, in) : absl::StatusOr<Impl::Value>(status);
    // A result the caller keeps must fit the session's quotas along with
    // the kept results before it: checked here, so that the failure names
    // the op that made it.
    if (result.ok() && kept[i] && !result->entry.has_value()) {
      absl::Status admitted = impl_->table().Admit(
          session, kept_bytes + result->tensor->nbytes, kept_tensors + 1);
      if (admitted.ok()) {
        kept_bytes += result->tensor->nbytes;
        ++kept_tensors;
      } else {
        result = admitted;
      }
    }
    if (!result.ok()) {
      // At most kDescribed operands: a cat of a thousand tensors must not
      // make a message larger than a reply's metadata may be.
      constexpr size_t kDescribed = 8;
      std::vector<std::string> described;
      for (size_t j = 0; j < std::min(op.inputs.size(), kDescribed); ++j) {
        const Operand& operand = op.inputs[j];
        std::string d = operand.is_result
                            ? absl::StrCat("result of op #", operand.result_of)
                            : absl::StrCat("handle ", operand.handle);
        if (j < in.size()) absl::StrAppend(&d, " ", Describe(*in[j].tensor));
        described.push_back(std::move(d));
      }
      if (op.inputs.size() > kDescribed) {
        described.push_back(
            absl::StrCat("... ", op.inputs.size() - kDescribed, " more"));
      }
      if (op.scalar.has_value()) {
        described.push_back(absl::StrCat("scalar ", op.scalar->ToString()));
      }
      return absl::Status(
          result.status().code(),
          absl::StrCat("op #", i, " (", OpName(op), "; operands: ",
                       absl::StrJoin(described, ", "),
                       "): ", result.status().message()));
    }
    values[i] = std::move(*result);
    for (const Operand& operand : op.inputs) {
      if (operand.is_result && !kept[operand.result_of] &&
          last_use[operand.result_of] == static_cast<int64_t>(i)) {
        values[operand.result_of] = Impl::Value{};
      }
    }
    if (last_use[i] < 0 && !kept[i]) values[i] = Impl::Value{};
  }
  std::vector<TensorMeta> out;
  out.reserve(keep.size());
  std::map<uint32_t, TensorMeta> registered;
  for (uint32_t k : keep) {
    auto it = registered.find(k);
    if (it == registered.end()) {
      const Impl::Value& v = values[k];
      absl::StatusOr<TensorMeta> meta;
      if (v.entry.has_value()) {
        meta = GetTensor(session, v.entry->handle);
      } else {
        const StoredTensor& t = *v.tensor;
        meta = impl_->Register(session, impl_->SlotOf(t.device), t.dtype,
                               t.shape, t.nbytes, t.buffer, "");
      }
      if (!meta.ok()) {
        for (const auto& [index, m] : registered) {
          if (!values[index].entry.has_value()) {
            (void)Release(session, m.handle);
          }
        }
        // Admitted above, so only a concurrent call of the session gets
        // here; the message still names the op.
        return absl::Status(
            meta.status().code(),
            absl::StrCat("op #", k, " (", OpName(ops[k]),
                         "; keeping its result): ", meta.status().message()));
      }
      it = registered.emplace(k, *std::move(meta)).first;
    }
    out.push_back(it->second);
  }
  return out;
}

absl::StatusOr<TensorMeta> Runtime::Binary(std::string_view session,
                                           BinaryOp op, uint64_t lhs,
                                           uint64_t rhs) {
  OpSpec spec;
  spec.kind = OpSpec::Kind::kBinary;
  spec.binary = op;
  spec.inputs = {Operand::Handle(lhs), Operand::Handle(rhs)};
  return Run(session, spec);
}

absl::StatusOr<TensorMeta> Runtime::MatMul(std::string_view session,
                                           uint64_t lhs, uint64_t rhs) {
  OpSpec spec;
  spec.kind = OpSpec::Kind::kMatMul;
  spec.inputs = {Operand::Handle(lhs), Operand::Handle(rhs)};
  return Run(session, spec);
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

absl::Status Runtime::Release(std::string_view session, uint64_t handle) {
  ASSIGN_OR_RETURN(HandleEntry entry, impl_->table().Remove(session, handle));
  std::vector<HandleEntry> entries;
  entries.push_back(std::move(entry));
  impl_->Forget(std::move(entries));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Runtime::Reader>> Runtime::OpenReader(
    std::string_view session, uint64_t handle) {
  ASSIGN_OR_RETURN(HandleEntry entry, impl_->table().Lookup(session, handle));
  TensorMeta meta = MetaOf(entry);
  const uint64_t nbytes = entry.tensor->nbytes;
  ASSIGN_OR_RETURN(auto tensor,
                   HoldFor(impl_->table(), session, std::move(entry.tensor)));
  return std::make_unique<Impl::ReaderImpl>(
      impl_.get(), session, std::move(meta), std::move(tensor), nbytes);
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
