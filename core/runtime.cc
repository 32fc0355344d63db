#include "core/runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/absl_compat.h"
#include "core/cpu/cpu_device.h"
#include "core/handle_table.h"
#include "core/op_checks.h"
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

// "512.00 MiB"; "100 bytes" below 1 KiB.
std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " bytes");
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

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

}  // namespace

class Runtime::Impl {
 public:
  Impl() = default;
  // Sessions go first: their buffers give bytes back to the slots.
  ~Impl() { table_.CloseAll(); }

  absl::Status Init(RuntimeOptions options);

  std::vector<DeviceStatus> ListDevices() const;
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

  class UploadImpl;
  class ReaderImpl;

 private:
  std::vector<std::unique_ptr<DeviceSlot>> slots_;
  HandleTable table_;  // after slots_: destroyed before them
};

absl::Status Runtime::Impl::Init(RuntimeOptions options) {
  if (options.host_devices < 1 || options.host_devices > kMaxHostDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("host_devices is ", options.host_devices,
                     "; expected 1 to ", kMaxHostDevices));
  }
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
        "invalid device name '", ToAbsl(name),
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
      "device ", ToAbsl(name),
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

class Runtime::Impl::UploadImpl final : public Runtime::Upload {
 public:
  UploadImpl(Impl* runtime, std::string_view session, DeviceSlot* slot,
             DType dtype, Shape shape, uint64_t nbytes,
             std::shared_ptr<Buffer> buffer, std::string_view tag)
      : runtime_(runtime),
        session_(session),
        slot_(slot),
        dtype_(dtype),
        shape_(std::move(shape)),
        nbytes_(nbytes),
        buffer_(std::move(buffer)),
        tag_(tag) {}

  absl::Status Append(std::span<const uint8_t> data) override {
    if (buffer_ == nullptr) {
      return absl::FailedPreconditionError("upload is already finished");
    }
    if (data.size() > nbytes_ - received_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "upload overflows the tensor: ", data.size(), " more bytes after ",
          received_, " of ", nbytes_, " (shape ", shape_.ToString(),
          " of dtype ", ToAbsl(DTypeName(dtype_)), ")"));
    }
    RETURN_IF_ERROR(slot_->device->CopyFromHost(data.data(), *buffer_,
                                                received_, data.size()));
    received_ += data.size();
    return absl::OkStatus();
  }

  absl::StatusOr<TensorMeta> Finish() override {
    if (buffer_ == nullptr) {
      return absl::FailedPreconditionError("upload is already finished");
    }
    if (received_ != nbytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("upload incomplete: received ", received_, " of ",
                       nbytes_, " bytes for shape ", shape_.ToString(),
                       " of dtype ", ToAbsl(DTypeName(dtype_))));
    }
    return runtime_->Register(session_, *slot_, dtype_, shape_, nbytes_,
                              std::move(buffer_), tag_);
  }

  uint64_t expected_bytes() const override { return nbytes_; }
  uint64_t received_bytes() const override { return received_; }

 private:
  Impl* const runtime_;  // borrowed: the Runtime outlives its uploads
  const std::string session_;
  DeviceSlot* const slot_;
  const DType dtype_;
  const Shape shape_;
  const uint64_t nbytes_;
  std::shared_ptr<Buffer> buffer_;  // null once finished
  const std::string tag_;
  uint64_t received_ = 0;
};

// --- Reader ------------------------------------------------------------------

class Runtime::Impl::ReaderImpl final : public Runtime::Reader {
 public:
  ReaderImpl(TensorMeta meta, std::shared_ptr<const StoredTensor> tensor)
      : meta_(std::move(meta)), tensor_(std::move(tensor)) {}

  const TensorMeta& meta() const override { return meta_; }

