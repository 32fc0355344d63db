#include "core/planner.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/absl_compat.h"
#include "core/op_checks.h"
#include "core/status.h"

namespace tensord::core {
namespace {

// The dtype of tensor (op) number: the number promotes by category only
// (bool < integral < floating); a higher-category number gives that
// category's default dtype (int64, float32).
DType ScalarResultType(DType t, const Scalar& s) {
  const int scalar_category = s.is_integral ? 1 : 2;
  const int tensor_category = t == DType::kBool ? 0 : IsIntegral(t) ? 1 : 2;
  if (scalar_category > tensor_category) {
    return s.is_integral ? DType::kInt64 : DType::kFloat32;
  }
  return t;
}

// c10's combine_categories: the lower class's dtype counts only when its
// category (bool < integral < floating) is higher.
std::optional<DType> CombineCategories(std::optional<DType> higher,
                                       std::optional<DType> lower) {
  if (!higher.has_value()) return lower;
  if (!lower.has_value() || IsFloating(*higher)) return higher;
  if (*higher == DType::kBool || IsFloating(*lower)) {
    return PromoteTypes(*higher, *lower);
  }
  return higher;
}

// PyTorch's result_type over any number of tensors and numbers (c10's
// ResultTypeState): dimensioned tensors, 0-d tensors and numbers promote
// within their class (an integer number as int64, a float one as float32,
// the default dtype), then the classes combine by category.
class ResultTypeState {
 public:
  void Add(const OperandDesc& t) {
    Fold(t.shape.rank() == 0 ? zero_dim_ : dim_, t.dtype);
  }
  void Add(const Scalar& s) {
    Fold(number_, s.is_integral ? DType::kInt64 : DType::kFloat32);
  }
  DType Result() const {
    return CombineCategories(dim_, CombineCategories(zero_dim_, number_))
        .value_or(DType::kFloat32);
  }

 private:
  static void Fold(std::optional<DType>& into, DType t) {
    into = into.has_value() ? PromoteTypes(*into, t) : t;
  }
  std::optional<DType> dim_, zero_dim_, number_;
};

}  // namespace

bool CanCast(DType from, DType to) {
  if (IsFloating(from) && !IsFloating(to)) return false;
  if (from != DType::kBool && to == DType::kBool) return false;
  return true;
}

Target TargetOf(const Device& device) {
  return Target{device.capabilities(), device.name()};
}

absl::Status PlanCast(DType from, DType to, const Target& target) {
  if (from == to) return absl::OkStatus();
  RETURN_IF_ERROR(target.Supports(OpKind::kCast, from));
  return target.Supports(OpKind::kCast, to);
}

DType NumberDType(const Scalar& s) {
  return s.is_integral ? DType::kInt64 : DType::kFloat64;
}

absl::StatusOr<BinaryPlan> PlanBinary(BinaryOp op, const OperandDesc& a,
                                      const OperandDesc* b,
                                      const Scalar* scalar,
                                      const OperandDesc* into,
                                      const Target& target) {
  BinaryPlan plan;
  plan.out = a.shape;
  if (b != nullptr) {
    ASSIGN_OR_RETURN(plan.out, BroadcastShapes(a.shape, b->shape));
    plan.compute = ResultType(a.dtype, a.shape.rank() == 0, b->dtype,
                              b->shape.rank() == 0);
  } else {
    plan.compute = ScalarResultType(a.dtype, *scalar);
  }
  // True division: integer and bool quotients are float32, PyTorch's
  // default floating dtype.
  if (op == BinaryOp::kDiv && !IsFloating(plan.compute)) {
    plan.compute = DType::kFloat32;
  }
  plan.out_dtype = IsComparison(op) ? DType::kBool : plan.compute;
  RETURN_IF_ERROR(CheckBinaryOpDType(op, plan.compute));
  if (into != nullptr) {
    if (plan.out != into->shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output with shape ", into->shape.ToString(),
          " doesn't match the broadcast shape ", plan.out.ToString()));
    }
    if (!CanCast(plan.out_dtype, into->dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("result type ", ToAbsl(DTypeName(plan.out_dtype)),
                       " can't be cast to the desired output type ",
                       ToAbsl(DTypeName(into->dtype))));
    }
  }
  RETURN_IF_ERROR(target.Supports(OpKind::kBinary, plan.compute));
  RETURN_IF_ERROR(PlanCast(a.dtype, plan.compute, target));
  RETURN_IF_ERROR(PlanCast(b != nullptr ? b->dtype : NumberDType(*scalar),
                           plan.compute, target));
  if (into != nullptr) {
    RETURN_IF_ERROR(PlanCast(plan.out_dtype, into->dtype, target));
  }
  return plan;
}

