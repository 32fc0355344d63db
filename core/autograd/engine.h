// The autograd engine: records the executor's ops as graph nodes
// (core/autograd/autograd.h) and runs the backward pass. A node is recorded
// for an op whose inputs autograd tracks (unless the op is no_grad, not
// differentiable, or its result not floating), saving what the op's table
// row says its backward reads; backward(root) visits the nodes reachable
// from the root's grad_fn in dependency order, computes each node's input
// gradients with its row's formula (core/autograd/grad_math.h, on the
// executor's kernels, on the node's device) and accumulates the leaves'
// grads. What a node saves is charged to the session that runs the op
// (core/runtime/session_memory.h).
//
// Owned by the Executor, which it borrows (and the handle table, for the
// session's memory). Thread-safety: as the Executor's; the graph guards
// its own state (autograd.h).
#ifndef TENSORD_CORE_AUTOGRAD_ENGINE_H_
#define TENSORD_CORE_AUTOGRAD_ENGINE_H_

#include <span>
#include <vector>

#include "core/executor/executor.h"

namespace tensord::core {

class AutogradEngine {
 public:
  using TensorPtr = Executor::TensorPtr;
  using Value = Executor::Value;
  AutogradEngine(Executor& executor, HandleTable& table)
      : ex_(executor), table_(table) {}

  // Records `op`, run on `in` with the result `result`, as the result's
  // grad_fn when an input requires grad (and the op is not no_grad, is
  // differentiable and its result floating). `extra`: what the op's
  // backward needs beyond its inputs and output (dropout's mask, a norm's
  // invstd); `plan`, the op's plan, kept when its row saves_plan.
  void RecordGrad(const OpSpec& op, std::span<const Value> in,
                  const TensorPtr& result, TensorPtr extra,
                  const FamilyPlan& plan);
  // FAILED_PRECONDITION (PyTorch's messages) for an in-place op autograd
  // cannot allow: on a leaf that requires grad outside no_grad, or on a
  // tensor that is part of a graph (not recorded yet).
  absl::Status CheckInPlaceGrad(const OpSpec& op, std::span<const Value> in);
  // root.backward(grad): grad null means ones (a scalar root). The leaves'
  // grads accumulate; without retain_graph the saved tensors are freed.
  absl::Status Backward(const TensorPtr& root, const StoredTensor* grad,
                        bool retain_graph);
  // Each forward input's gradient of `node` given its output's gradient
  // (null where the input's edge is inactive or the op has none), in the
  // computation dtype; Backward casts to the input's dtype.
  absl::StatusOr<std::vector<TensorPtr>> InputGrads(const GradNode& node,
                                                    const TensorPtr& grad);

 private:
  Executor& ex_;
  HandleTable& table_;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_AUTOGRAD_ENGINE_H_
