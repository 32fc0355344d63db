// The loss functions (nll_loss, cross_entropy, mse_loss), planned before
// anything runs: PyTorch's rules and messages and the result's dtype and
// shape. Part of the planner (core/planner/planner.h): pure functions, which the
// server's executor and the eager client both call.
//
// The executor runs them as kernels every device has (core/executor/loss_ops.cc):
// the class-index losses pick each row's target with a one-hot mask
// (arange == target), mse_loss is a difference squared; then the
// reduction. Targets out of range are found before that, on every device,
// from the targets' minimum and maximum.
//
// Thread-safety: pure functions.
#ifndef TENSORD_CORE_PLANNER_LOSS_PLAN_H_
#define TENSORD_CORE_PLANNER_LOSS_PLAN_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/base/dtype.h"
#include "core/base/ops.h"
#include "core/planner/planner.h"
#include "core/base/shape.h"

namespace tensord::core {

struct LossPlan {
  DType dtype = DType::kFloat32;  // the loss's (and the computation's)
  Shape out;                      // [] unless reduction kNone
  // kNll / kCrossEntropy: rows (1 for an unbatched [C] input) and classes.
  int64_t rows = 1, classes = 0;
  bool batched = true;
  Shape broadcast;  // kMse: the broadcast shape of input and target
};

// kNll / kCrossEntropy: input [N, C] (or unbatched [C]) of a floating
// dtype, target int64 [N] (or []): INVALID_ARGUMENT "Expected input
// batch_size (3) to match target batch_size (2).", "1D target tensor
// expected, multi-target not supported", "expected target of dtype int64
// but found int32", and for other ranks; FAILED_PRECONDITION
// "\"nll_loss\" not implemented for 'int64' on cpu" for a non-floating
// input. kMse: input and target floating, broadcast (INVALID_ARGUMENT
// otherwise), computed in their promoted dtype.
absl::StatusOr<LossPlan> PlanLoss(LossKind kind, LossReduction reduction,
                                  const OperandDesc& input,
                                  const OperandDesc& target,
                                  const Target& device);

// INVALID_ARGUMENT "Target 12 is out of bounds." unless every target
// other than ignore_index lies in [0, classes): what the executor checks
// from the targets' `min` and `max` (over the counted ones).
absl::Status CheckTargetRange(int64_t min, int64_t max, int64_t classes);

}  // namespace tensord::core

#endif  // TENSORD_CORE_PLANNER_LOSS_PLAN_H_
