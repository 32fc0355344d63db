#include "core/planner/planner.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/absl_compat.h"
#include "core/base/error_kind.h"
#include "core/base/op_checks.h"
#include "core/base/status.h"

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

namespace {
std::atomic<uint64_t> plan_calls[static_cast<int>(Planner::kCount)];
}  // namespace

void CountPlan(Planner family) {
  plan_calls[static_cast<int>(family)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t PlanCalls(Planner family) {
  return plan_calls[static_cast<int>(family)].load(std::memory_order_relaxed);
}

absl::StatusOr<BinaryPlan> PlanBinary(BinaryOp op, const OperandDesc& a,
                                      const OperandDesc* b,
                                      const Scalar* scalar,
                                      const OperandDesc* into,
                                      const Target& target,
                                      bool scalar_first) {
  CountPlan(Planner::kBinary);
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
  if (op == BinaryOp::kPow && scalar != nullptr && !scalar_first &&
      scalar->is_integral && scalar->i < 0 && !IsFloating(plan.compute)) {
    return absl::InvalidArgumentError(
        "Integers to negative integer powers are not allowed.");
  }
  if (into != nullptr) {
    if (plan.out != into->shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output with shape ", into->shape.ToString(),
          " doesn't match the broadcast shape ", plan.out.ToString()));
    }
    if (!CanCast(plan.out_dtype, into->dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("result type ", ToAbsl(ScalarTypeName(plan.out_dtype)),
                       " can't be cast to the desired output type ",
                       ToAbsl(ScalarTypeName(into->dtype))));
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
  CountPlan(Planner::kUnary);
  RETURN_IF_ERROR(CheckUnaryOpDType(op, x));
  const DType compute =
      IsFloatingUnary(op) && !IsFloating(x) ? DType::kFloat32 : x;
  RETURN_IF_ERROR(target.Supports(OpKind::kUnary, compute));
  RETURN_IF_ERROR(PlanCast(x, compute, target));
  return compute;
}

absl::Status CheckLinearShapes(const Shape& x, const Shape& w) {
  // torch: matmul(x, w.t()) (addmm for a 2-D x), so w.t()'s and matmul's
  // errors; PlanMatMul of x and w's transpose gives the latter.
  if (w.rank() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("t() expects a tensor with <= 2 dimensions, but self is ",
                     w.rank(), "D"));
  }
  if (x.rank() == 0 || w.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "both arguments to matmul need to be at least 1D, but they are ",
        x.rank(), "D and ", w.rank(), "D"));
  }
  if (w.rank() == 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linear: weight must be 2-D [out_features, in_features], but has "
        "shape ",
        w.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CatPlan> PlanCat(std::span<const OperandDesc> xs, int64_t dim,
                                const Target& target) {
  CountPlan(Planner::kCat);
  if (xs.empty()) {
    return absl::InvalidArgumentError(
        "torch.cat(): expected a non-empty list of Tensors");
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].shape.rank() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("zero-dimensional tensor (at position ", i,
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
      return absl::InvalidArgumentError(
          absl::StrCat("Tensors must have same number of dimensions: got ",
                       rank, " and ", t.rank()));
    }
    for (int d = 0; d < rank; ++d) {
      if (d != plan.axis && t.dim(d) != first.dim(d)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Sizes of tensors must match except in dimension ", plan.axis,
            ". Expected size ", first.dim(d), " but got size ", t.dim(d),
            " for tensor number ", i, " in the list."));
      }
    }
    plan.dtype = PromoteTypes(plan.dtype, xs[i].dtype);
    total += t.dim(plan.axis);
  }
  std::vector<int64_t> out_dims = first.DimsVector();
  out_dims[plan.axis] = total;
  ASSIGN_OR_RETURN(plan.out, Shape::Make(out_dims));
  for (const OperandDesc& x : xs) {
    RETURN_IF_ERROR(PlanCast(x.dtype, plan.dtype, target));
  }
  return plan;
}

