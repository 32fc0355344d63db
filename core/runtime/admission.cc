#include "core/runtime/admission.h"

#include <atomic>
#include <utility>

#include "core/base/refusal.h"
#include "core/runtime/runtime_impl.h"

namespace tensord::core {
namespace {

thread_local const AdmissionScope* current_scope = nullptr;

struct Totals {
  std::atomic<uint64_t> admitted{0}, spent{0}, given_back{0}, refusals{0};
};
Totals& GlobalTotals() {
  static Totals* totals = new Totals();  // never destroyed: read at exit
  return *totals;
}

}  // namespace

AdmissionTotals GetAdmissionTotals() {
  const Totals& t = GlobalTotals();
  return AdmissionTotals{t.admitted.load(), t.spent.load(), t.given_back.load(),
                         t.refusals.load()};
}

AdmissionScope::AdmissionScope(std::string_view session)
    : session_(session), outer_(current_scope) {
  current_scope = this;
}

AdmissionScope::~AdmissionScope() { current_scope = outer_; }

const std::string* AdmissionScope::Current() {
  return current_scope == nullptr ? nullptr : &current_scope->session_;
}

Admission::Admission(DeviceSlot* slot, uint64_t bytes,
                     std::shared_ptr<SessionMemory> memory)
    : slot_(slot), bytes_(bytes), memory_(std::move(memory)) {}

Admission::Admission(Admission&& other) noexcept
    : slot_(std::exchange(other.slot_, nullptr)),
      bytes_(other.bytes_),
      memory_(std::move(other.memory_)) {}

Admission& Admission::operator=(Admission&& other) noexcept {
  if (this != &other) {
    GiveBack();
    slot_ = std::exchange(other.slot_, nullptr);
    bytes_ = other.bytes_;
    memory_ = std::move(other.memory_);
  }
  return *this;
}

Admission::~Admission() { GiveBack(); }

void Admission::GiveBack() {
  if (slot_ == nullptr) return;
  slot_->held.fetch_sub(bytes_);
  if (memory_ != nullptr) memory_->Unreserve(bytes_, 1);
  GlobalTotals().given_back.fetch_add(bytes_);
  slot_ = nullptr;
  memory_ = nullptr;
}

absl::StatusOr<Admission> Admitter::Admit(DeviceSlot& slot, uint64_t bytes) {
  const std::string* session = AdmissionScope::Current();
  if (session == nullptr) {
    return absl::InternalError(absl::StrCat(
        "allocation of ", bytes, " bytes on ", slot.device->name(),
        " outside any session's admission scope (a bug: every allocation "
        "is admitted for a session; core/runtime/admission.h)"));
  }
  if (max_tensor_bytes_ != 0 && bytes > max_tensor_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor of ", FormatBytes(bytes), " (", bytes,
                     " bytes) exceeds the server's per-tensor limit of ",
                     FormatBytes(max_tensor_bytes_), " (--max-tensor-bytes)"));
  }
  absl::StatusOr<std::shared_ptr<SessionMemory>> memory =
      table_.Reserve(*session, bytes, 1);
  if (!memory.ok()) {
    if (absl::IsResourceExhausted(memory.status())) {
      GlobalTotals().refusals.fetch_add(1);
    }
    return memory.status();
  }
  uint64_t held = slot.held.load();
  do {
    if (bytes > slot.budget || held > slot.budget - bytes) {
      (*memory)->Unreserve(bytes, 1);
      const uint64_t left = held < slot.budget ? slot.budget - held : 0;
      slot.allocation_failures.fetch_add(1);
      GlobalTotals().refusals.fetch_add(1);
      return MarkRefusal(
          absl::ResourceExhaustedError(absl::StrCat(
              slot.device->name(), " out of memory: tried to allocate ",
              FormatBytes(bytes), " (", bytes, " bytes); tensord holds ",
              FormatBytes(held), " of a ", FormatBytes(slot.budget),
              " budget, ", FormatBytes(left), " left")),
          Refusal::kDeviceBudget);
    }
  } while (!slot.held.compare_exchange_weak(held, held + bytes));
  GlobalTotals().admitted.fetch_add(bytes);
  return Admission(&slot, bytes, *std::move(memory));
}

absl::StatusOr<std::shared_ptr<Buffer>> Admitter::Allocate(
    Admission admission) {
  DeviceSlot* slot = admission.slot_;
  if (slot == nullptr) {
    return absl::InternalError("Allocate: an admission spent already");
  }
  const uint64_t bytes = admission.bytes_;
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      slot->device->Allocate(AllocationGrant(static_cast<size_t>(bytes)));
  if (!buffer.ok()) {
    slot->allocation_failures.fetch_add(1);
    // `admission` gives its bytes back. The device itself is out of memory:
    // refused for the device's budget too.
    if (absl::IsResourceExhausted(buffer.status())) {
      return MarkRefusal(buffer.status(), Refusal::kDeviceBudget);
    }
    return buffer.status();
  }
  // Spent: the buffer carries the charge from here.
  std::shared_ptr<SessionMemory> memory = std::move(admission.memory_);
  admission.slot_ = nullptr;
  GlobalTotals().spent.fetch_add(bytes);
  Buffer* raw = buffer->release();
  if (memory != nullptr) memory->Allocated(raw, bytes);
  std::weak_ptr<SessionMemory> weak = memory;
  return std::shared_ptr<Buffer>(raw, [slot, bytes, weak](Buffer* b) {
    if (std::shared_ptr<SessionMemory> m = weak.lock()) m->Freed(b);
    delete b;
    slot->held.fetch_sub(bytes);
  });
}

}  // namespace tensord::core
