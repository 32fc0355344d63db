// Each op's output, planned by core/planner and computed by device kernels:
// the Executor methods that turn one op on stored tensors into its
// result (Apply in executor.cc calls them). Composite ops (softmax, clamp)
// are sequences of these; temporaries are freed as soon as no later step
// reads them.
#include "core/executor/executor.h"
#include "core/base/op_checks.h"
#include "core/planner/planner.h"

namespace tensord::core {
absl::StatusOr<Executor::Output> Executor::AllocateOutput(DeviceSlot& slot,
                                                          DType dtype,
                                                          Shape shape) {
  Output out;
  ASSIGN_OR_RETURN(out.nbytes, shape.ByteSize(dtype));
  ASSIGN_OR_RETURN(Admission admission, Admit(slot, out.nbytes));
  ASSIGN_OR_RETURN(out.buffer, Allocate(std::move(admission)));
  out.shape = std::move(shape);
  out.dtype = dtype;
  return out;
}

absl::StatusOr<TensorRef> Executor::AsDType(DeviceSlot& slot,
                                            const StoredTensor& t, DType dtype,
                                            Output& temp) {
  if (t.dtype == dtype) return RefOf(t);
  ASSIGN_OR_RETURN(temp, AllocateOutput(slot, dtype, t.shape));
  RETURN_IF_ERROR(slot.device->Launch({CastArgs{}, {RefOf(t)}, temp.ref()}));
  return temp.ref();
}

absl::StatusOr<Executor::Output> Executor::MatMulOut(const StoredTensor& a,
                                                     const StoredTensor& b) {
  ASSIGN_OR_RETURN(MatMulPlan plan, PlanMatMul(a.dtype, a.shape, b.dtype,
                                               b.shape, TargetOf(*a.device)));
  return MatMulOut(std::move(plan), a, b);
}

absl::StatusOr<Executor::Output> Executor::MatMulOut(MatMulPlan plan,
                                                     const StoredTensor& a,
                                                     const StoredTensor& b) {
  DeviceSlot& slot = SlotOf(a.device);
  Device& device = *a.device;
  const DType dtype = plan.dtype;
  const int64_t m = plan.m, n = plan.n, k = plan.k;
  const Shape& a_batch = plan.a_batch;
  const Shape& b_batch = plan.b_batch;
  const Shape* batch = &plan.batch;

  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, dtype, std::move(plan.out)));
  const int64_t batch_count = batch->NumElements();
  if (out.shape.NumElements() == 0) {
    // Nothing to compute.
  } else if (k == 0) {
    // Empty sums: zeros, without asking BLAS about 0-sized leading dims.
    RETURN_IF_ERROR(device.Launch({FillSpec{}, {}, out.ref()}));
  } else {
    // An operand whose batch part is neither the full batch nor a single
    // matrix cannot be read with one batch stride: expand it into a
    // temporary by multiplying with ones of shape batch + [1, 1] (exact).
    Output ones, a_expanded, b_expanded;
    auto operand = [&](const StoredTensor& t, const Shape& t_batch,
                       int64_t rows, int64_t cols, Output& expanded,
                       int64_t* stride) -> absl::StatusOr<TensorRef> {
      if (t_batch.NumElements() == batch_count) {
        *stride = rows * cols;
        return RefOf(t);
      }
      if (t_batch.NumElements() == 1) {
        *stride = 0;
        return RefOf(t);
      }
      std::vector<int64_t> dims = batch->DimsVector();
      if (ones.buffer == nullptr) {
        dims.insert(dims.end(), {1, 1});
        ASSIGN_OR_RETURN(Shape ones_shape, Shape::Make(dims));
        ASSIGN_OR_RETURN(ones, AllocateOutput(slot, dtype, ones_shape));
        FillSpec fill;
        fill.kind = FillSpec::Kind::kOnes;
        RETURN_IF_ERROR(device.Launch({fill, {}, ones.ref()}));
        dims = batch->DimsVector();
      }
      dims.insert(dims.end(), {rows, cols});
      ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
      ASSIGN_OR_RETURN(expanded, AllocateOutput(slot, dtype, shape));
      RETURN_IF_ERROR(device.Launch({BinaryArgs{BinaryOp::kMul},
                                     {RefOf(t), ones.ref()},
                                     expanded.ref()}));
      *stride = rows * cols;
      return expanded.ref();
    };
    MatMulDims dims;
    dims.batch = batch_count;
    dims.m = m;
    dims.n = n;
    dims.k = k;
    dims.out_batch_stride = m * n;
    ASSIGN_OR_RETURN(TensorRef a_ref, operand(a, a_batch, m, k, a_expanded,
                                              &dims.a_batch_stride));
    ASSIGN_OR_RETURN(TensorRef b_ref, operand(b, b_batch, k, n, b_expanded,
                                              &dims.b_batch_stride));
    RETURN_IF_ERROR(device.Launch({dims, {a_ref, b_ref}, out.ref()}));
  }
  return out;
}