namespace {

// torch's maybe_wrap_dim over `size` positions (a rank, or narrow's start
// within a dim): IndexError past them; a size of 0 counts as 1.
absl::StatusOr<int64_t> Wrap(int64_t index, int64_t size) {
  const int64_t r = std::max<int64_t>(size, 1);
  if (index < -r || index >= r) {
    return IndexError(
        absl::StrCat("Dimension out of range (expected to be in range of [", -r,
                     ", ", r - 1, "], but got ", index, ")"));
  }
  return index < 0 ? index + r : index;
}

}  // namespace

absl::StatusOr<int> WrapDim(int64_t dim, int rank) {
  ASSIGN_OR_RETURN(const int64_t wrapped, Wrap(dim, rank));
  return static_cast<int>(wrapped);
}

namespace {

// torch.matmul's first error for these operands, or OK: its dispatch
// (ATen's matmul) picks dot, mv, mm, one mm/mv over a batch folded into
// rows, or bmm over the broadcast batch dims, and each has its own words
// and order of checks (sizes, then dtypes, then the dtype's kernel; dot
// checks dtypes first). The kernel names are those of torch's CPU build.
absl::Status MatMulError(DType a_dtype, const Shape& a, DType b_dtype,
                         const Shape& b, const Target& target) {
  const int ra = a.rank(), rb = b.rank();
  if (ra == 0 || rb == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "both arguments to matmul need to be at least 1D, but they are ", ra,
        "D and ", rb, "D"));
  }
  auto kernel = [&](std::string_view name, DType dtype) {
    return target.caps.Has(OpKind::kMatMul, dtype)
               ? absl::OkStatus()
               : NotImplementedError(name, dtype);
  };
  auto same_dtype = [](DType first, DType second) {
    return first == second
               ? absl::OkStatus()
               : absl::InvalidArgumentError(absl::StrCat(
                     "expected scalar type ", ToAbsl(ScalarTypeName(first)),
                     " but found ", ToAbsl(ScalarTypeName(second))));
  };
  // torch.mm of [m x k1] by [k2 x n]; torch.mv of [m x k] by [kv].
  auto mm = [&](int64_t m, int64_t k1, DType d1, int64_t k2, int64_t n,
                DType d2) {
    if (k1 != k2) {
      return absl::InvalidArgumentError(
          absl::StrCat("mat1 and mat2 shapes cannot be multiplied (", m, "x",
                       k1, " and ", k2, "x", n, ")"));
    }
    RETURN_IF_ERROR(same_dtype(d1, d2));
    return kernel("addmm_impl_cpu_", d1);
  };
  auto mv = [&](int64_t m, int64_t k, DType d1, int64_t kv, DType d2) {
    if (k != kv) {
      return absl::InvalidArgumentError(
          absl::StrCat("size mismatch, got ", m, ", ", m, "x", k, ",", kv));
    }
    RETURN_IF_ERROR(same_dtype(d1, d2));
    return kernel("addmv_impl_cpu", d1);
  };
  if (ra == 1 && rb == 1) {
    if (a_dtype != b_dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dot : expected both vectors to have same dtype, but found ",
          ToAbsl(ScalarTypeName(a_dtype)), " and ",
          ToAbsl(ScalarTypeName(b_dtype))));
    }
    if (a.dim(0) != b.dim(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("inconsistent tensor size, expected tensor [", a.dim(0),
                       "] and src [", b.dim(0),
                       "] to have the same number of elements, but got ",
                       a.dim(0), " and ", b.dim(0), " elements respectively"));
    }
    return kernel("dot", a_dtype);
  }
  if (ra <= 2 && rb <= 2) {
    if (rb == 1) return mv(a.dim(0), a.dim(1), a_dtype, b.dim(0), b_dtype);
    const int64_t m = ra == 1 ? 1 : a.dim(0);
    return mm(m, a.dim(ra - 1), a_dtype, b.dim(0), b.dim(1), b_dtype);
  }
  if (rb <= 2) {  // a's batch folded into rows: [batch * m, k]
    const int64_t rows = a.NumElements(0, ra - 1);
    const int64_t k = a.dim(ra - 1);
    return rb == 2 ? mm(rows, k, a_dtype, b.dim(0), b.dim(1), b_dtype)
                   : mv(rows, k, a_dtype, b.dim(0), b_dtype);
  }
  if (ra <= 2) {  // b transposed and folded, times a transposed
    const int64_t rows = b.NumElements(0, rb - 2) * b.dim(rb - 1);
    const int64_t k = b.dim(rb - 2);
    return ra == 2 ? mm(rows, k, b_dtype, a.dim(1), a.dim(0), a_dtype)
                   : mv(rows, k, b_dtype, a.dim(0), a_dtype);
  }
  ASSIGN_OR_RETURN(
      const Shape a_batch,
      Shape::Make(std::span<const int64_t>(a.dims()).first(ra - 2)));
  ASSIGN_OR_RETURN(
      const Shape b_batch,
      Shape::Make(std::span<const int64_t>(b.dims()).first(rb - 2)));
  ASSIGN_OR_RETURN(const Shape batch, BroadcastShapes(a_batch, b_batch));
  if (a.dim(ra - 1) != b.dim(rb - 2)) {
    const int64_t n = batch.NumElements();
    return absl::InvalidArgumentError(absl::StrCat(
        "Expected size for first two dimensions of batch2 tensor to be: [", n,
        ", ", a.dim(ra - 1), "] but got: [", n, ", ", b.dim(rb - 2), "]."));
  }
  RETURN_IF_ERROR(same_dtype(a_dtype, b_dtype));
  return kernel("bmm", a_dtype);
}

}  // namespace

