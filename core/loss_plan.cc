#include "core/loss_plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "core/op_checks.h"
#include "core/status.h"

namespace tensord::core {

absl::StatusOr<LossPlan> PlanLoss(LossKind kind, LossReduction reduction,
                                  const OperandDesc& input,
                                  const OperandDesc& target,
                                  const Target& device) {
  const std::string name(LossName(kind));
  LossPlan plan;
  if (kind == LossKind::kMse) {
    for (DType d : {input.dtype, target.dtype}) {
      if (!IsFloating(d)) return NotImplementedError(name, d, device.device);
    }
    ASSIGN_OR_RETURN(BinaryPlan diff,
                     PlanBinary(BinaryOp::kSub, input, &target, nullptr,
                                nullptr, device));
    plan.dtype = diff.out_dtype;
    plan.broadcast = diff.out;
    plan.out = reduction == LossReduction::kNone ? std::move(diff.out)
                                                 : Shape();
    return plan;
  }
  const Shape& x = input.shape;
  const Shape& t = target.shape;
  if (x.rank() != 1 && x.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": input of size ", x.ToString(),
        " is not supported: give [N, C] or unbatched [C] (the K-dimensional "
        "form is not offered yet)"));
  }
  if (target.dtype != DType::kInt64) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": expected target of dtype int64 but found ",
        ToAbsl(DTypeName(target.dtype)),
        " (class-index targets; class probabilities are not offered yet)"));
  }
  plan.batched = x.rank() == 2;
  if (t.rank() != x.rank() - 1) {
    if (plan.batched && t.rank() == 2) {
      return absl::InvalidArgumentError(
          "1D target tensor expected, multi-target not supported");
    }
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": a target of size ", t.ToString(), " for an input of size ",
        x.ToString(), ": give one class index per row"));
  }
  plan.rows = plan.batched ? x.dim(0) : 1;
  plan.classes = x.dim(x.rank() - 1);
  if (plan.batched && t.dim(0) != plan.rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Expected input batch_size (", plan.rows,
        ") to match target batch_size (", t.dim(0), ")."));
  }
  if (!IsFloating(input.dtype)) {
    return NotImplementedError(name, input.dtype, device.device);
  }
  RETURN_IF_ERROR(device.Supports(OpKind::kReduce, input.dtype));
  plan.dtype = input.dtype;
  if (reduction == LossReduction::kNone && plan.batched) {
    const int64_t dims[] = {plan.rows};
    ASSIGN_OR_RETURN(plan.out, Shape::Make(dims));
  }
  return plan;
}

absl::Status CheckTargetRange(int64_t min, int64_t max, int64_t classes) {
  if (min < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Target ", min, " is out of bounds."));
  }
  if (max >= classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("Target ", max, " is out of bounds."));
  }
  return absl::OkStatus();
}

}  // namespace tensord::core
