// What a whole op will produce, known before anything runs: the one
// function the server's executor and the eager client (issue 17) both ask,
// so an op's result metadata and its errors are the same on either side.
//
// PlanOp checks, in this order: the op's tensor arity and required fields,
// PyTorch's same-device rule, then the op's own rules through the family
// planners of core/planner/planner.h on the target device's capability table. It
// returns the result's dtype and shape (on the inputs' device), or the error
// with PyTorch's message and the code the server answers with.
//
// Composite ops (softmax, clamp, linear, conv2d, pooling) are checked by their leading
// kernels' plans; the intermediate kernels they launch run in dtypes every
// device supports for the op's own dtype (core/base/device.cc's common table).
//
// Thread-safety: a pure function.
#ifndef TENSORD_CORE_PLANNER_OP_PLAN_H_
#define TENSORD_CORE_PLANNER_OP_PLAN_H_

#include <optional>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/dtype.h"
#include "core/planner/loss_plan.h"
#include "core/planner/norm_plan.h"
#include "core/base/ops.h"
#include "core/planner/planner.h"
#include "core/base/shape.h"
#include "core/planner/window_plan.h"

namespace tensord::core {

// One tensor operand of an op, in the order of OpSpec::inputs. The shape
// and the device name are borrowed for the call.
struct OpInput {
  DType dtype;
  const Shape& shape;
  std::string_view device;
};

// A unary op's plan: the dtype it computes in (and returns); clamp's: the
// one dtype of its operands and result; reshape's: the result's shape.
struct UnaryPlan {
  DType dtype = DType::kFloat32;
};
struct ClampPlan {
  DType dtype = DType::kFloat32;
};
struct ReshapePlan {
  Shape out;
};
// The plan of the op's family as PlanOp made it, which the executor runs
// without planning the op again (monostate for the ops whose plan is a
// check only: casts, dropout, the autograd ops, optimizer steps, in-place
// ops). Linear carries its product's.
using FamilyPlan =
    std::variant<std::monostate, BinaryPlan, UnaryPlan, MatMulPlan, ReducePlan,
                 SoftmaxPlan, PermutePlan, SlicePlan, Conv2dPlan, Pool2dPlan,
                 AdaptivePoolPlan, LossPlan, NormPlan, WherePlan, ClampPlan,
                 ReshapePlan, CatPlan>;

struct OpResult {
  DType dtype = DType::kFloat32;
  Shape shape;
  // The op updates inputs[0] in place (kInPlace): the result is that tensor.
  bool in_place = false;
  FamilyPlan plan = std::monostate{};
  // The plan of family P (precondition: the op's family is P).
  template <typename P>
  const P& Plan() const {
    return std::get<P>(plan);
  }
};

// INVALID_ARGUMENT "<op> takes 2 tensor operands, got 1" for a wrong
// number of tensors (and for where without both branches);
// FAILED_PRECONDITION "Expected all tensors to be on the same device, but
// found at least two devices, cuda:0 and cpu!" for operands on different
// devices; otherwise the op's plan's own errors. `target` is the device of
// inputs[0].
absl::StatusOr<OpResult> PlanOp(const OpSpec& op,
                                std::span<const OpInput> inputs,
                                const Target& target);

// An optimizer step's hyperparameters and step number as torch checks them
// (INVALID_ARGUMENT "Invalid learning rate: -0.1", ...), part of PlanOp's
// plan of the step; a program's run checks its per-run arguments with it.
absl::Status CheckOptimizerArgs(const OptimizerArgs& args);

// What PlanOp and the executor both derive from a view op's fields:
// transpose's permutation of x's `rank` dims (INVALID_ARGUMENT for a bad
// dim), and the block a narrow or select takes from x (PlanNarrow's or
// PlanSelect's errors).
absl::StatusOr<std::vector<int64_t>> TransposePerm(const OpSpec& op,
                                                   int rank);
absl::StatusOr<SlicePlan> PlanSliceOp(const OpSpec& op, const Shape& x);
// kMaxPool2d -> kMax, kAvgPool2d -> kAvg.
PoolKind PoolKindOf(const OpSpec& op);

}  // namespace tensord::core

#endif  // TENSORD_CORE_PLANNER_OP_PLAN_H_