  absl::Status Read(uint64_t offset, std::span<uint8_t> dst) override {
    if (offset > tensor_->nbytes || dst.size() > tensor_->nbytes - offset) {
      return absl::OutOfRangeError(
          absl::StrCat("read of ", dst.size(), " bytes at offset ", offset,
                       " is past the end of tensor ", meta_.handle, " (",
                       tensor_->nbytes, " bytes)"));
    }
    if (dst.empty()) return absl::OkStatus();
    return tensor_->device->CopyToHost(*tensor_->buffer, offset, dst.data(),
                                       dst.size());
  }

 private:
  const TensorMeta meta_;
  // Keeps the memory alive after a release. Must not outlive the Runtime.
  const std::shared_ptr<const StoredTensor> tensor_;
};

// --- Runtime -----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(
    RuntimeOptions options) {
  auto impl = std::make_unique<Impl>();
  RETURN_IF_ERROR(impl->Init(std::move(options)));
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

std::vector<DeviceStatus> Runtime::ListDevices() const {
  return impl_->ListDevices();
}

absl::StatusOr<Device*> Runtime::FindDevice(std::string_view name) const {
  ASSIGN_OR_RETURN(DeviceSlot * slot, impl_->FindSlot(name));
  return slot->device.get();
}

absl::StatusOr<std::string> Runtime::OpenSession(std::string_view client_name) {
  return impl_->table().OpenSession(client_name);
}

absl::StatusOr<SessionCloseStats> Runtime::CloseSession(
    std::string_view session) {
  ASSIGN_OR_RETURN(std::vector<HandleEntry> entries,
                   impl_->table().CloseSession(session));
  return impl_->Forget(std::move(entries));
}

size_t Runtime::session_count() const { return impl_->table().session_count(); }

std::vector<SessionInfo> Runtime::ListSessions() const {
  const auto now = HandleEntry::Clock::now();
  std::vector<SessionInfo> out;
  for (const SessionSummary& s : impl_->table().ListSessions()) {
    SessionInfo info;
    info.id_prefix = s.id_prefix;
    info.client_name = s.client_name;
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
  ASSIGN_OR_RETURN(DeviceSlot * slot, impl_->FindSlot(device));
  RETURN_IF_ERROR(ValidateDType(dtype));
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
  ASSIGN_OR_RETURN(uint64_t nbytes, shape.ByteSize(dtype));
  if (data.size() != nbytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data is ", data.size(), " bytes but shape ", shape.ToString(),
        " of dtype ", ToAbsl(DTypeName(dtype)), " needs ", nbytes, " bytes"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                   impl_->Allocate(*slot, nbytes));
  RETURN_IF_ERROR(slot->device->CopyFromHost(data.data(), *buffer, 0, nbytes));
  return impl_->Register(session, *slot, dtype, std::move(shape), nbytes,
                         std::move(buffer), tag);
}

absl::StatusOr<TensorMeta> Runtime::CreateFilled(
    std::string_view session, std::string_view device, DType dtype,
    std::span<const int64_t> dims, const FillSpec& fill, double arange_end,
    std::string_view tag) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
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
  ASSIGN_OR_RETURN(DeviceSlot * slot, impl_->FindSlot(device));
  RETURN_IF_ERROR(ValidateDType(dtype));
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
  ASSIGN_OR_RETURN(Impl::Output out,
                   impl_->AllocateOutput(*slot, dtype, std::move(shape)));
  return std::make_unique<Impl::UploadImpl>(impl_.get(), session, slot, dtype,
                                            std::move(out.shape), out.nbytes,
                                            std::move(out.buffer), tag);
}

absl::StatusOr<TensorMeta> Runtime::To(std::string_view session,
                                       uint64_t handle, std::string_view device,
                                       bool copy) {
  ASSIGN_OR_RETURN(HandleEntry src, impl_->table().Lookup(session, handle));
  ASSIGN_OR_RETURN(DeviceSlot * dst_slot, impl_->FindSlot(device));
  const StoredTensor& t = *src.tensor;
  if (dst_slot->device.get() == t.device && !copy) return MetaOf(src);
  ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                   impl_->Allocate(*dst_slot, t.nbytes));
  RETURN_IF_ERROR(dst_slot->device->CopyFromDevice(*t.device, *t.buffer,
                                                   *buffer, t.nbytes));
  return impl_->Register(session, *dst_slot, t.dtype, t.shape, t.nbytes,
                         std::move(buffer), src.tag);
}

