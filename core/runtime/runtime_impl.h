// Internal: the Runtime's implementation class and what its parts share.
//
// Runtime (core/runtime/runtime.h) is a facade; its Impl is defined here and
// implemented in one file per part:
//   runtime.cc    devices, budgets, sessions and leases, handles
//   transfers.cc  tensors in and out: creates, uploads, moves, readers,
//                 shared memory, and the session holds of open streams
//   programs.cc   programs (core/runtime/program.h): registered, run
//   collectives.cc  process groups and their collectives (core/collectives/)
// Ops, autograd and optimizer steps are the executor's (core/executor/executor.h),
// which the Impl owns and lends its slots, table and admitter; executor.cc
// also holds the facade's Run and Execute, and the op-list loop (RunList)
// that Execute and RunProgram share.
// Included only by those files and executor.cc.
// Thread-safety: as Runtime.
#ifndef TENSORD_CORE_RUNTIME_RUNTIME_IMPL_H_
#define TENSORD_CORE_RUNTIME_RUNTIME_IMPL_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/absl_compat.h"
#include "core/runtime/admission.h"
#include "core/autograd/autograd.h"
#include "core/cpu/cpu_device.h"
#include "core/executor/executor.h"
#include "core/runtime/group_table.h"
#include "core/runtime/handle_table.h"
#include "core/base/op_checks.h"
#include "core/planner/op_plan.h"
#include "core/planner/planner.h"
#include "core/runtime/runtime.h"
#include "core/runtime/shared_memory.h"
#include "core/base/status.h"
#include "core/planner/window_plan.h"

namespace tensord::core {

inline int64_t MillisSince(HandleEntry::Clock::time_point t,
                           HandleEntry::Clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count();
}

inline TensorMeta MetaOf(const HandleEntry& entry) {
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
  std::shared_ptr<GradNode> grad_fn;
  {
    absl::MutexLock lock(&t.autograd->mu);
    meta.requires_grad = t.autograd->requires_grad;
    grad_fn = t.autograd->grad_fn;
  }
  if (grad_fn != nullptr) {
    meta.requires_grad = true;
    meta.grad_fn = grad_fn->Name();
  }
  return meta;
}

// INVALID_ARGUMENT unless `text` (the request's `field`) fits `max` bytes.
inline absl::Status CheckLength(std::string_view field, std::string_view text,
                                size_t max) {
  if (text.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      ToAbsl(field), " is ", text.size(), " bytes long ('", Echo(text, 32),
      "'); the server's limit is ", max, " bytes"));
}

inline absl::Status CheckTag(std::string_view tag) {
  return CheckLength("tag", tag, kMaxTagBytes);
}

// The handle table's options from the Runtime's.
HandleTableOptions TableOptions(const RuntimeOptions& o);

struct Runtime::OpList {
  std::span<const OpSpec> ops;
  std::span<const uint32_t> keep;
  // A program's plans, one per op, and last reads (Program::last_use);
  // empty: each op is planned as it runs, and the last reads computed.
  std::span<const OpResult> plans;
  std::span<const int64_t> last_use;
  // A program's inputs, by Operand::input.
  std::span<const Executor::Value> inputs;
  // Session tensors already looked up (a program's bound tensors); the
  // list adds those it looks up itself.
  absl::flat_hash_map<uint64_t, HandleEntry>* looked_up = nullptr;
  // Ops of the list run in another form (a program's optimizer steps with
  // this run's arguments), by index.
  const absl::flat_hash_map<uint32_t, OpSpec>* replaced = nullptr;
  const std::function<bool()>* cancelled = nullptr;
};

class Runtime::Impl {
 public:
  explicit Impl(const RuntimeOptions& options)
      : table_(TableOptions(options)),
        admitter_(table_, options.max_tensor_bytes),
        groups_(std::max<size_t>(options.session_max_groups, 1)),
        collective_timeout_(options.collective_timeout) {}
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
  const std::string& node_name() const { return node_name_; }
  absl::StatusOr<DeviceSlot*> FindSlot(std::string_view name) const;
  DeviceSlot& SlotOf(const Device* device) const {
    return executor_.SlotOf(device);
  }
  // The executor's types, which the transfers share.
  using Output = Executor::Output;
  using TensorPtr = Executor::TensorPtr;
  using Value = Executor::Value;
  absl::StatusOr<Output> AllocateOutput(DeviceSlot& slot, DType dtype,
                                        Shape shape) {
    return executor_.AllocateOutput(slot, dtype, std::move(shape));
  }

  HandleTable& table() { return table_; }

  // Admission (core/runtime/admission.h): every allocation is admitted for the
  // session of the current AdmissionScope, then made with the token. The
  // returned buffer gives the bytes back when its last owner drops it.
  absl::StatusOr<Admission> Admit(DeviceSlot& slot, uint64_t bytes) {
    return admitter_.Admit(slot, bytes);
  }
  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(Admission admission) {
    return admitter_.Allocate(std::move(admission));
  }

  // Registers a finished tensor in the session.
  absl::StatusOr<TensorMeta> Register(std::string_view session,
                                      DeviceSlot& slot, DType dtype,
                                      Shape shape, uint64_t nbytes,
                                      std::shared_ptr<Buffer> buffer,
                                      std::string_view tag);
  // Registers `tensor` itself (an op's result, with its autograd state).
  absl::StatusOr<TensorMeta> Register(
      std::string_view session, std::shared_ptr<const StoredTensor> tensor,
      std::string_view tag);
  // Drops removed entries, keeping the live-tensor counts right.
  SessionCloseStats Forget(std::vector<HandleEntry> entries);

  Executor& executor() { return executor_; }

  // Process groups (collectives.cc).
  GroupTable& groups() { return groups_; }
  std::chrono::milliseconds collective_timeout() const {
    return collective_timeout_;
  }

  class UploadImpl;
  class ReaderImpl;

  // Shared-memory mappings alive, and transfers through them.
  std::atomic<int64_t> shm_regions{0};
  std::atomic<uint64_t> shm_uploads{0};
  std::atomic<uint64_t> shm_fetches{0};

 private:
  std::vector<std::unique_ptr<DeviceSlot>> slots_;
  HandleTable table_;  // after slots_: destroyed before them
  Admitter admitter_;  // borrows table_
  Executor executor_{slots_, table_, admitter_};
  GroupTable groups_;  // its sessions' holders are tied to table_'s
  std::chrono::milliseconds collective_timeout_;
  uint64_t max_tensor_bytes_ = 0;
  std::string node_name_;
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

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_RUNTIME_IMPL_H_