// --- Ops ---------------------------------------------------------------------

Executor::TensorPtr Executor::Stored(DeviceSlot& slot, Output out) const {
  auto t = NewStoredTensor();
  t->device = slot.device.get();
  t->dtype = out.dtype;
  t->shape = std::move(out.shape);
  t->nbytes = out.nbytes;
  t->buffer = std::move(out.buffer);
  return t;
}

absl::StatusOr<Executor::Output> Executor::ScalarTensor(DeviceSlot& slot,
                                                        const Scalar& s,
                                                        DType dtype) {
  // The number goes to the device in its own type (int64 or float64) and
  // is converted there by Cast, whose conversions are defined for every
  // value (saturating, NaN -> 0).
  const DType natural = NumberDType(s);
  ASSIGN_OR_RETURN(Output value, AllocateOutput(slot, natural, Shape()));
  if (s.is_integral) {
    RETURN_IF_ERROR(slot.device->CopyFromHost(&s.i, *value.buffer, 0, 8));
  } else {
    RETURN_IF_ERROR(slot.device->CopyFromHost(&s.f, *value.buffer, 0, 8));
  }
  if (natural == dtype) return value;
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, Shape()));
  RETURN_IF_ERROR(slot.device->Launch({CastArgs{}, {value.ref()}, out.ref()}));
  return out;
}

absl::StatusOr<Executor::Output> Executor::BinaryOut(
    BinaryOp op, const StoredTensor& a, const StoredTensor* b,
    const Scalar* scalar, bool scalar_first, const StoredTensor* into) {
  const OperandDesc a_desc{a.dtype, a.shape};
  std::optional<OperandDesc> b_desc, into_desc;
  if (b != nullptr) b_desc.emplace(OperandDesc{b->dtype, b->shape});
  if (into != nullptr) into_desc.emplace(OperandDesc{into->dtype, into->shape});
  ASSIGN_OR_RETURN(
      const BinaryPlan plan,
      PlanBinary(op, a_desc, b_desc ? &*b_desc : nullptr, scalar,
                 into_desc ? &*into_desc : nullptr, TargetOf(*a.device),
                 scalar != nullptr && scalar_first));
  return BinaryOut(plan, op, a, b, scalar, scalar_first, into);
}

absl::StatusOr<Executor::Output> Executor::BinaryOut(
    const BinaryPlan& plan, BinaryOp op, const StoredTensor& a,
    const StoredTensor* b, const Scalar* scalar, bool scalar_first,
    const StoredTensor* into) {
  DeviceSlot& slot = SlotOf(a.device);
  Device& device = *a.device;
  const DType dtype = plan.compute;
  const DType out_dtype = plan.out_dtype;

  Output a_temp, b_temp;  // promotion casts, freed on return
  ASSIGN_OR_RETURN(TensorRef a_ref, AsDType(slot, a, dtype, a_temp));
  TensorRef b_ref;
  if (b != nullptr) {
    ASSIGN_OR_RETURN(b_ref, AsDType(slot, *b, dtype, b_temp));
  } else {
    ASSIGN_OR_RETURN(b_temp, ScalarTensor(slot, *scalar, dtype));
    b_ref = b_temp.ref();
  }
  if (scalar_first) std::swap(a_ref, b_ref);
  if (into != nullptr && out_dtype == into->dtype) {
    RETURN_IF_ERROR(
        device.Launch({BinaryArgs{op}, {a_ref, b_ref}, RefOf(*into)}));
    return Output{};
  }
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, out_dtype, plan.out));
  RETURN_IF_ERROR(device.Launch({BinaryArgs{op}, {a_ref, b_ref}, out.ref()}));
  if (into != nullptr) {
    RETURN_IF_ERROR(device.Launch({CastArgs{}, {out.ref()}, RefOf(*into)}));
    return Output{};
  }
  return out;
}

