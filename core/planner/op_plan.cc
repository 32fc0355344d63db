#include "core/planner/op_plan.h"

#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/absl_compat.h"
#include "core/planner/loss_plan.h"
#include "core/planner/norm_plan.h"
#include "core/base/op_checks.h"
#include "core/base/status.h"
#include "core/planner/window_plan.h"

namespace tensord::core {
namespace {

using Bound = OpSpec::Bound;

// The number of tensor operands `op` takes: [lo, hi].
absl::Status CheckArity(const OpSpec& op, size_t n) {
  size_t lo = 1, hi = 1;
  const bool with_scalar = op.scalar.has_value();
  switch (op.kind) {
    case OpSpec::Kind::kBinary:
    case OpSpec::Kind::kInPlace:
      lo = hi = with_scalar && op.in_place != InPlaceOp::kAxpy ? 1 : 2;
      break;
    case OpSpec::Kind::kMatMul:
    case OpSpec::Kind::kLoss:
      lo = hi = 2;
      break;
    case OpSpec::Kind::kLinear:
    case OpSpec::Kind::kConv2d:
      lo = 2;
      hi = 3;
      break;
    case OpSpec::Kind::kCat:
    case OpSpec::Kind::kZeroGrad:
      hi = 1024;
      break;
    case OpSpec::Kind::kNorm:
      lo = hi = static_cast<size_t>(NormSlotsOf(op.norm).count);
      break;
    case OpSpec::Kind::kOptimizerStep:
      hi = 3 * 1024;
      break;
    case OpSpec::Kind::kBackward:
      hi = 2;
      break;
    case OpSpec::Kind::kClamp:
    case OpSpec::Kind::kWhere: {
      const bool clamp = op.kind == OpSpec::Kind::kClamp;
      for (const Bound* b : {clamp ? &op.clamp_min : &op.where_input,
                             clamp ? &op.clamp_max : &op.where_other}) {
        if (b->kind == Bound::Kind::kTensor) ++lo;
      }
      hi = lo;
      break;
    }
    default:
      break;
  }
  if (n < lo || n > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(op), " takes ",
        lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, " to ", hi),
        " tensor operand", hi == 1 ? "" : "s", ", got ", n));
  }
  if (op.kind == OpSpec::Kind::kWhere &&
      (op.where_input.kind == Bound::Kind::kNone ||
       op.where_other.kind == Bound::Kind::kNone)) {
    return absl::InvalidArgumentError(
        "where takes an input and an other (each a tensor or a number)");
  }
  return absl::OkStatus();
}

OperandDesc Desc(const OpInput& x) { return OperandDesc{x.dtype, x.shape}; }

absl::StatusOr<OpResult> Result(DType dtype, Shape shape) {
  return OpResult{dtype, std::move(shape), false};
}

// A result with its family's plan for the executor, shaped `shape` (the
// plan's own `out` when it has one).
template <typename P>
OpResult WithPlan(DType dtype, Shape shape, P plan) {
  OpResult result{dtype, std::move(shape), false};
  result.plan = std::move(plan);
  return result;
}
template <typename P>
OpResult WithPlan(DType dtype, P plan) {
  Shape shape = plan.out;
  return WithPlan(dtype, std::move(shape), std::move(plan));
}

absl::StatusOr<OpResult> PlanInPlace(const OpSpec& op,
                                     std::span<const OpInput> in,
                                     const Target& target) {
  const OperandDesc self = Desc(in[0]);
  std::optional<OperandDesc> other;
  if (in.size() > 1) other.emplace(Desc(in[1]));
  const Scalar* scalar =
      !other && op.scalar.has_value() ? &*op.scalar : nullptr;
  const BinaryOp bop = InPlaceBinaryOp(op.in_place);
  std::optional<Shape> scaled_shape;  // kAxpy: alpha * other
  if (op.in_place == InPlaceOp::kAxpy) {
    if (!other) {
      return absl::InvalidArgumentError("axpy_ needs a tensor operand x");
    }
    RETURN_IF_ERROR(CheckAxpyAlpha(other->dtype, op.alpha));
    ASSIGN_OR_RETURN(BinaryPlan scaled,
                     PlanBinary(BinaryOp::kMul, *other, nullptr, &op.alpha,
                                nullptr, target));
    scaled_shape.emplace(std::move(scaled.out));
    other.emplace(OperandDesc{scaled.out_dtype, *scaled_shape});
  }
  RETURN_IF_ERROR(PlanBinary(bop, self, other ? &*other : nullptr, scalar,
                             &self, target)
                      .status());
  return OpResult{in[0].dtype, in[0].shape, true};
}

