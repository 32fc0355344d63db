// Internal: whole-tensor arithmetic for the backward formulas
// (core/autograd/backward_ops.cc, window_ops.cc, loss_ops.cc, norm_ops.cc) and the
// autograd engine (core/autograd/autograd.cc). Each call runs the forward ops' own
// planned kernels on one device, so a backward runs wherever its forward did,
// and returns a new stored tensor (or, for Reshape, the same memory read with
// another shape). Included only by those files. Thread-safety: one GradMath per
// backward step; not shared.
#ifndef TENSORD_CORE_AUTOGRAD_GRAD_MATH_H_
#define TENSORD_CORE_AUTOGRAD_GRAD_MATH_H_

#include <span>
#include <vector>

#include "core/executor/executor.h"

namespace tensord::core {

class Executor::GradMath {
 public:
  using TensorPtr = Executor::TensorPtr;
  GradMath(Executor& rt, Device* device)
      : rt_(rt), slot_(rt.SlotOf(device)), device_(*device) {}

  Executor& rt() { return rt_; }
  DeviceSlot& slot() { return slot_; }
  Device& device() { return device_; }
  absl::StatusOr<TensorPtr> Keep(absl::StatusOr<Output> out) {
    if (!out.ok()) return out.status();
    return rt_.Stored(slot_, std::move(*out));
  }

  // a (op) b with broadcasting and promotion.
  absl::StatusOr<TensorPtr> Bin(BinaryOp op, const TensorPtr& a,
                                const TensorPtr& b) {
    return Keep(rt_.BinaryOut(op, *a, b.get(), nullptr, false, nullptr));
  }
  // a (op) s, a float number (s (op) a when `first`).
  absl::StatusOr<TensorPtr> Num(BinaryOp op, const TensorPtr& a, double s,
                                bool first = false) {
    const Scalar number = Scalar::Float(s);
    return Keep(rt_.BinaryOut(op, *a, nullptr, &number, first, nullptr));
  }
  absl::StatusOr<TensorPtr> Un(UnaryOp op, const TensorPtr& a) {
    return Keep(rt_.UnaryOut(op, *a));
  }
  absl::StatusOr<TensorPtr> MatMul(const TensorPtr& a, const TensorPtr& b) {
    return Keep(rt_.MatMulOut(*a, *b));
  }
  absl::StatusOr<TensorPtr> Cast(const TensorPtr& a, DType dtype) {
    if (a->dtype == dtype) return a;
    return Keep(rt_.CastOut(*a, dtype));
  }
  // A bool tensor as 0/1 in `dtype`.
  absl::StatusOr<TensorPtr> Mask(const TensorPtr& a, DType dtype) {
    return Keep(rt_.CastOut(*a, dtype));
  }
  absl::StatusOr<TensorPtr> Permute(const TensorPtr& a,
                                    std::span<const int64_t> perm) {
    return Keep(rt_.PermuteOut(*a, perm));
  }
  // The transpose of the last two dims (a of rank >= 2).
  absl::StatusOr<TensorPtr> TransposeLast(const TensorPtr& a) {
    const int r = a->shape.rank();
    std::vector<int64_t> perm(r);
    for (int i = 0; i < r; ++i) perm[i] = i;
    std::swap(perm[r - 1], perm[r - 2]);
    return Permute(a, perm);
  }
  // Sum over `dims` (all when empty).
  absl::StatusOr<TensorPtr> Sum(const TensorPtr& a,
                                std::span<const int64_t> dims, bool keepdim) {
    return Keep(rt_.ReduceOut(ReduceOp::kSum, *a, dims, keepdim));
  }
  // Mean over `dims`, kept as 1s.
  absl::StatusOr<TensorPtr> Mean(const TensorPtr& a,
                                 std::span<const int64_t> dims) {
    return Keep(rt_.ReduceOut(ReduceOp::kMean, *a, dims, true));
  }
  // 1 / sqrt(a + eps).
  absl::StatusOr<TensorPtr> InvSqrt(const TensorPtr& a, double eps) {
    ASSIGN_OR_RETURN(TensorPtr shifted, Num(BinaryOp::kAdd, a, eps));
    ASSIGN_OR_RETURN(TensorPtr root, Un(UnaryOp::kSqrt, shifted));
    return Num(BinaryOp::kDiv, root, 1.0, /*first=*/true);
  }
  // One kernel call of `args` reading `operands` (its kind's arity) into a
  // new tensor of `dtype` and `shape`.
  absl::StatusOr<TensorPtr> Kernel(KernelArgs args,
                                   std::vector<TensorRef> operands, DType dtype,
                                   const Shape& shape) {
    ASSIGN_OR_RETURN(Output out, rt_.AllocateOutput(slot_, dtype, shape));
    RETURN_IF_ERROR(
        device_.Launch({std::move(args), std::move(operands), out.ref()}));
    return rt_.Stored(slot_, std::move(out));
  }
  // Row `k` of `a`, read as [rows, n / rows], copied into a new [n / rows].
  absl::StatusOr<TensorPtr> Row(const TensorPtr& a, int64_t rows, int64_t k) {
    const int64_t cols = a->shape.NumElements() / rows;
    const int64_t bytes = cols * static_cast<int64_t>(DTypeSize(a->dtype));
    ASSIGN_OR_RETURN(Shape shape,
                     Shape::Make(std::span<const int64_t>(&cols, 1)));
    ASSIGN_OR_RETURN(Output out, rt_.AllocateOutput(slot_, a->dtype, shape));
    BlockCopy copy;
    copy.row_bytes = bytes;
    copy.src_offset = k * bytes;
    RETURN_IF_ERROR(device_.Launch({copy, {RefOf(*a)}, out.ref()}));
    return rt_.Stored(slot_, std::move(out));
  }
  absl::StatusOr<TensorPtr> Zeros(const Shape& shape, DType dtype) {
    ASSIGN_OR_RETURN(Output out, rt_.AllocateOutput(slot_, dtype, shape));
    RETURN_IF_ERROR(device_.Launch({FillSpec{}, {}, out.ref()}));
    return rt_.Stored(slot_, std::move(out));
  }
  // `a`'s memory read as `shape` (same element count): no copy. Autograd
  // never writes a gradient in place until the engine has copied it.
  absl::StatusOr<TensorPtr> Reshape(const TensorPtr& a, const Shape& shape) {
    if (a->shape == shape) return a;
    if (a->shape.NumElements() != shape.NumElements()) {
      return absl::InternalError(absl::StrCat("autograd: cannot read ",
                                              a->shape.ToString(), " as ",
                                              shape.ToString()));
    }
    auto view = NewStoredTensor();
    view->device = a->device;
    view->dtype = a->dtype;
    view->shape = shape;
    view->nbytes = a->nbytes;
    view->buffer = a->buffer;
    return TensorPtr(std::move(view));
  }
  absl::StatusOr<TensorPtr> Reshape(const TensorPtr& a,
                                    std::initializer_list<int64_t> dims) {
    ASSIGN_OR_RETURN(Shape shape, Shape::Make(std::span<const int64_t>(
                                      dims.begin(), dims.size())));
    return Reshape(a, shape);
  }
  // g summed down to `shape` (the inverse of broadcasting g's operand of
  // that shape), then read as `shape`.
  absl::StatusOr<TensorPtr> SumTo(const TensorPtr& g, const Shape& shape) {
    if (g->shape == shape) return g;
    const int lead = g->shape.rank() - shape.rank();
    std::vector<int64_t> dims;
    for (int i = 0; i < g->shape.rank(); ++i) {
      if (i < lead || (shape.dim(i - lead) == 1 && g->shape.dim(i) != 1)) {
        dims.push_back(i);
      }
    }
    if (dims.empty()) return Reshape(g, shape);
    ASSIGN_OR_RETURN(TensorPtr summed, Sum(g, dims, true));
    return Reshape(summed, shape);
  }
  // g broadcast to `shape` (a copy): zeros of the shape plus g.
  absl::StatusOr<TensorPtr> Expand(const TensorPtr& g, const Shape& shape) {
    ASSIGN_OR_RETURN(TensorPtr zeros, Zeros(shape, g->dtype));
    return Bin(BinaryOp::kAdd, zeros, g);
  }