absl::StatusOr<Executor::Output> Executor::UnaryOut(
    UnaryOp op, const StoredTensor& x, std::array<double, 2> args) {
  ASSIGN_OR_RETURN(const DType dtype,
                   PlanUnary(op, x.dtype, TargetOf(*x.device)));
  return UnaryOut(UnaryPlan{dtype}, op, x, args);
}

absl::StatusOr<Executor::Output> Executor::UnaryOut(
    const UnaryPlan& plan, UnaryOp op, const StoredTensor& x,
    std::array<double, 2> args) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  const DType dtype = plan.dtype;
  Output temp;
  ASSIGN_OR_RETURN(TensorRef in, AsDType(slot, x, dtype, temp));
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, x.shape));
  RETURN_IF_ERROR(
      device.Launch({UnaryArgs{op, args[0], args[1]}, {in}, out.ref()}));
  return out;
}

absl::StatusOr<Executor::Output> Executor::LinearOut(MatMulPlan plan,
                                                     const StoredTensor& x,
                                                     const StoredTensor& w,
                                                     const StoredTensor* bias) {
  DeviceSlot& slot = SlotOf(x.device);
  const int64_t perm[] = {1, 0};
  ASSIGN_OR_RETURN(Output wt, PermuteOut(w, perm));
  const TensorPtr wt_stored = Stored(slot, std::move(wt));
  ASSIGN_OR_RETURN(Output y, MatMulOut(std::move(plan), x, *wt_stored));
  if (bias == nullptr) return y;
  const TensorPtr y_stored = Stored(slot, std::move(y));
  return BinaryOut(BinaryOp::kAdd, *y_stored, bias, nullptr, false, nullptr);
}

absl::StatusOr<Executor::Output> Executor::ReduceOut(
    ReduceOp op, const StoredTensor& x, std::span<const int64_t> dims,
    bool keepdim) {
  ASSIGN_OR_RETURN(ReducePlan plan, PlanReduce(op, x.dtype, x.shape, dims,
                                               keepdim, TargetOf(*x.device)));
  return ReduceOut(std::move(plan), op, x);
}

absl::StatusOr<Executor::Output> Executor::ReduceOut(ReducePlan plan,
                                                     ReduceOp op,
                                                     const StoredTensor& x) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  if (!plan.stages.empty()) {
    Output temp;
    ASSIGN_OR_RETURN(TensorRef in, AsDType(slot, x, plan.compute, temp));
    Output partial;  // the stage before's result, freed after the next
    for (size_t i = 0; i < plan.stages.size(); ++i) {
      const ReduceDims& stage = plan.stages[i];
      Output next;
      if (i + 1 == plan.stages.size()) {
        ASSIGN_OR_RETURN(
            next, AllocateOutput(slot, plan.out_dtype, std::move(plan.out)));
      } else {
        const int64_t left[] = {stage.outer * stage.inner};
        ASSIGN_OR_RETURN(Shape shape, Shape::Make(left));
        ASSIGN_OR_RETURN(next,
                         AllocateOutput(slot, plan.compute, std::move(shape)));
      }
      RETURN_IF_ERROR(device.Launch({ReduceArgs{op, stage}, {in}, next.ref()}));
      partial = std::move(next);
      in = partial.ref();
    }
    return partial;
  }
  const StoredTensor* src = &x;
  TensorPtr permuted;  // reduced dims moved to the end, freed on return
  if (!plan.perm.empty()) {
    ASSIGN_OR_RETURN(Output p, PermuteOut(x, plan.perm));
    permuted = Stored(slot, std::move(p));
    src = permuted.get();
  }
  Output temp;
  ASSIGN_OR_RETURN(TensorRef in, AsDType(slot, *src, plan.compute, temp));
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, plan.out_dtype, std::move(plan.out)));
  RETURN_IF_ERROR(device.Launch({ReduceArgs{op, plan.dims}, {in}, out.ref()}));
  return out;
}

