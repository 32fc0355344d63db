// The op planner: pure functions from an op and its inputs' metadata to
// what a device needs to run it (the output's dtype and shape, the compute
// dtype, the kernel's dimensions), or the error with PyTorch's message.
//
// Every shape and dtype rule of the ops planned here lives here once and is
// unit-tested here (tests/core/planner_test.cc) with no device and no
// runtime: the executor (core/executor/op_outputs.cc) asks the planner for the
// target device (its capability table), allocates and launches; devices
// check nothing again.
// Planned here: every op tensord runs — elementwise binary and unary ops,
// casts, matmul, linear, reductions, softmax, where, clamp,
// permute/transpose, reshape, narrow/select, cat, axpy_'s alpha and dim
// wrapping. Composite ops (softmax, clamp, linear) run as a sequence of
// planned kernels.
// Thread-safety: pure functions.
#ifndef TENSORD_CORE_PLANNER_PLANNER_H_
#define TENSORD_CORE_PLANNER_PLANNER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/ops.h"
#include "core/base/shape.h"

namespace tensord::core {

// Wraps a possibly negative dim into [0, rank) (a 0-d tensor accepts 0 and
// -1, like PyTorch). INVALID_ARGUMENT "Dimension out of range (expected to
// be in range of [-2, 1], but got 2)" otherwise.
absl::StatusOr<int> WrapDim(int64_t dim, int rank);

// The device an op is planned for: what it computes (its capability
// table) and its name, which the "not implemented" errors quote. Borrowed
// for the call. Every Plan function that launches kernels takes one and
// checks, after the op's own rules, that the target runs each kernel the
// plan needs in its dtype, and each cast (FAILED_PRECONDITION "\"matmul\"
// not implemented for 'bool' on cpu" otherwise).
struct Target {
  const Capabilities& caps;
  std::string_view device;