// Python's repr of a float, as PyTorch's ValueError messages print it.
std::string PyFloat(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e16) {
    return absl::StrFormat("%.1f", v);
  }
  // The shortest digits that read back as v, as Python's repr.
  for (int digits = 1; digits < 17; ++digits) {
    const std::string text = absl::StrFormat("%.*g", digits, v);
    if (std::strtod(text.c_str(), nullptr) == v) return text;
  }
  return absl::StrFormat("%.17g", v);
}

}  // namespace

absl::Status CheckOptimizerArgs(const OptimizerArgs& a) {
  auto invalid = [](std::string_view what, double v) {
    return absl::InvalidArgumentError(
        absl::StrCat("Invalid ", ToAbsl(what), ": ", PyFloat(v)));
  };
  if (!(a.lr >= 0)) return invalid("learning rate", a.lr);
  if (a.kind == OptimizerKind::kSgd) {
    if (!(a.momentum >= 0)) return invalid("momentum value", a.momentum);
    if (!(a.weight_decay >= 0)) {
      return invalid("weight_decay value", a.weight_decay);
    }
    if (a.nesterov && (a.momentum <= 0 || a.dampening != 0)) {
      return absl::InvalidArgumentError(
          "Nesterov momentum requires a momentum and zero dampening");
    }
  } else {
    if (!(a.eps >= 0)) return invalid("epsilon value", a.eps);
    if (!(a.beta1 >= 0 && a.beta1 < 1)) {
      return invalid("beta parameter at index 0", a.beta1);
    }
    if (!(a.beta2 >= 0 && a.beta2 < 1)) {
      return invalid("beta parameter at index 1", a.beta2);
    }
    if (!(a.weight_decay >= 0)) {
      return invalid("weight_decay value", a.weight_decay);
    }
  }
  if (a.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step must count from 1, got ", a.step));
  }
  return absl::OkStatus();
}

namespace {

// optimizer.step(): the arguments, then the parameters (floating) and
// each one's state tensors (its shape, dtype and device).
absl::StatusOr<OpResult> PlanOptimizerStep(const OpSpec& op,
                                           std::span<const OpInput> in) {
  const OptimizerArgs& a = op.optimizer;
  RETURN_IF_ERROR(CheckOptimizerArgs(a));
  const size_t k = static_cast<size_t>(OptimizerStateCount(a));
  const std::string name = OpName(op);
  if (in.size() % (k + 1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " takes the parameters and, for each, ", k,
        k == 1 ? " state tensor" : " state tensors", ": ", in.size(),
        " tensors is not a multiple of ", k + 1));
  }
  const size_t n = in.size() / (k + 1);
  auto describe = [](const OpInput& t) {
    return absl::StrCat(t.shape.ToString(), " ", ToAbsl(DTypeName(t.dtype)),
                        " on ", ToAbsl(t.device));
  };
  static constexpr std::string_view kStateNames[2][2] = {
      {"momentum_buffer", ""}, {"exp_avg", "exp_avg_sq"}};
  for (size_t i = 0; i < n; ++i) {
    if (!IsFloating(in[i].dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": parameter ", i, " is ", ToAbsl(DTypeName(in[i].dtype)),
          "; parameters are floating"));
    }
    for (size_t j = 0; j < k; ++j) {
      const OpInput& s = in[n * (j + 1) + i];
      if (s.dtype != in[i].dtype || !(s.shape == in[i].shape) ||
          s.device != in[i].device) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": ",
            ToAbsl(kStateNames[a.kind == OptimizerKind::kSgd ? 0 : 1][j]),
            " of parameter ", i, " is ", describe(s),
            "; the parameter is ", describe(in[i])));
      }
    }
  }
  return OpResult{in[0].dtype, in[0].shape, true};
}

