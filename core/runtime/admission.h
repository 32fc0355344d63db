// Internal: admission, the one place where memory a session causes is
// allowed before it is taken.
//
// Every buffer the Runtime allocates — a tensor a session names, an
// intermediate of an Execute, a temporary inside an op, what autograd
// saves, a gradient, optimizer state made inside a step, a stream
// command's result, an import from another node, an upload's or a
// shared-memory copy's staging — is admitted by Admitter::Admit before any
// memory is taken: against the per-tensor limit (--max-tensor-bytes), the
// session's byte and tensor quotas (--session-max-bytes,
// --session-max-tensors) and the device's budget. Admit returns an
// Admission, a move-only token that only the Admitter can make, and
// Admitter::Allocate — the Runtime's only path to Device::Allocate — takes
// one and spends it. So no allocation can skip admission: there is no
// other way to get the token.
//
// Later features that allocate device memory (programs, oneDNN/cuDNN
// workspaces, collectives' buffers) must get it the same way: an
// AdmissionScope naming the session the memory is for, then Admit and
// Allocate. Do not add another path to Device::Allocate.
//
// What an admission reserves: `bytes` of the device's budget and `bytes`
// and one tensor of the session's quotas. The reservation becomes the
// buffer's when Allocate succeeds and is given back when the buffer is
// destroyed; an Admission destroyed unspent gives it back at once. A buffer
// is charged to its session once, however it is held (a handle, a tensor
// autograd saved, both; core/runtime/session_memory.h).
//
// Which session: the innermost AdmissionScope alive on the calling thread.
// Every public Runtime method that allocates opens one; an allocation with
// none open is a bug and fails INTERNAL.
//
// Thread-safety: Admitter's methods are thread-safe. An AdmissionScope
// belongs to the thread that made it.
#ifndef TENSORD_CORE_RUNTIME_ADMISSION_H_
#define TENSORD_CORE_RUNTIME_ADMISSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tensord::core {

class Buffer;         // core/base/device.h
class HandleTable;    // core/runtime/handle_table.h
class SessionMemory;  // core/runtime/session_memory.h
struct DeviceSlot;    // core/runtime/runtime_impl.h

// Memory admitted and not yet allocated. Move-only; spent by
// Admitter::Allocate; destroyed unspent, it gives its reservation back.
class Admission {
 public:
  Admission(Admission&& other) noexcept;
  Admission& operator=(Admission&& other) noexcept;
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  ~Admission();

  uint64_t bytes() const { return bytes_; }

 private:
  friend class Admitter;
  Admission(DeviceSlot* slot, uint64_t bytes,
            std::shared_ptr<SessionMemory> memory);
  void GiveBack();

  DeviceSlot* slot_ = nullptr;  // borrowed; null once spent or given back
  uint64_t bytes_ = 0;
  std::shared_ptr<SessionMemory> memory_;
};

// Names the session whose quotas the allocations made on this thread are
// admitted against, while it lives. Scopes nest; the innermost one counts.
class AdmissionScope {
 public:
  explicit AdmissionScope(std::string_view session);
  AdmissionScope(const AdmissionScope&) = delete;
  AdmissionScope& operator=(const AdmissionScope&) = delete;
  ~AdmissionScope();

  // The innermost scope's session; null when none is open.
  static const std::string* Current();

 private:
  const std::string session_;
  const AdmissionScope* const outer_;
};

// Process-wide totals, for tests: every admission issued, spent on an
// allocation or given back unspent. admitted == spent + given_back once no
// Admission is alive.
struct AdmissionTotals {
  uint64_t admitted_bytes = 0;
  uint64_t spent_bytes = 0;
  uint64_t given_back_bytes = 0;
  uint64_t refusals = 0;
};
AdmissionTotals GetAdmissionTotals();

class Admitter {
 public:
  // `table` is borrowed and must outlive the Admitter. `max_tensor_bytes`:
  // the per-buffer limit, 0 for none.
  Admitter(HandleTable& table, uint64_t max_tensor_bytes)
      : table_(table), max_tensor_bytes_(max_tensor_bytes) {}

  // THE admission function. Admits `bytes` on `slot` for the session of
  // the current AdmissionScope. In order: INVALID_ARGUMENT past the
  // per-tensor limit; NOT_FOUND for an unknown session; RESOURCE_EXHAUSTED
  // past a session quota (the handle table's message: the quota, the bytes
  // requested, what the session holds — how much of it autograd holds —
  // and the limit) or past the device's budget (asked, in use, left);
  // INTERNAL when no scope is open.
  absl::StatusOr<Admission> Admit(DeviceSlot& slot, uint64_t bytes);

  // Allocates the admitted bytes on the admission's device, spending it.
  // The buffer charges the session and the device until its last owner
  // drops it. The device's own error (RESOURCE_EXHAUSTED) on failure, with
  // the admission given back.
  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(Admission admission);

 private:
  HandleTable& table_;
  const uint64_t max_tensor_bytes_;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_ADMISSION_H_