  // The input gradients of a family of recorded ops (backward_ops.cc):
  // `out` has one entry per forward input, filled where its edge is active.
  using Grads = std::vector<TensorPtr>;
  absl::Status BinaryGrads(const GradNode& node, const TensorPtr& g,
                           Grads& out);
  absl::Status UnaryGrads(const GradNode& node, const TensorPtr& g, Grads& out);
  absl::Status MatMulGrads(const GradNode& node, const TensorPtr& g,
                           Grads& out);
  absl::Status LinearGrads(const GradNode& node, const TensorPtr& g,
                           Grads& out);
  absl::Status ReduceGrads(const GradNode& node, const TensorPtr& g,
                           Grads& out);
  absl::Status SoftmaxGrads(const GradNode& node, const TensorPtr& g,
                            Grads& out);
  absl::Status PermuteGrads(const GradNode& node, const TensorPtr& g,
                            Grads& out);
  absl::Status TransposeGrads(const GradNode& node, const TensorPtr& g,
                              Grads& out);
  absl::Status ReshapeGrads(const GradNode& node, const TensorPtr& g,
                            Grads& out);
  absl::Status CastGrads(const GradNode& node, const TensorPtr& g, Grads& out);
  // narrow and select.
  absl::Status SliceGrads(const GradNode& node, const TensorPtr& g, Grads& out);
  absl::Status CatGrads(const GradNode& node, const TensorPtr& g, Grads& out);
  absl::Status ClampGrads(const GradNode& node, const TensorPtr& g, Grads& out);
  absl::Status WhereGrads(const GradNode& node, const TensorPtr& g, Grads& out);
  absl::Status DropoutGrads(const GradNode& node, const TensorPtr& g,
                            Grads& out);
  // conv2d's (window_ops.cc), the pooling ops' (window_ops.cc), the losses'
  // (loss_ops.cc), and a move's: the gradient moved back to the input's
  // device.
  absl::Status Conv2dGrads(const GradNode& node, const TensorPtr& g,
                           Grads& out);
  absl::Status Pool2dGrads(const GradNode& node, const TensorPtr& g,
                           Grads& out);
  absl::Status LossGrads(const GradNode& node, const TensorPtr& g, Grads& out);
  // The normalisations' (norm_ops.cc).
  absl::Status NormGrads(const GradNode& node, const TensorPtr& g, Grads& out);
  absl::Status MoveToGrads(const GradNode& node, const TensorPtr& g,
                           Grads& out);
  // What each row of the op table names as its `backward`
  // (core/base/op_table.h): one of the above.
  using Formula = absl::Status (GradMath::*)(const GradNode& node,
                                             const TensorPtr& g, Grads& out);
  // The formula of the table's row `row` (nullptr when it has none).
  static Formula FormulaOf(size_t row);

 private:
  Executor& rt_;
  DeviceSlot& slot_;
  Device& device_;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_AUTOGRAD_GRAD_MATH_H_
