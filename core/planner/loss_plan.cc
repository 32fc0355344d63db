#include "core/planner/loss_plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/base/error_kind.h"
#include "core/base/op_checks.h"
#include "core/base/status.h"

namespace tensord::core {

absl::StatusOr<LossPlan> PlanLoss(LossKind kind, LossReduction reduction,
                                  const OperandDesc& input,
                                  const OperandDesc& target,
                                  const Target& device) {
  CountPlan(Planner::kLoss);
  const std::string name(LossName(kind));
  LossPlan plan;
  if (kind == LossKind::kMse) {
    // torch: broadcast_tensors, then the kernel for the promoted dtype.
    RETURN_IF_ERROR(BroadcastShapes(input.shape, target.shape).status());
    if (!IsFloating(input.dtype) && !IsFloating(target.dtype)) {
      return NotImplementedError(
          "mse_cpu", ResultType(input.dtype, false, target.dtype, false));
    }
    for (DType d : {input.dtype, target.dtype}) {
      if (!IsFloating(d)) return NotImplementedError(name, d);
    }
    ASSIGN_OR_RETURN(BinaryPlan diff, PlanBinary(BinaryOp::kSub, input, &target,
                                                 nullptr, nullptr, device));
    plan.dtype = diff.out_dtype;
    plan.broadcast = diff.out;
    plan.out =
        reduction == LossReduction::kNone ? std::move(diff.out) : Shape();
    return plan;
  }
  // torch's checks, in its order: cross_entropy's class probabilities and
  // log_softmax, then nll_loss_nd's (ValueError), nll_loss's, the kernel's
  // dtypes; the targets' range is checked when they are read
  // (CheckTargetRange).
  const Shape& x = input.shape;
  const Shape& t = target.shape;
  if (kind == LossKind::kCrossEntropy) {
    if (x == t) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": a target of the input's size ", x.ToString(),
          " gives class probabilities, which are not offered yet: give "
          "class indices (int64, one per row)"));
    }
    if (!IsFloating(input.dtype)) {
      return NotImplementedError("log_softmax_lastdim_kernel_impl",
                                 input.dtype);
    }
  }
  if (x.rank() < 1) {
    return ValueError(
        absl::StrCat("Expected 1 or more dimensions (got ", x.rank(), ")"));
  }
  if (x.rank() != 1) {
    const int64_t target_batch = t.rank() == 0 ? 0 : t.dim(0);
    if (x.dim(0) != target_batch) {
      return ValueError(absl::StrCat("Expected input batch_size (", x.dim(0),
                                     ") to match target batch_size (",
                                     target_batch, ")."));
    }
  }
  if (x.rank() > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": input of size ", x.ToString(),
        " is not supported: give [N, C] or unbatched [C] (the K-dimensional "
        "form is not offered yet)"));
  }
  if (t.rank() > 1) {
    return absl::InvalidArgumentError(
        "0D or 1D target tensor expected, multi-target not supported");
  }
  plan.batched = x.rank() == 2;
  if (plan.batched == (t.rank() == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("size mismatch (got input: ", x.ToString(),
                     ", target: ", t.ToString(), ")"));
  }
  if (!IsFloating(input.dtype)) {
    return NotImplementedError("nll_loss_out_frame", input.dtype);
  }
  if (target.dtype != DType::kInt64) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected scalar type Long but found ",
                     ToAbsl(ScalarTypeName(target.dtype))));
  }
  plan.rows = plan.batched ? x.dim(0) : 1;
  plan.classes = x.dim(x.rank() - 1);
  RETURN_IF_ERROR(device.Supports(OpKind::kReduce, input.dtype));
  plan.dtype = input.dtype;
  if (reduction == LossReduction::kNone && plan.batched) {
    const int64_t dims[] = {plan.rows};
    ASSIGN_OR_RETURN(plan.out, Shape::Make(dims));
  }
  return plan;
}

absl::Status CheckTargetRange(int64_t min, int64_t max, int64_t classes) {
  // torch: an IndexError.
  if (min < 0)
    return IndexError(absl::StrCat("Target ", min, " is out of bounds."));
  if (max >= classes) {
    return IndexError(absl::StrCat("Target ", max, " is out of bounds."));
  }
  return absl::OkStatus();
}

}  // namespace tensord::core