absl::StatusOr<Executor::Output> Executor::SoftmaxOut(const StoredTensor& x,
                                                      int64_t dim, bool log) {
  ASSIGN_OR_RETURN(const SoftmaxPlan plan,
                   PlanSoftmax(x.dtype, x.shape, dim, log));
  return SoftmaxOut(plan, x, log);
}

absl::StatusOr<Executor::Output> Executor::SoftmaxOut(const SoftmaxPlan& plan,
                                                      const StoredTensor& x,
                                                      bool log) {
  DeviceSlot& slot = SlotOf(x.device);
  if (x.shape.NumElements() == 0) return AllocateOutput(slot, x.dtype, x.shape);
  // Each step's result is kept only as long as a later step reads it.
  auto stored = [&](absl::StatusOr<Output> out) -> absl::StatusOr<TensorPtr> {
    if (!out.ok()) return out.status();
    return Stored(slot, std::move(*out));
  };
  TensorPtr xc;  // x in the compute dtype
  if (plan.compute != x.dtype) {
    ASSIGN_OR_RETURN(xc, stored(CastOut(x, plan.compute)));
  }
  const StoredTensor& in = xc != nullptr ? *xc : x;
  const int64_t axis[] = {plan.axis};
  // Numerically stable: exp(x - max) never overflows.
  ASSIGN_OR_RETURN(TensorPtr max,
                   stored(ReduceOut(ReduceOp::kMax, in, axis, true)));
  ASSIGN_OR_RETURN(TensorPtr shifted,
                   stored(BinaryOut(BinaryOp::kSub, in, max.get(), nullptr,
                                    false, nullptr)));
  max.reset();
  ASSIGN_OR_RETURN(TensorPtr exp, stored(UnaryOut(UnaryOp::kExp, *shifted)));
  ASSIGN_OR_RETURN(TensorPtr sum,
                   stored(ReduceOut(ReduceOp::kSum, *exp, axis, true)));
  absl::StatusOr<Output> result;
  if (log) {  // (x - max) - log(sum)
    exp.reset();
    ASSIGN_OR_RETURN(TensorPtr log_sum, stored(UnaryOut(UnaryOp::kLog, *sum)));
    result = BinaryOut(BinaryOp::kSub, *shifted, log_sum.get(), nullptr, false,
                       nullptr);
  } else {
    shifted.reset();
    result =
        BinaryOut(BinaryOp::kDiv, *exp, sum.get(), nullptr, false, nullptr);
  }
  if (!result.ok() || plan.compute == x.dtype) return result;
  ASSIGN_OR_RETURN(TensorPtr wide, stored(std::move(result)));
  return CastOut(*wide, x.dtype);
}