absl::StatusOr<OpResult> PlanLinear(std::span<const OpInput> in,
                                    const Target& target) {
  const OpInput& x = in[0];
  const OpInput& w = in[1];
  RETURN_IF_ERROR(CheckLinearShapes(x.shape, w.shape));
  const int64_t wt_dims[] = {w.shape.dim(1), w.shape.dim(0)};
  ASSIGN_OR_RETURN(Shape wt, Shape::Make(wt_dims));
  ASSIGN_OR_RETURN(MatMulPlan y,
                   PlanMatMul(x.dtype, x.shape, w.dtype, wt, target));
  if (in.size() < 3) return WithPlan(y.dtype, std::move(y));
  const OperandDesc bias = Desc(in[2]);
  const OperandDesc out{y.dtype, y.out};
  if (x.shape.rank() == 2 || x.shape.rank() == 3) {
    // torch: addmm(bias, x as [rows, in], w.t()), which expands the bias
    // to [rows, out]; other ranks add it in place (the `into` below).
    const int64_t rows = x.shape.NumElements(0, x.shape.rank() - 1);
    const int64_t mm_dims[] = {rows, w.shape.dim(0)};
    ASSIGN_OR_RETURN(const Shape mm, Shape::Make(mm_dims));
    RETURN_IF_ERROR(CheckExpand(bias.shape, mm));
  }
  ASSIGN_OR_RETURN(BinaryPlan sum, PlanBinary(BinaryOp::kAdd, out, &bias,
                                              nullptr, &out, target));
  return WithPlan(sum.out_dtype, std::move(sum.out), std::move(y));
}

absl::StatusOr<OpResult> PlanClampOp(const OpSpec& op,
                                     std::span<const OpInput> in,
                                     const Target& target) {
  const bool min_tensor = op.clamp_min.kind == Bound::Kind::kTensor;
  const bool max_tensor = op.clamp_max.kind == Bound::Kind::kTensor;
  std::optional<OperandDesc> lo, hi;
  if (min_tensor) lo.emplace(Desc(in[1]));
  if (max_tensor) hi.emplace(Desc(in[min_tensor ? 2 : 1]));
  const Scalar* lo_number =
      op.clamp_min.kind == Bound::Kind::kScalar ? &op.clamp_min.scalar : nullptr;
  const Scalar* hi_number =
      op.clamp_max.kind == Bound::Kind::kScalar ? &op.clamp_max.scalar : nullptr;
  ASSIGN_OR_RETURN(const DType dtype,
                   PlanClamp(Desc(in[0]), lo ? &*lo : nullptr, lo_number,
                             hi ? &*hi : nullptr, hi_number));
  // As the executor runs it: every tensor in the result dtype, then
  // maximum(x, min), then minimum(that, max).
  for (const OpInput& t : in) RETURN_IF_ERROR(PlanCast(t.dtype, dtype, target));
  Shape out = in[0].shape;
  auto step = [&](BinaryOp bop, const std::optional<OperandDesc>& bound,
                  const Scalar* number) -> absl::Status {
    std::optional<OperandDesc> b;
    if (bound) b.emplace(OperandDesc{dtype, bound->shape});
    ASSIGN_OR_RETURN(BinaryPlan plan,
                     PlanBinary(bop, OperandDesc{dtype, out},
                                b ? &*b : nullptr, b ? nullptr : number,
                                nullptr, target));
    out = std::move(plan.out);
    return absl::OkStatus();
  };
  if (op.clamp_min.kind != Bound::Kind::kNone) {
    RETURN_IF_ERROR(step(BinaryOp::kMaximum, lo, lo_number));
  }
  if (op.clamp_max.kind != Bound::Kind::kNone) {
    RETURN_IF_ERROR(step(BinaryOp::kMinimum, hi, hi_number));
  }
  return WithPlan(dtype, std::move(out), ClampPlan{dtype});
}

absl::StatusOr<OpResult> PlanWhereOp(const OpSpec& op,
                                     std::span<const OpInput> in,
                                     const Target& target) {
  size_t next = 1;
  std::optional<OperandDesc> x, y;
  if (op.where_input.kind == Bound::Kind::kTensor) x.emplace(Desc(in[next++]));
  if (op.where_other.kind == Bound::Kind::kTensor) y.emplace(Desc(in[next++]));
  ASSIGN_OR_RETURN(
      WherePlan plan,
      PlanWhere(Desc(in[0]), x ? &*x : nullptr,
                x ? nullptr : &op.where_input.scalar, y ? &*y : nullptr,
                y ? nullptr : &op.where_other.scalar, target));
  return WithPlan(plan.dtype, std::move(plan));
}