absl::StatusOr<DType> PlanUnary(UnaryOp op, DType x, const Target& target) {
  RETURN_IF_ERROR(CheckUnaryOpDType(op, x));
  const DType compute =
      IsFloatingUnary(op) && !IsFloating(x) ? DType::kFloat32 : x;
  RETURN_IF_ERROR(target.Supports(OpKind::kUnary, compute));
  RETURN_IF_ERROR(PlanCast(x, compute, target));
  return compute;
}

absl::Status CheckLinearShapes(const Shape& x, const Shape& w) {
  if (w.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linear: weight must be 2-D [out_features, in_features], but has "
        "shape ",
        w.ToString()));
  }
  if (x.rank() == 0 || x.dim(x.rank() - 1) != w.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linear: input shape ", x.ToString(), " and weight shape ",
        w.ToString(),
        " do not match: the input's last dim must equal in_features (",
        w.dim(1), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CatPlan> PlanCat(std::span<const OperandDesc> xs, int64_t dim,
                                const Target& target) {
  if (xs.empty()) {
    return absl::InvalidArgumentError(
        "cat: expected a non-empty list of tensors");
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].shape.rank() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cat: zero-dimensional tensor (at position ", i,
                       ") cannot be concatenated"));
    }
  }
  const Shape& first = xs[0].shape;
  const int rank = first.rank();
  CatPlan plan;
  ASSIGN_OR_RETURN(plan.axis, WrapDim(dim, rank));
  plan.dtype = xs[0].dtype;
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Shape& t = xs[i].shape;
    if (t.rank() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cat: tensors must have the same number of dimensions: got shapes ",
          first.ToString(), " and ", t.ToString(), " (tensor number ", i, ")"));
    }
    for (int d = 0; d < rank; ++d) {
      if (d != plan.axis && t.dim(d) != first.dim(d)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cat: sizes of tensors must match except in dimension ", plan.axis,
            ": shapes ", first.ToString(), " and ", t.ToString(),
            " (tensor number ", i, ") differ in dimension ", d));
      }
    }
    plan.dtype = PromoteTypes(plan.dtype, xs[i].dtype);
    total += t.dim(plan.axis);
  }
  std::vector<int64_t> out_dims = first.dims();
  out_dims[plan.axis] = total;
  ASSIGN_OR_RETURN(plan.out, Shape::Make(out_dims));
  for (const OperandDesc& x : xs) {
    RETURN_IF_ERROR(PlanCast(x.dtype, plan.dtype, target));
  }
  return plan;
}

absl::StatusOr<int> WrapDim(int64_t dim, int rank) {
  const int64_t r = std::max(rank, 1);
  if (dim < -r || dim >= r) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dimension out of range (expected to be in range of [", -r,
                     ", ", r - 1, "], but got ", dim, ")"));
  }
  return static_cast<int>(dim < 0 ? dim + r : dim);
}

absl::StatusOr<MatMulPlan> PlanMatMul(DType a_dtype, const Shape& a,
                                      DType b_dtype, const Shape& b,
                                      const Target& target) {
  const std::string shapes = absl::StrCat(a.ToString(), " and ", b.ToString());
  if (a.rank() == 0 || b.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "both arguments to matmul need to be at least 1D, but they are ",
        a.rank(), "D and ", b.rank(), "D (shapes ", shapes, ")"));
  }
  if (a_dtype != b_dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected both operands to have the same dtype, but got ",
                     ToAbsl(DTypeName(a_dtype)), " and ",
                     ToAbsl(DTypeName(b_dtype)), " (shapes ", shapes, ")"));
  }
  MatMulPlan plan;
  plan.dtype = a_dtype;
  const std::vector<int64_t>& ad = a.dims();
  const std::vector<int64_t>& bd = b.dims();
  const bool a_vector = ad.size() == 1, b_vector = bd.size() == 1;
  plan.m = a_vector ? 1 : ad[ad.size() - 2];
  plan.k = ad.back();
  const int64_t kb = b_vector ? bd[0] : bd[bd.size() - 2];
  plan.n = b_vector ? 1 : bd.back();
  if (plan.k != kb) {
    return absl::InvalidArgumentError(absl::StrCat("matmul: shapes ", shapes,
                                                   " cannot be multiplied (",
                                                   plan.k, " != ", kb, ")"));
  }
  const std::span<const int64_t> a_batch_dims(ad.data(),
                                              a_vector ? 0 : ad.size() - 2);
  const std::span<const int64_t> b_batch_dims(bd.data(),
                                              b_vector ? 0 : bd.size() - 2);
  ASSIGN_OR_RETURN(plan.a_batch, Shape::Make(a_batch_dims));
  ASSIGN_OR_RETURN(plan.b_batch, Shape::Make(b_batch_dims));
  absl::StatusOr<Shape> batch = BroadcastShapes(plan.a_batch, plan.b_batch);
  if (!batch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul: shapes ", shapes, " cannot be multiplied: batch dimensions ",
        batch.status().message()));
  }
  plan.batch = *std::move(batch);
  std::vector<int64_t> out_dims = plan.batch.dims();
  if (!a_vector) out_dims.push_back(plan.m);
  if (!b_vector) out_dims.push_back(plan.n);
  ASSIGN_OR_RETURN(plan.out, Shape::Make(out_dims));
  RETURN_IF_ERROR(target.Supports(OpKind::kMatMul, plan.dtype));
  return plan;
}