absl::StatusOr<Executor::Output> Executor::DropoutOut(
    const StoredTensor& x, double p, bool train, std::optional<uint64_t> seed,
    TensorPtr* mask_out) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  if (!train || p == 0) return CastPlannedOut(x, x.dtype);  // a copy
  using Bound = OpSpec::Bound;
  const Bound zero{Bound::Kind::kScalar, Scalar::Float(0)};
  if (p == 1) {
    ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, x.dtype, x.shape));
    RETURN_IF_ERROR(device.Launch({FillSpec{}, {}, out.ref()}));
    return out;
  }
  // Kept where a uniform draw in [0, 1) is at least p: probability 1 - p.
  ASSIGN_OR_RETURN(Output draws, AllocateOutput(slot, DType::kFloat32, x.shape));
  FillSpec rand;
  rand.kind = FillSpec::Kind::kRand;
  rand.seed = seed;
  RETURN_IF_ERROR(device.Launch({rand, {}, draws.ref()}));
  const TensorPtr uniform = Stored(slot, std::move(draws));
  const Scalar threshold = Scalar::Float(p);
  ASSIGN_OR_RETURN(Output keep, BinaryOut(BinaryOp::kGe, *uniform, nullptr,
                                          &threshold, false, nullptr));
  const TensorPtr mask = Stored(slot, std::move(keep));
  const Scalar scale = Scalar::Float(1 / (1 - p));
  if (mask_out != nullptr) {
    // The factor each element got: 1 / (1 - p) where kept, else 0.
    ASSIGN_OR_RETURN(Output factor, CastOut(*mask, x.dtype));
    const TensorPtr ones = Stored(slot, std::move(factor));
    ASSIGN_OR_RETURN(Output scaled_mask, BinaryOut(BinaryOp::kMul, *ones,
                                                   nullptr, &scale, false,
                                                   nullptr));
    *mask_out = Stored(slot, std::move(scaled_mask));
  }
  ASSIGN_OR_RETURN(Output scaled, BinaryOut(BinaryOp::kMul, x, nullptr, &scale,
                                            false, nullptr));
  const TensorPtr kept = Stored(slot, std::move(scaled));
  return WhereOut(*mask, Bound{Bound::Kind::kTensor, {}}, kept.get(), zero,
                  nullptr);
}

absl::StatusOr<Executor::Output> Executor::WhereOut(const StoredTensor& cond,
                                                    const OpSpec::Bound& x_arg,
                                                    const StoredTensor* x,
                                                    const OpSpec::Bound& y_arg,
                                                    const StoredTensor* y) {
  Device& device = *cond.device;
  const OperandDesc cond_desc{cond.dtype, cond.shape};
  std::optional<OperandDesc> x_desc, y_desc;
  if (x != nullptr) x_desc.emplace(OperandDesc{x->dtype, x->shape});
  if (y != nullptr) y_desc.emplace(OperandDesc{y->dtype, y->shape});
  ASSIGN_OR_RETURN(
      WherePlan plan,
      PlanWhere(cond_desc, x_desc ? &*x_desc : nullptr,
                x == nullptr ? &x_arg.scalar : nullptr,
                y_desc ? &*y_desc : nullptr,
                y == nullptr ? &y_arg.scalar : nullptr, TargetOf(device)));
  return WhereOut(std::move(plan), cond, x_arg, x, y_arg, y);
}

absl::StatusOr<Executor::Output> Executor::WhereOut(
    WherePlan plan, const StoredTensor& cond, const OpSpec::Bound& x_arg,
    const StoredTensor* x, const OpSpec::Bound& y_arg, const StoredTensor* y) {
  DeviceSlot& slot = SlotOf(cond.device);
  Device& device = *cond.device;
  // Each branch in the result dtype: a tensor (cast when it differs) or the
  // number as a 0-d tensor, broadcast by the kernel.
  Output x_temp, y_temp;
  auto branch = [&](const StoredTensor* t, const OpSpec::Bound& arg,
                    Output& temp) -> absl::StatusOr<TensorRef> {
    if (t == nullptr) {
      ASSIGN_OR_RETURN(temp, ScalarTensor(slot, arg.scalar, plan.dtype));
      return temp.ref();
    }
    return AsDType(slot, *t, plan.dtype, temp);
  };
  ASSIGN_OR_RETURN(const TensorRef x_ref, branch(x, x_arg, x_temp));
  ASSIGN_OR_RETURN(const TensorRef y_ref, branch(y, y_arg, y_temp));
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, plan.dtype, std::move(plan.out)));
  RETURN_IF_ERROR(
      device.Launch({WhereArgs{}, {RefOf(cond), x_ref, y_ref}, out.ref()}));
  return out;
}