absl::StatusOr<TensorMeta> Runtime::Binary(std::string_view session,
                                           BinaryOp op, uint64_t lhs,
                                           uint64_t rhs) {
  ASSIGN_OR_RETURN(HandleEntry a_entry, impl_->table().Lookup(session, lhs));
  ASSIGN_OR_RETURN(HandleEntry b_entry, impl_->table().Lookup(session, rhs));
  const StoredTensor& a = *a_entry.tensor;
  const StoredTensor& b = *b_entry.tensor;
  RETURN_IF_ERROR(SameDevice(a, b));
  DeviceSlot& slot = impl_->SlotOf(a.device);
  Device& device = *a.device;

  ASSIGN_OR_RETURN(Shape out_shape, BroadcastShapes(a.shape, b.shape));
  DType dtype =
      ResultType(a.dtype, a.shape.rank() == 0, b.dtype, b.shape.rank() == 0);
  // True division: integer and bool quotients are float32, PyTorch's default
  // floating dtype.
  if (op == BinaryOp::kDiv && !IsFloating(dtype)) dtype = DType::kFloat32;
  RETURN_IF_ERROR(CheckBinaryOpDType(op, dtype));
  RETURN_IF_ERROR(device.Supports(OpKind::kBinary, dtype));
  for (DType operand : {a.dtype, b.dtype}) {
    if (operand != dtype) {
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, operand));
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, dtype));
    }
  }

  Impl::Output a_temp, b_temp;  // promotion casts, freed on return
  ASSIGN_OR_RETURN(TensorRef a_ref, impl_->AsDType(slot, a, dtype, a_temp));
  ASSIGN_OR_RETURN(TensorRef b_ref, impl_->AsDType(slot, b, dtype, b_temp));
  ASSIGN_OR_RETURN(Impl::Output out,
                   impl_->AllocateOutput(slot, dtype, std::move(out_shape)));
  RETURN_IF_ERROR(device.Binary(op, a_ref, b_ref, out.ref()));
  return impl_->Register(session, slot, dtype, std::move(out.shape), out.nbytes,
                         std::move(out.buffer), "");
}

absl::StatusOr<TensorMeta> Runtime::MatMul(std::string_view session,
                                           uint64_t lhs, uint64_t rhs) {
  ASSIGN_OR_RETURN(HandleEntry a_entry, impl_->table().Lookup(session, lhs));
  ASSIGN_OR_RETURN(HandleEntry b_entry, impl_->table().Lookup(session, rhs));
  const StoredTensor& a = *a_entry.tensor;
  const StoredTensor& b = *b_entry.tensor;
  RETURN_IF_ERROR(SameDevice(a, b));
  DeviceSlot& slot = impl_->SlotOf(a.device);
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
                   impl_->AllocateOutput(slot, dtype, std::move(out_shape)));
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
        ASSIGN_OR_RETURN(ones, impl_->AllocateOutput(slot, dtype, ones_shape));
        FillSpec fill;
        fill.kind = FillSpec::Kind::kOnes;
        RETURN_IF_ERROR(device.Fill(fill, ones.ref()));
        dims = batch->dims();
      }
      dims.insert(dims.end(), {rows, cols});
      ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
      ASSIGN_OR_RETURN(expanded, impl_->AllocateOutput(slot, dtype, shape));
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
  return impl_->Register(session, slot, dtype, std::move(out.shape), out.nbytes,
                         std::move(out.buffer), "");
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
  return std::make_unique<Impl::ReaderImpl>(MetaOf(entry), entry.tensor);
}

}  // namespace tensord::core
