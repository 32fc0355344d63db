// Internal: the memory a session holds without a handle — what autograd
// keeps alive for it — and how it counts toward the session's quotas.
//
// A session's tensors are its handle entries. Autograd holds more: the
// tensors a recorded op saved for its backward (an intermediate the client
// released, or one an Execute never kept, stays alive while its graph
// does), and the gradients accumulated into its leaves. PyTorch users see
// that memory as theirs, so tensord counts it: each such tensor is held by
// a HeldCharge (a graph node's saved tensors, a leaf's grad), and while the
// charge lives its memory counts toward the session's byte and tensor
// quotas and is listed with a tag naming what holds it ("saved by
// MulBackward0", "grad of tensor 17").
//
// Memory is counted by buffer, once: a saved tensor whose memory a handle
// entry also holds (an input the client still has) costs nothing more, and
// becomes the session's extra memory when that entry is released.
//
// It also counts what admission (core/runtime/admission.h) let the session
// allocate and is neither an entry nor held: memory reserved and not yet
// allocated, and live buffers of a request in progress (an Execute's
// intermediates, an op's temporaries, a result not registered yet) — its
// in-flight memory. A buffer leaves it when it becomes an entry or is held,
// and when it is destroyed.
//
// Thread-safety: all methods are thread-safe. The mutex is a leaf: nothing
// else is locked while it is held, so charges may be made and dropped under
// a graph node's or a tensor's autograd lock.
#ifndef TENSORD_CORE_RUNTIME_SESSION_MEMORY_H_
#define TENSORD_CORE_RUNTIME_SESSION_MEMORY_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/base/dtype.h"
#include "core/base/shape.h"

namespace tensord::core {

class Buffer;         // core/base/device.h
struct StoredTensor;  // core/runtime/handle_table.h
class SessionMemory;

// A tensor the session holds without a handle, as listings show it.
struct HeldTensor {
  std::string device;
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t nbytes = 0;
  std::string
      tag;  // what holds it: "saved by MulBackward0", "grad of tensor 17"
};

// While alive, the memory of the tensors it was made for counts as its
// session's. Dropping it (or the session ending first) ends that.
class HeldCharge {
 public:
  HeldCharge(const HeldCharge&) = delete;
  HeldCharge& operator=(const HeldCharge&) = delete;
  ~HeldCharge();

 private:
  friend class SessionMemory;
  HeldCharge() = default;
  std::weak_ptr<SessionMemory> memory_;
  std::vector<const Buffer*> keys_;
};

class SessionMemory : public std::enable_shared_from_this<SessionMemory> {
 public:
  // A tensor registered under a handle, and its removal.
  void AddEntry(const StoredTensor& t);
  void RemoveEntry(const StoredTensor& t);

  // Counts the memory of `tensors` (those with a buffer) as the session's,
  // tagged `tag`, until the result is destroyed. Null when none has memory
  // or the session has ended.
  std::shared_ptr<const HeldCharge> Hold(
      std::span<const StoredTensor* const> tensors, std::string_view tag);

  // Held memory that no handle entry shares: what the session holds beyond
  // its entries.
  uint64_t extra_bytes() const;
  uint64_t extra_tensors() const;
  std::vector<HeldTensor> ListExtra() const;

  // Admission (core/runtime/admission.h): `bytes` and `tensors` reserved for an
  // allocation, given back, or become the live buffer `key` (one tensor).
  // Freed: the buffer `key`, allocated so, is destroyed.
  void Reserve(uint64_t bytes, uint64_t tensors);
  void Unreserve(uint64_t bytes, uint64_t tensors);
  void Allocated(const Buffer* key, uint64_t bytes);
  void Freed(const Buffer* key);
  // True when `key`'s memory already counts toward the session without a
  // handle entry: an admitted buffer or a held one that no entry shares.
  // Registering it moves that charge rather than adding one.
  bool CountedWithoutEntry(const Buffer* key) const;
  // Reserved memory and admitted buffers neither an entry nor held.
  uint64_t in_flight_bytes() const;
  uint64_t in_flight_tensors() const;

  // The session ended: forget everything; later charges and drops do
  // nothing.
  void End();

 private:
  friend class HeldCharge;
  void Release(std::span<const Buffer* const> keys);

  struct Held {
    HeldTensor meta;
    uint32_t charges = 0;
  };
  mutable absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<const Buffer*, uint32_t> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const Buffer*, Held> held_ ABSL_GUARDED_BY(mu_);
  uint64_t extra_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t extra_tensors_ ABSL_GUARDED_BY(mu_) = 0;
  // Live admitted buffers and their sizes; `loose_*` sums those neither in
  // entries_ nor in held_.
  absl::flat_hash_map<const Buffer*, uint64_t> live_ ABSL_GUARDED_BY(mu_);
  uint64_t loose_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t loose_tensors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reserved_tensors_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_SESSION_MEMORY_H_