absl::StatusOr<ReducePlan> PlanReduce(ReduceOp op, DType dtype, const Shape& x,
                                      std::optional<int64_t> dim, bool keepdim,
                                      const Target& target) {
  if (!dim.has_value()) {
    return PlanReduce(op, dtype, x, std::span<const int64_t>(), keepdim,
                      target);
  }
  return PlanReduce(op, dtype, x, std::span<const int64_t>(&*dim, 1), keepdim,
                    target);
}

absl::StatusOr<ReducePlan> PlanReduce(ReduceOp op, DType dtype, const Shape& x,
                                      std::span<const int64_t> dims,
                                      bool keepdim, const Target& target) {
  ReducePlan plan;
  plan.compute = dtype;
  if (op == ReduceOp::kSum && !IsFloating(dtype)) plan.compute = DType::kInt64;
  if (op == ReduceOp::kMean && !IsFloating(dtype)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mean(): could not infer output dtype. Input dtype must be either a "
        "floating point or complex dtype. Got: ",
        ToAbsl(DTypeName(dtype))));
  }
  if (op == ReduceOp::kNorm && !IsFloating(dtype)) {
    return absl::FailedPreconditionError(
        absl::StrCat("norm(): expected a floating point tensor as input. Got: ",
                     ToAbsl(DTypeName(dtype))));
  }
  const bool needs_element =
      op == ReduceOp::kMax || op == ReduceOp::kMin || op == ReduceOp::kArgmax;
  if (needs_element && dims.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(ReduceOpName(op)), "() reduces over one dim, got ",
                     dims.size(), " dims"));
  }
  plan.out_dtype = op == ReduceOp::kArgmax ? DType::kInt64 : plan.compute;
  const int rank = x.rank();
  // Which dims are reduced: all when none are named.
  // (A 0-d tensor's dim 0, or -1, is the tensor itself: one slot.)
  std::vector<bool> reduced(std::max(rank, 1), dims.empty());
  for (int64_t d : dims) {
    ASSIGN_OR_RETURN(int axis, WrapDim(d, rank));
    if (reduced[axis]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dim ", axis, " appears multiple times in the list of dims"));
    }
    reduced[axis] = true;
  }
  std::vector<int64_t> kept, gone, out_dims;
  for (int i = 0; i < rank; ++i) {
    (reduced[i] ? gone : kept).push_back(i);
    if (!reduced[i]) {
      out_dims.push_back(x.dim(i));
    } else if (keepdim) {
      out_dims.push_back(1);
    }
  }
  if (gone.empty()) {
    plan.dims.n = x.NumElements();  // a 0-d tensor: its one element
  } else if (gone.back() - gone.front() + 1 ==
             static_cast<int64_t>(gone.size())) {
    // One run of adjacent dims: [outer, n, inner] as the tensor lies.
    plan.dims.outer = x.NumElements(0, gone.front());
    plan.dims.n = x.NumElements(gone.front(), gone.back() + 1);
    plan.dims.inner = x.NumElements(gone.back() + 1, rank);
  } else {
    // Kept dims first, reduced dims last: [outer, n, 1] after a permute.
    plan.perm = kept;
    plan.perm.insert(plan.perm.end(), gone.begin(), gone.end());
    std::vector<int64_t> moved_dims;
    for (int64_t i : plan.perm)
      moved_dims.push_back(x.dim(static_cast<int>(i)));
    ASSIGN_OR_RETURN(const Shape moved, Shape::Make(moved_dims));
    const int k = static_cast<int>(kept.size());
    plan.dims.outer = moved.NumElements(0, k);
    plan.dims.n = moved.NumElements(k, rank);
  }
  if (needs_element && plan.dims.n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(ReduceOpName(op)),
                     "(): cannot reduce over an empty dimension (input shape ",
                     x.ToString(), ")"));
  }
  ASSIGN_OR_RETURN(plan.out, Shape::Make(out_dims));
  RETURN_IF_ERROR(target.Supports(OpKind::kReduce, plan.compute));
  RETURN_IF_ERROR(PlanCast(dtype, plan.compute, target));
  return plan;
}