absl::StatusOr<Executor::Output> Executor::ClampOut(
    const StoredTensor& x, const OpSpec::Bound& min,
    const StoredTensor* min_tensor, const OpSpec::Bound& max,
    const StoredTensor* max_tensor) {
  using Kind = OpSpec::Bound::Kind;
  auto desc = [](const StoredTensor* t) -> std::optional<OperandDesc> {
    if (t == nullptr) return std::nullopt;
    return OperandDesc{t->dtype, t->shape};
  };
  const std::optional<OperandDesc> lo = desc(min_tensor), hi = desc(max_tensor);
  const Scalar* lo_number = min.kind == Kind::kScalar ? &min.scalar : nullptr;
  const Scalar* hi_number = max.kind == Kind::kScalar ? &max.scalar : nullptr;
  ASSIGN_OR_RETURN(const DType dtype,
                   PlanClamp(OperandDesc{x.dtype, x.shape}, lo ? &*lo : nullptr,
                             lo_number, hi ? &*hi : nullptr, hi_number));
  return ClampOut(ClampPlan{dtype}, x, min, min_tensor, max, max_tensor);
}

absl::StatusOr<Executor::Output> Executor::ClampOut(
    const ClampPlan& plan, const StoredTensor& x, const OpSpec::Bound& min,
    const StoredTensor* min_tensor, const OpSpec::Bound& max,
    const StoredTensor* max_tensor) {
  using Kind = OpSpec::Bound::Kind;
  const Scalar* lo_number = min.kind == Kind::kScalar ? &min.scalar : nullptr;
  const Scalar* hi_number = max.kind == Kind::kScalar ? &max.scalar : nullptr;
  const DType dtype = plan.dtype;
  // x and the tensor bounds in the one result dtype first, so that the two
  // steps below promote nothing (a number never raises it: the result dtype
  // counted it).
  DeviceSlot& slot = SlotOf(x.device);
  auto as_dtype = [&](const StoredTensor* t,
                      TensorPtr& temp) -> absl::StatusOr<const StoredTensor*> {
    if (t == nullptr || t->dtype == dtype) return t;
    ASSIGN_OR_RETURN(Output cast, CastOut(*t, dtype));
    temp = Stored(slot, std::move(cast));
    return temp.get();
  };
  TensorPtr x_temp, lo_temp, hi_temp;
  ASSIGN_OR_RETURN(const StoredTensor* xd, as_dtype(&x, x_temp));
  ASSIGN_OR_RETURN(const StoredTensor* lod, as_dtype(min_tensor, lo_temp));
  ASSIGN_OR_RETURN(const StoredTensor* hid, as_dtype(max_tensor, hi_temp));
  TensorPtr lower;  // maximum(x, min)
  if (min.kind != Kind::kNone) {
    ASSIGN_OR_RETURN(Output out, BinaryOut(BinaryOp::kMaximum, *xd, lod,
                                           lo_number, false, nullptr));
    if (max.kind == Kind::kNone) return out;
    lower = Stored(slot, std::move(out));
  }
  return BinaryOut(BinaryOp::kMinimum, lower != nullptr ? *lower : *xd, hid,
                   hi_number, false, nullptr);
}

absl::StatusOr<Executor::Output> Executor::PermuteOut(
    const StoredTensor& x, std::span<const int64_t> dims) {
  ASSIGN_OR_RETURN(PermutePlan plan, PlanPermute(x.shape, dims));
  return PermuteOut(std::move(plan), x);
}

absl::StatusOr<Executor::Output> Executor::PermuteOut(PermutePlan plan,
                                                      const StoredTensor& x) {
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, x.dtype, std::move(plan.out)));
  RETURN_IF_ERROR(x.device->Launch(
      {PermuteArgs{std::move(plan.perm)}, {RefOf(x)}, out.ref()}));
  return out;
}

absl::StatusOr<Executor::Output> Executor::ReshapeOut(
    const StoredTensor& x, std::span<const int64_t> dims) {
  ASSIGN_OR_RETURN(Shape shape, PlanReshape(x.shape, dims));
  return ReshapeOut(ReshapePlan{std::move(shape)}, x);
}

