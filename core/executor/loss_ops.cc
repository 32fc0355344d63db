// The loss functions on stored tensors (Apply in executor.cc calls them):
// planned by core/planner/loss_plan.h and run as kernels every device has. Each
// step's result lives only as long as a later step reads it.
//
// nll_loss over log-probabilities x [N, C] and targets t [N]: a target
// equal to ignore_index is not counted; the others must lie in [0, C)
// (checked from their minimum and maximum, copied to the host, before the
// loss is computed). Row i's loss is -x[i, t[i]], picked with the one-hot
// mask arange(C) == t (ignored rows: 0); mean divides the sum by the number
// of counted rows (NaN when none is, as PyTorch). cross_entropy is
// nll_loss of log_softmax(x) over the class dim; mse_loss reduces
// (input - target)^2.
#include "core/executor/executor.h"
#include "core/autograd/grad_math.h"
#include "core/planner/loss_plan.h"

namespace tensord::core {
absl::StatusOr<Executor::Output> Executor::LossOut(const LossPlan& plan,
                                                   const OpSpec& op,
                                                   const StoredTensor& input,
                                                   const StoredTensor& target) {
  DeviceSlot& slot = SlotOf(input.device);
  Device& device = *input.device;
  auto stored = [&](absl::StatusOr<Output> out) -> absl::StatusOr<TensorPtr> {
    if (!out.ok()) return out.status();
    return Stored(slot, std::move(*out));
  };
  auto as_output = [](const StoredTensor& t) {
    return Output{t.shape, t.dtype, t.nbytes, t.buffer};
  };
  const std::span<const int64_t> all;
  if (op.loss == LossKind::kMse) {
    ASSIGN_OR_RETURN(TensorPtr diff, stored(BinaryOut(BinaryOp::kSub, input,
                                                      &target, nullptr, false,
                                                      nullptr)));
    ASSIGN_OR_RETURN(Output square, BinaryOut(BinaryOp::kMul, *diff,
                                              diff.get(), nullptr, false,
                                              nullptr));
    if (op.reduction == LossReduction::kNone) return square;
    diff.reset();
    const TensorPtr sq = Stored(slot, std::move(square));
    return ReduceOut(op.reduction == LossReduction::kMean ? ReduceOp::kMean
                                                          : ReduceOp::kSum,
                     *sq, all, false);
  }
  const int64_t n = plan.rows, c = plan.classes;
  TensorPtr log_probs;  // cross_entropy: log_softmax(input)
  if (op.loss == LossKind::kCrossEntropy) {
    ASSIGN_OR_RETURN(log_probs, stored(SoftmaxOut(input, -1, true)));
  }
  ASSIGN_OR_RETURN(TensorPtr x,
                   ViewOf(log_probs != nullptr ? *log_probs : input, {n, c}));
  ASSIGN_OR_RETURN(TensorPtr t, ViewOf(target, {n, 1}));
  const Scalar ignore = Scalar::Int(op.ignore_index);
  ASSIGN_OR_RETURN(TensorPtr counted,
                   stored(BinaryOut(BinaryOp::kNe, *t, nullptr, &ignore,
                                    false, nullptr)));
  using Bound = OpSpec::Bound;
  const Bound tensor{Bound::Kind::kTensor, {}};
  ASSIGN_OR_RETURN(TensorPtr masked,
                   stored(WhereOut(*counted, tensor, t.get(),
                                   Bound{Bound::Kind::kScalar, Scalar::Int(0)},
                                   nullptr)));
  if (n > 0) {
    int64_t range[2] = {0, 0};
    int i = 0;
    for (ReduceOp r : {ReduceOp::kMin, ReduceOp::kMax}) {
      ASSIGN_OR_RETURN(Output bound, ReduceOut(r, *masked, all, false));
      RETURN_IF_ERROR(
          device.CopyToHost(*bound.buffer, 0, &range[i++], sizeof(int64_t)));
    }
    RETURN_IF_ERROR(CheckTargetRange(range[0], range[1], c));
  }
  ASSIGN_OR_RETURN(Shape classes_shape,
                   Shape::Make(std::span<const int64_t>(&c, 1)));
  ASSIGN_OR_RETURN(Output classes, AllocateOutput(slot, DType::kInt64,
                                                  std::move(classes_shape)));
  FillSpec arange;
  arange.kind = FillSpec::Kind::kArange;
  RETURN_IF_ERROR(device.Launch({arange, {}, classes.ref()}));
  const TensorPtr class_ids = Stored(slot, std::move(classes));
  ASSIGN_OR_RETURN(TensorPtr one_hot,
                   stored(BinaryOut(BinaryOp::kEq, *masked, class_ids.get(),
                                    nullptr, false, nullptr)));
  masked.reset();
  const Bound zero{Bound::Kind::kScalar, Scalar::Float(0)};
  ASSIGN_OR_RETURN(TensorPtr picked,
                   stored(WhereOut(*one_hot, tensor, x.get(), zero, nullptr)));
  one_hot.reset();
  x.reset();
  log_probs.reset();
  const int64_t class_dim[] = {1};
  ASSIGN_OR_RETURN(TensorPtr row,
                   stored(ReduceOut(ReduceOp::kSum, *picked, class_dim,
                                    false)));
  picked.reset();
  ASSIGN_OR_RETURN(TensorPtr negated, stored(UnaryOut(UnaryOp::kNeg, *row)));
  ASSIGN_OR_RETURN(TensorPtr counted_rows, ViewOf(*counted, {n}));
  ASSIGN_OR_RETURN(Output per_row, WhereOut(*counted_rows, tensor,
                                            negated.get(), zero, nullptr));
  if (op.reduction == LossReduction::kNone) {
    if (plan.batched) return per_row;
    ASSIGN_OR_RETURN(TensorPtr one, ViewOf(*Stored(slot, std::move(per_row)), {}));
    return as_output(*one);
  }
  const TensorPtr losses = Stored(slot, std::move(per_row));
  ASSIGN_OR_RETURN(Output total, ReduceOut(ReduceOp::kSum, *losses, all, false));
  if (op.reduction == LossReduction::kSum) return total;
  ASSIGN_OR_RETURN(TensorPtr weights,
                   stored(CastOut(*counted_rows, plan.dtype)));
  ASSIGN_OR_RETURN(TensorPtr count,
                   stored(ReduceOut(ReduceOp::kSum, *weights, all, false)));
  const TensorPtr sum = Stored(slot, std::move(total));
  return BinaryOut(BinaryOp::kDiv, *sum, count.get(), nullptr, false, nullptr);
}

// The losses' input gradients. mse_loss: 2 (input - target) g, over the
// element count for mean (the target's is the negation). nll_loss: -g at
// each counted row's target class (over the counted rows for mean);
// cross_entropy: (softmax(input) - one_hot) times the same row weight.
absl::StatusOr<std::vector<Executor::TensorPtr>> Executor::LossGrads(
    const GradNode& node, const TensorPtr& g) {
  const OpSpec& op = node.op;
  const TensorPtr& input = node.inputs[0].data;
  const TensorPtr& target = node.inputs[1].data;
  GradMath m(*this, g->device);
  const LossPlan& plan = std::get<LossPlan>(node.plan);  // the forward's
  std::vector<TensorPtr> out(2);
  if (op.loss == LossKind::kMse) {
    ASSIGN_OR_RETURN(TensorPtr diff, m.Bin(BinaryOp::kSub, input, target));
    double scale = 2;
    if (op.reduction == LossReduction::kMean) {
      scale /= static_cast<double>(plan.broadcast.NumElements());
    }
    ASSIGN_OR_RETURN(TensorPtr scaled, m.Num(BinaryOp::kMul, diff, scale));
    ASSIGN_OR_RETURN(TensorPtr gd, m.Bin(BinaryOp::kMul, scaled, g));
    if (node.next[0].active()) {
      ASSIGN_OR_RETURN(out[0], m.SumTo(gd, input->shape));
    }
    if (node.next[1].active()) {
      ASSIGN_OR_RETURN(TensorPtr neg, m.Num(BinaryOp::kMul, gd, -1));
      ASSIGN_OR_RETURN(out[1], m.SumTo(neg, target->shape));
    }
    return out;
  }
  const int64_t n = plan.rows, c = plan.classes;
  ASSIGN_OR_RETURN(TensorPtr t, m.Reshape(target, {n, 1}));
  // Each row's weight: g per row (none), g (sum), g over the counted rows
  // (mean); 0 for a row not counted.
  const Scalar ignore = Scalar::Int(op.ignore_index);
  ASSIGN_OR_RETURN(TensorPtr counted, m.Keep(BinaryOut(BinaryOp::kNe, *t,
                                                       nullptr, &ignore, false,
                                                       nullptr)));
  ASSIGN_OR_RETURN(TensorPtr weight, m.Mask(counted, plan.dtype));
  TensorPtr per_row = g;
  if (op.reduction == LossReduction::kNone) {
    ASSIGN_OR_RETURN(per_row, m.Reshape(g, {n, 1}));
  } else if (op.reduction == LossReduction::kMean) {
    const std::span<const int64_t> all;
    ASSIGN_OR_RETURN(TensorPtr count, m.Sum(weight, all, false));
    ASSIGN_OR_RETURN(per_row, m.Bin(BinaryOp::kDiv, g, count));
  }
  ASSIGN_OR_RETURN(weight, m.Bin(BinaryOp::kMul, weight, per_row));
  ASSIGN_OR_RETURN(Shape classes_shape,
                   Shape::Make(std::span<const int64_t>(&c, 1)));
  ASSIGN_OR_RETURN(Output classes, AllocateOutput(m.slot(), DType::kInt64,
                                                  std::move(classes_shape)));
  FillSpec arange;
  arange.kind = FillSpec::Kind::kArange;
  RETURN_IF_ERROR(m.device().Launch({arange, {}, classes.ref()}));
  ASSIGN_OR_RETURN(TensorPtr hit,
                   m.Bin(BinaryOp::kEq, t, Stored(m.slot(), std::move(classes))));
  ASSIGN_OR_RETURN(hit, m.Mask(hit, plan.dtype));
  ASSIGN_OR_RETURN(TensorPtr picked, m.Bin(BinaryOp::kMul, hit, weight));
  TensorPtr gx;
  if (op.loss == LossKind::kNll) {
    ASSIGN_OR_RETURN(gx, m.Num(BinaryOp::kMul, picked, -1));
  } else {
    ASSIGN_OR_RETURN(TensorPtr logits, m.Reshape(input, {n, c}));
    ASSIGN_OR_RETURN(TensorPtr p, m.Keep(SoftmaxOut(*logits, -1, false)));
    ASSIGN_OR_RETURN(TensorPtr weighted, m.Bin(BinaryOp::kMul, p, weight));
    ASSIGN_OR_RETURN(gx, m.Bin(BinaryOp::kSub, weighted, picked));
  }
  ASSIGN_OR_RETURN(out[0], m.Reshape(gx, input->shape));
  return out;
}

}  // namespace tensord::core