absl::StatusOr<WherePlan> PlanWhere(
    const OperandDesc& cond, const OperandDesc* x, const Scalar* x_scalar,
    const OperandDesc* y, const Scalar* y_scalar, const Target& target) {
  if (cond.dtype != DType::kBool) {
    return absl::FailedPreconditionError(absl::StrCat(
        "where expected condition to be a boolean tensor, but got a tensor "
        "with dtype ",
        ToAbsl(DTypeName(cond.dtype))));
  }
  WherePlan plan;
  plan.out = cond.shape;
  for (const OperandDesc* t : {x, y}) {
    if (t == nullptr) continue;
    ASSIGN_OR_RETURN(plan.out, BroadcastShapes(plan.out, t->shape));
  }
  if (x != nullptr && y != nullptr) {
    plan.dtype = ResultType(x->dtype, x->shape.rank() == 0, y->dtype,
                            y->shape.rank() == 0);
  } else if (x != nullptr || y != nullptr) {
    plan.dtype = ScalarResultType(x != nullptr ? x->dtype : y->dtype,
                                  x != nullptr ? *y_scalar : *x_scalar);
  } else {
    plan.dtype = x_scalar->is_integral && y_scalar->is_integral
                     ? DType::kInt64
                     : DType::kFloat32;
  }
  RETURN_IF_ERROR(target.Supports(OpKind::kWhere, plan.dtype));
  RETURN_IF_ERROR(PlanCast(x != nullptr ? x->dtype : NumberDType(*x_scalar),
                           plan.dtype, target));
  RETURN_IF_ERROR(PlanCast(y != nullptr ? y->dtype : NumberDType(*y_scalar),
                           plan.dtype, target));
  return plan;
}

absl::StatusOr<DType> PlanClamp(const OperandDesc& x, const OperandDesc* min,
                                const Scalar* min_scalar,
                                const OperandDesc* max,
                                const Scalar* max_scalar) {
  if (min == nullptr && min_scalar == nullptr && max == nullptr &&
      max_scalar == nullptr) {
    return absl::InvalidArgumentError(
        "torch.clamp: At least one of 'min' or 'max' must not be None");
  }
  ResultTypeState state;
  state.Add(x);
  for (const OperandDesc* t : {min, max}) {
    if (t != nullptr) state.Add(*t);
  }
  for (const Scalar* s : {min_scalar, max_scalar}) {
    if (s != nullptr) state.Add(*s);
  }
  return state.Result();
}

absl::StatusOr<SoftmaxPlan> PlanSoftmax(DType dtype, const Shape& x,
                                        int64_t dim, bool log) {
  if (!IsFloating(dtype)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "\"", log ? "log_softmax" : "softmax", "\" not implemented for '",
        ToAbsl(DTypeName(dtype)), "'"));
  }
  SoftmaxPlan plan;
  plan.compute = dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  ASSIGN_OR_RETURN(const int axis, WrapDim(dim, x.rank()));
  plan.axis = axis;
  return plan;
}

