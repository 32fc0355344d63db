// What a stored tensor knows about its gradient (AutogradMeta): whether
// the client asked gradients of it, the graph node that made it, its
// accumulated grad and the session that grad is charged to. The handle
// table stores one with every tensor without depending on the autograd
// engine (core/autograd/autograd.h: graph nodes, recording, backward), which is the
// only code that reads or writes its fields.
// Thread-safety: the fields are guarded by `mu`; ever_tracked is atomic.
#ifndef TENSORD_CORE_AUTOGRAD_AUTOGRAD_META_H_
#define TENSORD_CORE_AUTOGRAD_AUTOGRAD_META_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tensord::core {

struct StoredTensor;  // core/runtime/stored_tensor.h
struct GradNode;      // core/autograd/autograd.h
class HeldCharge;     // core/runtime/session_memory.h
class SessionMemory;  // core/runtime/session_memory.h

// What a tensor knows about its gradient. Every stored tensor has one.
struct AutogradMeta {
  mutable absl::Mutex mu;
  // A leaf the client asked gradients for.
  bool requires_grad ABSL_GUARDED_BY(mu) = false;
  // The op that made the tensor, when recorded (then it is not a leaf).
  std::shared_ptr<GradNode> grad_fn ABSL_GUARDED_BY(mu);
  // The accumulated gradient of a leaf (null: None).
  std::shared_ptr<const StoredTensor> grad ABSL_GUARDED_BY(mu);
  // The session whose handle names this tensor (set when it is
  // registered), and that handle: a leaf's grad counts as that session's
  // memory (core/runtime/session_memory.h) through grad_charge, declared after
  // grad so that it goes first.
  std::weak_ptr<SessionMemory> owner ABSL_GUARDED_BY(mu);
  uint64_t owner_handle ABSL_GUARDED_BY(mu) = 0;
  std::shared_ptr<const HeldCharge> grad_charge ABSL_GUARDED_BY(mu);
  // Set (under mu) once requires_grad or grad_fn was ever set, never
  // cleared: read without the lock, it lets an op on tensors autograd never
  // saw skip recording without locking each input.
  std::atomic<bool> ever_tracked{false};

  // requires_grad (leaf) or grad_fn set: autograd tracks this tensor.
  bool Tracked() const {
    absl::MutexLock lock(&mu);
    return requires_grad || grad_fn != nullptr;
  }
  std::shared_ptr<GradNode> GradFn() const {
    absl::MutexLock lock(&mu);
    return grad_fn;
  }
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_AUTOGRAD_AUTOGRAD_META_H_