absl::StatusOr<MatMulPlan> PlanMatMul(DType a_dtype, const Shape& a,
                                      DType b_dtype, const Shape& b,
                                      const Target& target) {
  CountPlan(Planner::kMatMul);
  RETURN_IF_ERROR(MatMulError(a_dtype, a, b_dtype, b, target));
  MatMulPlan plan;
  plan.dtype = a_dtype;
  const std::span<const int64_t> ad = a.dims();
  const std::span<const int64_t> bd = b.dims();
  const bool a_vector = ad.size() == 1, b_vector = bd.size() == 1;
  plan.m = a_vector ? 1 : ad[ad.size() - 2];
  plan.k = ad.back();
  plan.n = b_vector ? 1 : bd.back();
  const std::span<const int64_t> a_batch_dims(ad.data(),
                                              a_vector ? 0 : ad.size() - 2);
  const std::span<const int64_t> b_batch_dims(bd.data(),
                                              b_vector ? 0 : bd.size() - 2);
  ASSIGN_OR_RETURN(plan.a_batch, Shape::Make(a_batch_dims));
  ASSIGN_OR_RETURN(plan.b_batch, Shape::Make(b_batch_dims));
  // MatMulError has checked that the batch dims broadcast.
  ASSIGN_OR_RETURN(Shape batch, BroadcastShapes(plan.a_batch, plan.b_batch));
  plan.batch = std::move(batch);
  std::vector<int64_t> out_dims = plan.batch.DimsVector();
  if (!a_vector) out_dims.push_back(plan.m);
  if (!b_vector) out_dims.push_back(plan.n);
  ASSIGN_OR_RETURN(plan.out, Shape::Make(out_dims));
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
  CountPlan(Planner::kReduce);
  ReducePlan plan;
  plan.compute = dtype;
  if (op == ReduceOp::kSum && !IsFloating(dtype)) plan.compute = DType::kInt64;
  if (op == ReduceOp::kMean && !IsFloating(dtype)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mean(): could not infer output dtype. Input dtype must be either a "
        "floating point or complex dtype. Got: ",
        ToAbsl(ScalarTypeName(dtype))));
  }
  if (op == ReduceOp::kNorm && !IsFloating(dtype)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "norm(): input dtype should be either floating point or complex. Got ",
        ToAbsl(ScalarTypeName(dtype)), " instead."));
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
    // A sum or mean in float32, float64 or int64 can instead reduce each
    // run of adjacent dims in turn, the last run first (a mean of equal
    // groups' means is their mean): no permute of the whole input.
    const bool exact_stages = plan.compute == DType::kFloat32 ||
                              plan.compute == DType::kFloat64 ||
                              plan.compute == DType::kInt64;
    if ((op == ReduceOp::kSum || op == ReduceOp::kMean) && exact_stages) {
      std::vector<int64_t> left = x.DimsVector();
      size_t end = gone.size();
      while (end > 0) {
        size_t begin = end - 1;
        while (begin > 0 && gone[begin - 1] == gone[begin] - 1) --begin;
        const int64_t first = gone[begin], last = gone[end - 1];
        ReduceDims stage;
        for (int64_t i = 0; i < first; ++i) stage.outer *= left[i];
        for (int64_t i = first; i <= last; ++i) stage.n *= left[i];
        for (size_t i = last + 1; i < left.size(); ++i) stage.inner *= left[i];
        plan.stages.push_back(stage);
        left.erase(left.begin() + first, left.begin() + last + 1);
        end = begin;
      }
    }
  }
  if (needs_element && plan.dims.n == 0) {
    const std::string name = absl::StrCat(ToAbsl(ReduceOpName(op)), "()");
    if (!dims.empty()) {
      ASSIGN_OR_RETURN(const int axis, WrapDim(dims[0], rank));
      return IndexError(absl::StrCat(name, ": Expected reduction dim ", axis,
                                     " to have non-zero size."));
    }
    const std::string message = absl::StrCat(
        name,
        ": Expected reduction dim to be specified for input.numel() == 0.");
    // torch: IndexError for argmax, RuntimeError (with advice) for max/min.
    if (op == ReduceOp::kArgmax) return IndexError(message);
    return absl::InvalidArgumentError(absl::StrCat(
        message, " Specify the reduction dim with the 'dim' argument."));
  }
  ASSIGN_OR_RETURN(plan.out, Shape::Make(out_dims));
  RETURN_IF_ERROR(target.Supports(OpKind::kReduce, plan.compute));
  RETURN_IF_ERROR(PlanCast(dtype, plan.compute, target));
  return plan;
}