absl::Status PlanDropout(DType dtype, double p, bool train,
                         const Target& target) {
  if (!(p >= 0 && p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dropout probability has to be between 0 and 1, but got ", p));
  }
  if (!IsFloating(dtype) ||
      (train && !target.caps.Has(OpKind::kRandomFill, DType::kFloat32))) {
    return NotImplementedError("dropout", dtype, target.device);
  }
  return absl::OkStatus();
}

namespace {

// The block [start, start + length) along dim of x, as narrow() (the
// caller has checked the range).
absl::StatusOr<SlicePlan> SliceOf(const Shape& x, int axis, int64_t start,
                                  int64_t length, bool drop_axis) {
  SlicePlan plan;
  plan.axis = axis;
  plan.start = start;
  plan.length = length;
  std::vector<int64_t> dims = x.dims();
  if (drop_axis) {
    dims.erase(dims.begin() + axis);
  } else {
    dims[axis] = length;
  }
  ASSIGN_OR_RETURN(plan.out, Shape::Make(dims));
  return plan;
}

absl::Status CheckNot0d(const Shape& x, std::string_view op) {
  if (x.rank() != 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(ToAbsl(op), "() cannot be applied to a 0-dim tensor."));
}

}  // namespace

absl::StatusOr<SlicePlan> PlanNarrow(const Shape& x, int64_t dim, int64_t start,
                                     int64_t length) {
  RETURN_IF_ERROR(CheckNot0d(x, "narrow"));
  ASSIGN_OR_RETURN(const int axis, WrapDim(dim, x.rank()));
  const int64_t size = x.dim(axis);
  const int64_t wrapped = start < 0 ? start + size : start;
  if (wrapped < 0 || wrapped > size || length < 0 || length > size - wrapped) {
    return absl::InvalidArgumentError(
        absl::StrCat("narrow(): start ", start, " and length ", length,
                     " are out of range for dimension ", axis, " of size ",
                     size, " (shape ", x.ToString(), ")"));
  }
  return SliceOf(x, axis, wrapped, length, false);
}

absl::StatusOr<SlicePlan> PlanSelect(const Shape& x, int64_t dim,
                                     int64_t index) {
  RETURN_IF_ERROR(CheckNot0d(x, "select"));
  ASSIGN_OR_RETURN(const int axis, WrapDim(dim, x.rank()));
  const int64_t size = x.dim(axis);
  const int64_t wrapped = index < 0 ? index + size : index;
  if (wrapped < 0 || wrapped >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "select(): index ", index, " out of range for tensor of size ",
        x.ToString(), " at dimension ", axis));
  }
  return SliceOf(x, axis, wrapped, 1, true);
}

absl::Status CheckAxpyAlpha(DType other, const Scalar& alpha) {
  if (alpha.is_integral || IsFloating(other)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "axpy_: for integral input tensors, alpha must not be a floating "
      "point number (got ",
      alpha.ToString(), ")"));
}

absl::StatusOr<PermutePlan> PlanPermute(const Shape& x,
                                        std::span<const int64_t> dims) {
  const int rank = x.rank();
  if (static_cast<int>(dims.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "permute: number of dims don't match: the order has ", dims.size(),
        " dims but the input has shape ", x.ToString()));
  }
  PermutePlan plan;
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> out_dims;
  for (int64_t d : dims) {
    ASSIGN_OR_RETURN(int axis, WrapDim(d, rank));
    if (seen[axis]) {
      return absl::InvalidArgumentError(
          absl::StrCat("permute: dim ", axis, " appears more than once in [",
                       absl::StrJoin(dims, ", "), "]"));
    }
    seen[axis] = true;
    plan.perm.push_back(axis);
    out_dims.push_back(x.dim(axis));
  }
  ASSIGN_OR_RETURN(plan.out, Shape::Make(out_dims));
  return plan;
}

absl::StatusOr<Shape> PlanReshape(const Shape& x,
                                  std::span<const int64_t> dims) {
  const int64_t numel = x.NumElements();
  auto invalid = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("shape '[", absl::StrJoin(dims, ", "),
                     "]' is invalid for input of size ", numel, " (shape ",
                     x.ToString(), ")"));
  };
  std::vector<int64_t> out_dims(dims.begin(), dims.end());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out_dims.size(); ++i) {
    if (out_dims[i] == -1) {
      if (infer >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("reshape: only one dimension can be inferred in [",
                         absl::StrJoin(dims, ", "), "]"));
      }
      infer = static_cast<int>(i);
    } else if (out_dims[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reshape: invalid shape dimension ", out_dims[i],
                       " in [", absl::StrJoin(dims, ", "), "]"));
    } else if (__builtin_mul_overflow(known, out_dims[i], &known)) {
      return invalid();
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) return invalid();
    out_dims[infer] = numel / known;
  }
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(out_dims));
  if (shape.NumElements() != numel) return invalid();
  return shape;
}

absl::Status CheckRequiresGrad(bool requires_grad, DType dtype) {
  if (!requires_grad || IsFloating(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "only Tensors of floating point dtype can require "
      "gradients");
}

absl::Status CheckBackwardRoot(const Shape& root, const Shape* grad) {
  auto torch_size = [](const Shape& s) {
    return absl::StrCat("torch.Size([", absl::StrJoin(s.dims(), ", "), "])");
  };
  if (grad == nullptr) {
    if (root.NumElements() == 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "grad can be implicitly created only for scalar outputs");
  }
  if (*grad == root) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "Mismatch in shape: grad_output[0] has a shape of ", torch_size(*grad),
      " and output[0] has a shape of ", torch_size(root), "."));
}

}  // namespace tensord::core