absl::StatusOr<OpResult> PlanReduceOp(const OpSpec& op, const OpInput& x,
                                      const Target& target) {
  std::span<const int64_t> dims = op.reduce_dims;
  if (dims.empty() && op.dim.has_value()) dims = std::span(&*op.dim, 1);
  ASSIGN_OR_RETURN(ReducePlan plan, PlanReduce(op.reduce, x.dtype, x.shape,
                                               dims, op.keepdim, target));
  return WithPlan(plan.out_dtype, std::move(plan));
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> TransposePerm(const OpSpec& op,
                                                   int rank) {
  ASSIGN_OR_RETURN(const int d0, WrapDim(op.dim.value_or(0), rank));
  ASSIGN_OR_RETURN(const int d1, WrapDim(op.dim1, rank));
  std::vector<int64_t> perm(rank);
  for (int i = 0; i < rank; ++i) perm[i] = i;
  if (rank > 0) std::swap(perm[d0], perm[d1]);
  return perm;
}

PoolKind PoolKindOf(const OpSpec& op) {
  return op.kind == OpSpec::Kind::kMaxPool2d ? PoolKind::kMax : PoolKind::kAvg;
}

absl::StatusOr<SlicePlan> PlanSliceOp(const OpSpec& op, const Shape& x) {
  return op.kind == OpSpec::Kind::kSelect
             ? PlanSelect(x, op.dim.value_or(0), op.start)
             : PlanNarrow(x, op.dim.value_or(0), op.start, op.length);
}

absl::StatusOr<OpResult> PlanOp(const OpSpec& op,
                                std::span<const OpInput> in,
                                const Target& target) {
  RETURN_IF_ERROR(CheckArity(op, in.size()));
  // zero_grad's tensors may live anywhere, an optimizer step's parameters
  // too (each with its state); every other op's on one device.
  const bool one_device = op.kind != OpSpec::Kind::kZeroGrad &&
                          op.kind != OpSpec::Kind::kOptimizerStep;
  for (size_t i = 1; i < in.size() && one_device; ++i) {
    if (in[i].device != in[0].device) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Expected all tensors to be on the same device, but found at least "
          "two devices, ",
          ToAbsl(in[0].device), " and ", ToAbsl(in[i].device), "!"));
    }
  }
  const OpInput& x = in[0];
  switch (op.kind) {
    case OpSpec::Kind::kBinary: {
      std::optional<OperandDesc> b;
      if (in.size() > 1) b.emplace(Desc(in[1]));
      ASSIGN_OR_RETURN(
          BinaryPlan plan,
          PlanBinary(op.binary, Desc(x), b ? &*b : nullptr,
                     b ? nullptr : &*op.scalar, nullptr, target,
                     !b && op.scalar_first));
      return WithPlan(plan.out_dtype, std::move(plan));
    }
    case OpSpec::Kind::kInPlace:
      return PlanInPlace(op, in, target);
    case OpSpec::Kind::kUnary: {
      ASSIGN_OR_RETURN(const DType dtype, PlanUnary(op.unary, x.dtype, target));
      return WithPlan(dtype, x.shape, UnaryPlan{dtype});
    }
    case OpSpec::Kind::kMatMul: {
      ASSIGN_OR_RETURN(MatMulPlan plan, PlanMatMul(x.dtype, x.shape, in[1].dtype,
                                                   in[1].shape, target));
      return WithPlan(plan.dtype, std::move(plan));
    }
    case OpSpec::Kind::kLinear:
      return PlanLinear(in, target);
    case OpSpec::Kind::kReduce:
      return PlanReduceOp(op, x, target);
    case OpSpec::Kind::kSoftmax: {
      ASSIGN_OR_RETURN(
          SoftmaxPlan plan,
          PlanSoftmax(x.dtype, x.shape, op.dim.value_or(-1), op.log));
      return WithPlan(x.dtype, x.shape, plan);
    }
    case OpSpec::Kind::kClamp:
      return PlanClampOp(op, in, target);
    case OpSpec::Kind::kWhere:
      return PlanWhereOp(op, in, target);
    case OpSpec::Kind::kPermute: {
      ASSIGN_OR_RETURN(PermutePlan plan, PlanPermute(x.shape, op.dims));
      return WithPlan(x.dtype, std::move(plan));
    }
    case OpSpec::Kind::kTranspose: {
      ASSIGN_OR_RETURN(const std::vector<int64_t> perm,
                       TransposePerm(op, x.shape.rank()));
      ASSIGN_OR_RETURN(PermutePlan plan, PlanPermute(x.shape, perm));
      return WithPlan(x.dtype, std::move(plan));
    }
    case OpSpec::Kind::kReshape: {
      ASSIGN_OR_RETURN(Shape shape, PlanReshape(x.shape, op.dims));
      return WithPlan(x.dtype, ReshapePlan{std::move(shape)});
    }
    case OpSpec::Kind::kNarrow:
    case OpSpec::Kind::kSelect: {
      ASSIGN_OR_RETURN(SlicePlan plan, PlanSliceOp(op, x.shape));
      return WithPlan(x.dtype, std::move(plan));
    }
    case OpSpec::Kind::kCat: {
      std::vector<OperandDesc> descs;
      descs.reserve(in.size());
      for (const OpInput& t : in) descs.push_back(Desc(t));
      ASSIGN_OR_RETURN(CatPlan plan,
                       PlanCat(descs, op.dim.value_or(0), target));
      return WithPlan(plan.dtype, std::move(plan));
    }
    case OpSpec::Kind::kCast:
      RETURN_IF_ERROR(ValidateDType(op.dtype));
      RETURN_IF_ERROR(PlanCast(x.dtype, op.dtype, target));
      return Result(op.dtype, x.shape);
    case OpSpec::Kind::kConv2d: {
      std::optional<OperandDesc> bias;
      if (in.size() > 2) bias.emplace(Desc(in[2]));
      ASSIGN_OR_RETURN(Conv2dPlan plan,
                       PlanConv2d(Desc(x), Desc(in[1]), bias ? &*bias : nullptr,
                                  op.window, target));
      return WithPlan(plan.dtype, std::move(plan));
    }
    case OpSpec::Kind::kMaxPool2d:
    case OpSpec::Kind::kAvgPool2d: {
      ASSIGN_OR_RETURN(Pool2dPlan plan,
                       PlanPool2d(PoolKindOf(op), x.dtype, x.shape, op.window,
                                  target));
      return WithPlan(x.dtype, std::move(plan));
    }
    case OpSpec::Kind::kAdaptiveAvgPool2d: {
      ASSIGN_OR_RETURN(AdaptivePoolPlan plan,
                       PlanAdaptiveAvgPool2d(x.dtype, x.shape,
                                             op.window.output_size, target));
      return WithPlan(x.dtype, std::move(plan));
    }
    case OpSpec::Kind::kDropout:
      RETURN_IF_ERROR(PlanDropout(x.dtype, op.dropout_p, op.train, target));
      return Result(x.dtype, x.shape);
    case OpSpec::Kind::kNorm: {
      absl::InlinedVector<OperandDesc, 5> descs;
      for (const OpInput& t : in) descs.push_back(Desc(t));
      ASSIGN_OR_RETURN(NormPlan plan,
                       PlanNorm(op.norm, op.train, descs, target));
      return WithPlan(plan.dtype, std::move(plan));
    }
    case OpSpec::Kind::kLoss: {
      ASSIGN_OR_RETURN(LossPlan plan, PlanLoss(op.loss, op.reduction, Desc(x),
                                               Desc(in[1]), target));
      return WithPlan(plan.dtype, std::move(plan));
    }
    case OpSpec::Kind::kRequiresGrad:
      RETURN_IF_ERROR(CheckRequiresGrad(op.requires_grad, x.dtype));
      return OpResult{x.dtype, x.shape, true};
    case OpSpec::Kind::kBackward:
      RETURN_IF_ERROR(CheckBackwardRoot(x.shape, in.size() > 1
                                                     ? &in[1].shape
                                                     : nullptr));
      return OpResult{x.dtype, x.shape, true};
    case OpSpec::Kind::kZeroGrad:
      return OpResult{x.dtype, x.shape, true};
    case OpSpec::Kind::kGrad:
    case OpSpec::Kind::kDetach:
      return Result(x.dtype, x.shape);
    case OpSpec::Kind::kOptimizerStep:
      return PlanOptimizerStep(op, in);
    case OpSpec::Kind::kMoveTo:
      return absl::InvalidArgumentError(
          "to(device) is the To request, not an op of Run or Execute");
  }
  return absl::InternalError(absl::StrCat("PlanOp: unknown op kind ",
                                          static_cast<int>(op.kind)));
}

}  // namespace tensord::core