absl::StatusOr<WherePlan> PlanWhere(
    const OperandDesc& cond, const OperandDesc* x, const Scalar* x_scalar,
    const OperandDesc* y, const Scalar* y_scalar, const Target& target) {
  CountPlan(Planner::kWhere);
  if (cond.dtype != DType::kBool) {
    return absl::FailedPreconditionError(absl::StrCat(
        "where expected condition to be a boolean tensor, but got a tensor "
        "with dtype ",
        ToAbsl(ScalarTypeName(cond.dtype))));
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
  CountPlan(Planner::kClamp);
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
  CountPlan(Planner::kSoftmax);
  // torch wraps the dim first, then names the kernel for the dim it runs
  // on (the last one, or any other).
  ASSIGN_OR_RETURN(const int axis, WrapDim(dim, x.rank()));
  if (!IsFloating(dtype)) {
    const bool last = axis == std::max(x.rank(), 1) - 1;
    // ("softmax_kernel_impl" off the last dim for log_softmax too.)
    return absl::FailedPreconditionError(absl::StrCat(
        "\"", log && last ? "log_" : "", "softmax", last ? "_lastdim" : "",
        "_kernel_impl\" not implemented for '", ToAbsl(ScalarTypeName(dtype)),
        "'"));
  }
  SoftmaxPlan plan;
  plan.compute = dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  plan.axis = axis;
  return plan;
}

absl::Status PlanDropout(DType dtype, double p, bool train,
                         const Target& target) {
  if (!(p >= 0 && p <= 1)) {
    return ValueError(
        absl::StrCat("dropout probability has to be between 0 and 1, but got ",
                     PythonFloat(p)));
  }
  if (!IsFloating(dtype) && train) {
    // torch's dropout scales by 1 / (1 - p) into the input's dtype.
    return absl::InvalidArgumentError(absl::StrCat(
        "result type Float can't be cast to the desired output type ",
        ToAbsl(ScalarTypeName(dtype))));
  }
  if (!IsFloating(dtype) ||
      (train && !target.caps.Has(OpKind::kRandomFill, DType::kFloat32))) {
    return NotImplementedError("dropout", dtype);
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
  std::vector<int64_t> dims = x.DimsVector();
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
  const std::string message =
      absl::StrCat(ToAbsl(op), "() cannot be applied to a 0-dim tensor.");
  // torch: an IndexError for select, a RuntimeError for narrow.
  return op == "select" ? IndexError(message)
                        : absl::InvalidArgumentError(message);
}

}  // namespace

absl::StatusOr<SlicePlan> PlanNarrow(const Shape& x, int64_t dim, int64_t start,
                                     int64_t length) {
  CountPlan(Planner::kSlice);
  RETURN_IF_ERROR(CheckNot0d(x, "narrow"));
  ASSIGN_OR_RETURN(const int axis, WrapDim(dim, x.rank()));
  const int64_t size = x.dim(axis);
  // As torch: start wraps as a dim of `size` would (IndexError past it),
  // except that start == size is the (valid) end.
  int64_t wrapped = start;
  if (start != size) {
    ASSIGN_OR_RETURN(wrapped, Wrap(start, size));
  }
  if (length < 0 || wrapped > size - length) {
    return absl::InvalidArgumentError(
        absl::StrCat("start (", wrapped, ") + length (", length,
                     ") exceeds dimension size (", size, ")."));
  }
  return SliceOf(x, axis, wrapped, length, false);
}

absl::StatusOr<SlicePlan> PlanSelect(const Shape& x, int64_t dim,
                                     int64_t index) {
  CountPlan(Planner::kSlice);
  RETURN_IF_ERROR(CheckNot0d(x, "select"));
  ASSIGN_OR_RETURN(const int axis, WrapDim(dim, x.rank()));
  const int64_t size = x.dim(axis);
  const int64_t wrapped = index < 0 ? index + size : index;
  if (wrapped < 0 || wrapped >= size) {
    return IndexError(absl::StrCat("select(): index ", index,
                                   " out of range for tensor of size ",
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
  CountPlan(Planner::kPermute);
  const int rank = x.rank();
  if (static_cast<int>(dims.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "permute(sparse_coo): number of dimensions in the tensor input does "
        "not match the length of the desired ordering of dimensions i.e. "
        "input.dim() = ",
        rank, " is not equal to len(dims) = ", dims.size()));
  }
  PermutePlan plan;
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> out_dims;
  for (int64_t d : dims) {
    ASSIGN_OR_RETURN(int axis, WrapDim(d, rank));
    if (seen[axis]) {
      return absl::InvalidArgumentError(
          "permute(): duplicate dims are not allowed.");
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
  CountPlan(Planner::kReshape);
  const int64_t numel = x.NumElements();
  auto invalid = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("shape '[", absl::StrJoin(dims, ", "),
                     "]' is invalid for input of size ", numel));
  };
  std::vector<int64_t> out_dims(dims.begin(), dims.end());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out_dims.size(); ++i) {
    if (out_dims[i] == -1) {
      if (infer >= 0) {
        return absl::InvalidArgumentError("only one dimension can be inferred");
      }
      infer = static_cast<int>(i);
    } else if (out_dims[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid shape dimension ", out_dims[i]));
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