  absl::Status Supports(OpKind op, DType dtype) const {
    return caps.Check(op, dtype, device);
  }
};
// `device`'s table and name (valid while `device` is).
Target TargetOf(const Device& device);

// Converting `from` to `to` on `target`: OK when they are equal or the
// target casts both, FAILED_PRECONDITION otherwise.
absl::Status PlanCast(DType from, DType to, const Target& target);

// The dtype a Python number goes to a device in before it is cast to the
// op's dtype: int64 for an integer, float64 otherwise.
DType NumberDType(const Scalar& s);

// An operand's metadata; the shape is borrowed for the call.
struct OperandDesc {
  DType dtype;
  const Shape& shape;
};

// a (op) b with broadcasting and PyTorch's type promotion, or a (op) a
// Python number (`b` null, `scalar` set), optionally into an existing tensor
// (`into`: the in-place ops).
struct BinaryPlan {
  DType compute = DType::kFloat32;    // operands are cast to this
  DType out_dtype = DType::kFloat32;  // bool for comparisons
  Shape out;
};
// INVALID_ARGUMENT for shapes that do not broadcast, or (with `into`) a
// broadcast shape other than into's or a result not castable to into's
// dtype (PyTorch's canCast), or an integer tensor to a negative integer
// power; FAILED_PRECONDITION for an op the dtype does not have (bool
// sub/pow). Division of integers computes in float32. `scalar_first`: the
// number is the left operand (scalar (op) a: (-2) ** x is no error).
absl::StatusOr<BinaryPlan> PlanBinary(BinaryOp op, const OperandDesc& a,
                                      const OperandDesc* b,
                                      const Scalar* scalar,
                                      const OperandDesc* into,
                                      const Target& target,
                                      bool scalar_first = false);
// The families whose plans an op carries (core/planner/op_plan.h's FamilyPlan).
// Each family's planner counts its calls: a test's proof that the executor
// plans each op once (PlanOp's plan is the one it runs; a composite op's
// steps plan their own, other, families).
enum class Planner {
  kBinary,
  kUnary,
  kMatMul,
  kReduce,
  kSoftmax,
  kPermute,
  kSlice,
  kConv2d,
  kPool2d,
  kAdaptiveAvgPool2d,
  kLoss,
  kNorm,
  kWhere,
  kClamp,
  kReshape,
  kCat,
  kCount
};
void CountPlan(Planner family);
// How many times this process has run `family`'s planner.
uint64_t PlanCalls(Planner family);

// neg/abs/exp/.../tanh of x: the dtype it computes (and returns) in.
// Floating functions of an integer or bool tensor compute in float32; relu,
// neg and abs keep the dtype. FAILED_PRECONDITION for neg/abs/relu of bool.
absl::StatusOr<DType> PlanUnary(UnaryOp op, DType x, const Target& target);

// PyTorch's canCast(from, to): no floating into an integer, nothing but
// bool into bool.
bool CanCast(DType from, DType to);

// torch.matmul of a [.., m, k] and b [.., k, n]: a 1-D lhs is a row [1, k],
// a 1-D rhs a column [k, 1], the added dim dropped from the result; leading
// dims are batch dims and broadcast. Both operands one dtype.
struct MatMulPlan {
  DType dtype = DType::kFloat32;
  Shape out;
  Shape batch;    // the broadcast batch shape
  Shape a_batch;  // each operand's own batch shape
  Shape b_batch;
  int64_t m = 0, n = 0, k = 0;
};
// INVALID_ARGUMENT for a 0-d operand, different dtypes, inner dims that
// differ or batch dims that do not broadcast, naming both shapes.
absl::StatusOr<MatMulPlan> PlanMatMul(DType a_dtype, const Shape& a,
                                      DType b_dtype, const Shape& b,
                                      const Target& target);

// nn.functional.linear's shape rules (x [..., in] . weight [out, in]^T):
// INVALID_ARGUMENT unless the weight is 2-D and x's last dim is its
// in_features. The product itself is then planned as a matmul with the
// transposed weight, the bias as a broadcast add.
absl::Status CheckLinearShapes(const Shape& x, const Shape& weight);

// torch.cat along `dim`: same rank, same sizes but along dim, dtypes
// promote.
struct CatPlan {
  DType dtype = DType::kFloat32;
  int axis = 0;
  Shape out;
};
// INVALID_ARGUMENT for no tensors, a 0-d tensor, ranks or sizes that differ
// (naming the two shapes and the tensor's position) or a bad dim.
absl::StatusOr<CatPlan> PlanCat(std::span<const OperandDesc> xs, int64_t dim,
                                const Target& target);

// sum/mean/max/min/argmax/norm over all elements (`dim` unset) or one dim;
// sum/mean/norm also over several dims at once.
struct ReducePlan {
  DType compute = DType::kFloat32;  // the input is cast to this first
  DType out_dtype = DType::kFloat32;
  Shape out;
  // Reduced dims that are not one run of adjacent dims are first moved to
  // the end: the input is permuted by `perm` (empty: no permute).
  std::vector<int64_t> perm;
  ReduceDims dims;  // outer x n x inner, reduced over n
  // Or, for a sum or mean of such dims in float32, float64 or int64: one
  // reduction per run of adjacent dims, the last run first, each over what
  // the one before left (empty: `perm` and `dims`).
  std::vector<ReduceDims> stages;
};
// FAILED_PRECONDITION for mean or norm of a non-floating tensor (PyTorch's
// messages); INVALID_ARGUMENT for a bad dim, or max/min/argmax over an
// empty dimension. Sum of an integer or bool tensor computes in int64.
absl::StatusOr<ReducePlan> PlanReduce(ReduceOp op, DType dtype, const Shape& x,
                                      std::optional<int64_t> dim, bool keepdim,
                                      const Target& target);
// Over every dim in `dims` (empty: all elements), as torch.sum(x, dims).
// Besides PlanReduce's errors: INVALID_ARGUMENT "dim 1 appears multiple
// times in the list of dims" (PyTorch's), and for more than one dim of
// max/min/argmax, which reduce over one dim only.
absl::StatusOr<ReducePlan> PlanReduce(ReduceOp op, DType dtype, const Shape& x,
                                      std::span<const int64_t> dims,
                                      bool keepdim, const Target& target);

// torch.where(cond, x, y): x and y each a tensor or a number (`*_scalar`
// set, the desc then null); the result dtype is theirs promoted (two
// numbers: int64 if both are integers, float32 otherwise), the shape the
// broadcast of all three.
struct WherePlan {
  DType dtype = DType::kFloat32;
  Shape out;
};
// FAILED_PRECONDITION "where expected condition to be a boolean tensor, but
// got a tensor with dtype float32" (PyTorch's) for a non-bool condition (as
// for any op not defined for a dtype); INVALID_ARGUMENT for shapes that do
// not broadcast.
absl::StatusOr<WherePlan> PlanWhere(
    const OperandDesc& cond, const OperandDesc* x, const Scalar* x_scalar,
    const OperandDesc* y, const Scalar* y_scalar, const Target& target);

// torch.clamp(x, min, max)'s result dtype: PyTorch's result_type over x
// and the bounds given (each a tensor, `*_scalar` a number, or neither), all
// at once: dimensioned tensors first, then 0-d tensors, then numbers, a
// later class counting only when its category is higher. INVALID_ARGUMENT
// "torch.clamp: At least one of 'min' or 'max' must not be None".
absl::StatusOr<DType> PlanClamp(const OperandDesc& x, const OperandDesc* min,
                                const Scalar* min_scalar,
                                const OperandDesc* max,
                                const Scalar* max_scalar);

// softmax / log_softmax of x over `dim`: computed in `compute` (float32 for
// the half types, the dtype itself for float32/float64) as
// exp(x - max) / sum(exp(x - max)), the result in x's dtype and shape.
struct SoftmaxPlan {
  DType compute = DType::kFloat32;
  int64_t axis = 0;  // the wrapped dim
};
// FAILED_PRECONDITION "\"softmax\" not implemented for 'int64'" for a
// non-floating x (PyTorch has no integer softmax); INVALID_ARGUMENT for a
// bad dim.
absl::StatusOr<SoftmaxPlan> PlanSoftmax(DType dtype, const Shape& x,
                                        int64_t dim, bool log);

// dropout of x with probability p (zeroed elements drawn from a float32
// random fill): INVALID_ARGUMENT "dropout probability has to be between 0
// and 1, but got 1.5"; FAILED_PRECONDITION "\"dropout\" not implemented
// for 'int64' on cpu" for a non-floating x, or in training on a device
// with no float32 random fill.
absl::Status PlanDropout(DType dtype, double p, bool train,
                         const Target& target);

// Autograd's rules that hold before anything runs (PyTorch's messages):
// requires_grad_(true) of a non-floating tensor is INVALID_ARGUMENT "only
// Tensors of floating point dtype can require gradients" (PyTorch 1.13's).
absl::Status CheckRequiresGrad(bool requires_grad, DType dtype);
// backward of `root` with the gradient `grad` (null: implicit, ones):
// INVALID_ARGUMENT "grad can be implicitly created only for scalar
// outputs" for an implicit gradient of a root of more than one element;
// "Mismatch in shape: grad_output[0] has a shape of torch.Size([3]) and
// output[0] has a shape of torch.Size([2, 3])." for a gradient of another
// shape.
absl::Status CheckBackwardRoot(const Shape& root, const Shape* grad);

// x.narrow(dim, start, length) and x.select(dim, index): the block
// [start, start + length) of x along `axis`, shaped `out` (select drops the
// axis).
struct SlicePlan {
  int axis = 0;
  int64_t start = 0, length = 0;  // start wrapped (>= 0)
  Shape out;
};
// INVALID_ARGUMENT "narrow() cannot be applied to a 0-dim tensor.", for a
// bad dim, or naming start, length, the dim and its size when the block
// does not lie inside x (a negative start counts from the end).
absl::StatusOr<SlicePlan> PlanNarrow(const Shape& x, int64_t dim, int64_t start,
                                     int64_t length);
// INVALID_ARGUMENT "select(): index 5 out of range for tensor of size
// [2, 3] at dimension 1" (PyTorch's), or as PlanNarrow's.
absl::StatusOr<SlicePlan> PlanSelect(const Shape& x, int64_t dim,
                                     int64_t index);

// x.axpy_(alpha, other)'s rule: INVALID_ARGUMENT "axpy_: for integral input
// tensors, alpha must not be a floating point number (got 0.5)" for a
// float alpha with a non-floating `other`.
absl::Status CheckAxpyAlpha(DType other, const Scalar& alpha);

// x.permute(dims): `perm` holds the wrapped dims.
struct PermutePlan {
  std::vector<int> perm;
  Shape out;
};
// INVALID_ARGUMENT when `dims` is not a permutation of x's dims.
absl::StatusOr<PermutePlan> PlanPermute(const Shape& x,
                                        std::span<const int64_t> dims);

// x.reshape(dims), one entry may be -1 (inferred). INVALID_ARGUMENT when the
// element counts differ, for two -1s or a negative entry.
absl::StatusOr<Shape> PlanReshape(const Shape& x,
                                  std::span<const int64_t> dims);

}  // namespace tensord::core

#endif  // TENSORD_CORE_PLANNER_PLANNER_H_
