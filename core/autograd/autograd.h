// Autograd's graph: the nodes that ops record, and the engine's entry
// points (what a stored tensor knows about its gradient is
// core/autograd/autograd_meta.h, which the handle table stores without this).
// Autograd lives in the server, next to the tensors, so every client language
// gets it through the proto.
//
// A tensor requires grad when it is a leaf the client marked
// (requires_grad_) or the result of an op recorded with an input that
// requires grad (it then has a grad_fn). Recording (AutogradEngine,
// core/autograd/engine.h) happens for every op on such inputs unless the op
// is sent with no_grad; a node keeps the forward op, the data of the inputs
// (and output) its backward reads, each with its memory's version at the
// time (Buffer::version), and one edge per input: the input's grad_fn, or
// the leaf itself. backward(root) visits the nodes reachable from the
// root's grad_fn in dependency order, computes each node's input grads from
// its output grad with the same kernels as the forward ops
// (core/autograd/backward_ops.cc), and accumulates them into the leaves'
// grads; unless the graph is retained it frees the saved tensors, and a
// second backward through those nodes is FAILED_PRECONDITION (PyTorch's
// message).
//
// Cycles cannot form: what a node saves is a copy of the tensor's metadata
// sharing its memory but not its AutogradMeta, and leaves are held weakly
// (a released leaf's grad is dropped, as PyTorch drops a dead variable's).
//
// Thread-safety: AutogradMeta and GradNode guard their mutable state with
// their own mutexes; the rest is set before the object is shared.
#ifndef TENSORD_CORE_AUTOGRAD_AUTOGRAD_H_
#define TENSORD_CORE_AUTOGRAD_AUTOGRAD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/autograd/autograd_meta.h"
#include "core/base/ops.h"
#include "core/planner/op_plan.h"

namespace tensord::core {

struct StoredTensor;  // core/runtime/handle_table.h
class HeldCharge;     // core/runtime/session_memory.h
class SessionMemory;  // core/runtime/session_memory.h

// A tensor a node keeps for its backward: a copy of its metadata sharing
// its memory (buffer null when the backward needs only the metadata), and
// the memory's version when it was saved.
struct SavedTensor {
  std::shared_ptr<const StoredTensor> data;
  uint64_t version = 0;
};

// Where an input's gradient goes: the node that made the input, or the
// leaf itself; neither when the input does not require grad.
struct GradEdge {
  std::shared_ptr<GradNode> node;
  std::weak_ptr<const StoredTensor> leaf;
  bool is_leaf = false;
  bool active() const { return node != nullptr || is_leaf; }
};

// One recorded op. Its only output is the tensor whose grad_fn it is.
struct GradNode {
  OpSpec op;                        // the forward op (operands cleared)
  std::vector<SavedTensor> inputs;  // one per forward input
  SavedTensor output;               // data only for ops that read it
  SavedTensor extra;  // dropout: the mask it applied; a norm: invstd
  // The forward's plan, for rows that save it (OpRow::saves_plan: the
  // convolution's and pools' windows, a loss's shapes); else empty.
  FamilyPlan plan;
  std::vector<GradEdge> next;       // one per forward input

  // PyTorch's name for the node: "MulBackward0", "ConvolutionBackward0".
  std::string Name() const;

  absl::Mutex mu;
  // backward ran without retain_graph: the saved tensors are gone.
  bool released ABSL_GUARDED_BY(mu) = false;
  // Counted toward a session's memory (ChargeToSession); the charge keeps
  // the saved tensors' memory on the session's account until the node
  // releases them or dies (declared last, so it goes first).
  bool charged ABSL_GUARDED_BY(mu) = false;
  std::shared_ptr<const HeldCharge> charge ABSL_GUARDED_BY(mu);
};

// PyTorch's grad_fn name of a node recording `op`.
std::string GradFnName(const OpSpec& op);

// Sets a leaf's grad (null: None), moving its charge to the new one.
void SetGrad(AutogradMeta& meta, std::shared_ptr<const StoredTensor> grad)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(meta.mu);

// `t` was registered in a session under `handle`: its grad, and the saved
// tensors of every node of its graph not yet counted, count toward that
// session's memory from now on (core/runtime/session_memory.h).
void ChargeToSession(const StoredTensor& t,
                     const std::shared_ptr<SessionMemory>& memory,
                     uint64_t handle);
// The saved tensors of every node of the graph from `root` not yet
// counted count toward `memory`'s session from now on.
void ChargeGraph(std::shared_ptr<GradNode> root,
                 const std::shared_ptr<SessionMemory>& memory);

}  // namespace tensord::core

#endif  // TENSORD_CORE_AUTOGRAD_AUTOGRAD_H_