absl::StatusOr<Executor::Output> Executor::ReshapeOut(ReshapePlan plan,
                                                      const StoredTensor& x) {
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, x.dtype, std::move(plan.out)));
  BlockCopy copy;
  copy.row_bytes = static_cast<int64_t>(x.nbytes);
  RETURN_IF_ERROR(x.device->Launch({copy, {RefOf(x)}, out.ref()}));
  return out;
}

absl::StatusOr<Executor::Output> Executor::SliceOut(const StoredTensor& x,
                                                    SlicePlan plan) {
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, x.dtype, std::move(plan.out)));
  // Nothing to copy; and an empty x's dim products may exceed int64.
  if (out.shape.NumElements() == 0) return out;
  const int axis = plan.axis;
  const int64_t es = static_cast<int64_t>(DTypeSize(x.dtype));
  const int64_t inner = x.shape.NumElements(axis + 1, x.shape.rank()) * es;
  BlockCopy copy;
  copy.rows = x.shape.NumElements(0, axis);
  copy.row_bytes = plan.length * inner;
  copy.src_offset = plan.start * inner;
  copy.src_stride = x.shape.dim(axis) * inner;
  copy.dst_stride = copy.row_bytes;
  RETURN_IF_ERROR(x.device->Launch({copy, {RefOf(x)}, out.ref()}));
  return out;
}

absl::StatusOr<Executor::Output> Executor::CatOut(std::span<const Value> xs,
                                                  int64_t dim) {
  std::vector<OperandDesc> descs;
  descs.reserve(xs.size());
  for (const Value& v : xs) {
    descs.push_back(OperandDesc{v.tensor->dtype, v.tensor->shape});
  }
  // No tensors: PlanCat says so (whatever the target).
  const Capabilities none;
  ASSIGN_OR_RETURN(
      CatPlan plan,
      PlanCat(descs, dim,
              xs.empty() ? Target{none, ""} : TargetOf(*xs[0].tensor->device)));
  return CatOut(std::move(plan), xs);
}

absl::StatusOr<Executor::Output> Executor::CatOut(CatPlan plan,
                                                  std::span<const Value> xs) {
  const StoredTensor& first = *xs[0].tensor;
  Device& device = *first.device;
  const int rank = first.shape.rank();
  const int axis = plan.axis;
  const DType dtype = plan.dtype;
  const int64_t total = plan.out.dim(axis);
  DeviceSlot& slot = SlotOf(first.device);
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, dtype, std::move(plan.out)));
  // Nothing to copy; and empty inputs' dim products may exceed int64.
  if (out.shape.NumElements() == 0) return out;
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  const int64_t inner = first.shape.NumElements(axis + 1, rank) * es;
  int64_t offset = 0;
  for (const Value& v : xs) {
    Output temp;
    ASSIGN_OR_RETURN(TensorRef ref, AsDType(slot, *v.tensor, dtype, temp));
    BlockCopy copy;
    copy.rows = first.shape.NumElements(0, axis);
    copy.row_bytes = ref.shape.dim(axis) * inner;
    copy.src_stride = copy.row_bytes;
    copy.dst_offset = offset * inner;
    copy.dst_stride = total * inner;
    RETURN_IF_ERROR(device.Launch({copy, {ref}, out.ref()}));
    offset += ref.shape.dim(axis);
  }
  return out;
}

absl::StatusOr<Executor::Output> Executor::CastOut(const StoredTensor& x,
                                                   DType dtype) {
  RETURN_IF_ERROR(ValidateDType(dtype));
  RETURN_IF_ERROR(PlanCast(x.dtype, dtype, TargetOf(*x.device)));
  return CastPlannedOut(x, dtype);
}

absl::StatusOr<Executor::Output> Executor::CastPlannedOut(const StoredTensor& x,
                                                          DType dtype) {
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, x.shape));
  if (dtype == x.dtype) {
    BlockCopy copy;
    copy.row_bytes = static_cast<int64_t>(x.nbytes);
    RETURN_IF_ERROR(x.device->Launch({copy, {RefOf(x)}, out.ref()}));
    return out;
  }
  RETURN_IF_ERROR(x.device->Launch({CastArgs{}, {RefOf(x)}, out.ref()}));
  return out;
}

}  // namespace tensord::core
