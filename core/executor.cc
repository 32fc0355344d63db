#include "core/planner.h"
#include "core/runtime_impl.h"

namespace tensord::core {
namespace {

absl::Status SameDevice(const StoredTensor& a, const StoredTensor& b) {
  if (a.device == b.device) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "Expected all tensors to be on the same device, but found at least two "
      "devices, ",
      a.device->name(), " and ", b.device->name(), "!"));
}

std::string Describe(const StoredTensor& t) {
  return absl::StrCat(t.shape.ToString(), " ", ToAbsl(DTypeName(t.dtype)));
}

}  // namespace

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::MatMulOut(
    const StoredTensor& a, const StoredTensor& b) {
  DeviceSlot& slot = SlotOf(a.device);
  Device& device = *a.device;
  ASSIGN_OR_RETURN(MatMulPlan plan,
                   PlanMatMul(a.dtype, a.shape, b.dtype, b.shape));
  const DType dtype = plan.dtype;
  const int64_t m = plan.m, n = plan.n, k = plan.k;
  const Shape& a_batch = plan.a_batch;
  const Shape& b_batch = plan.b_batch;
  const Shape* batch = &plan.batch;
  RETURN_IF_ERROR(device.Supports(OpKind::kMatMul, dtype));

  ASSIGN_OR_RETURN(Impl::Output out,
                   AllocateOutput(slot, dtype, std::move(plan.out)));
  const int64_t batch_count = batch->NumElements();
  if (out.shape.NumElements() == 0) {
    // Nothing to compute.
  } else if (k == 0) {
    // Empty sums: zeros, without asking BLAS about 0-sized leading dims.
    RETURN_IF_ERROR(device.Fill(FillSpec{}, out.ref()));
  } else {
    // An operand whose batch part is neither the full batch nor a single
    // matrix cannot be read with one batch stride: expand it into a
    // temporary by multiplying with ones of shape batch + [1, 1] (exact).
    Impl::Output ones, a_expanded, b_expanded;
    auto operand = [&](const StoredTensor& t, const Shape& t_batch,
                       int64_t rows, int64_t cols, Impl::Output& expanded,
                       int64_t* stride) -> absl::StatusOr<TensorRef> {
      if (t_batch.NumElements() == batch_count) {
        *stride = rows * cols;
        return RefOf(t);
      }
      if (t_batch.NumElements() == 1) {
        *stride = 0;
        return RefOf(t);
      }
      std::vector<int64_t> dims = batch->dims();
      if (ones.buffer == nullptr) {
        dims.insert(dims.end(), {1, 1});
        ASSIGN_OR_RETURN(Shape ones_shape, Shape::Make(dims));
        ASSIGN_OR_RETURN(ones, AllocateOutput(slot, dtype, ones_shape));
        FillSpec fill;
        fill.kind = FillSpec::Kind::kOnes;
        RETURN_IF_ERROR(device.Fill(fill, ones.ref()));
        dims = batch->dims();
      }
      dims.insert(dims.end(), {rows, cols});
      ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
      ASSIGN_OR_RETURN(expanded, AllocateOutput(slot, dtype, shape));
      RETURN_IF_ERROR(
          device.Binary(BinaryOp::kMul, RefOf(t), ones.ref(), expanded.ref()));
      *stride = rows * cols;
      return expanded.ref();
    };
    Device::MatMulDims dims;
    dims.batch = batch_count;
    dims.m = m;
    dims.n = n;
    dims.k = k;
    dims.out_batch_stride = m * n;
    ASSIGN_OR_RETURN(TensorRef a_ref, operand(a, a_batch, m, k, a_expanded,
                                              &dims.a_batch_stride));
    ASSIGN_OR_RETURN(TensorRef b_ref, operand(b, b_batch, k, n, b_expanded,
                                              &dims.b_batch_stride));
    RETURN_IF_ERROR(device.MatMul(dims, a_ref, b_ref, out.ref()));
  }
  return out;
}

// --- Ops ---------------------------------------------------------------------

Runtime::Impl::TensorPtr Runtime::Impl::Stored(DeviceSlot& slot,
                                               Output out) const {
  auto t = std::make_shared<StoredTensor>();
  t->device = slot.device.get();
  t->dtype = out.dtype;
  t->shape = std::move(out.shape);
  t->nbytes = out.nbytes;
  t->buffer = std::move(out.buffer);
  return t;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::ScalarTensor(
    DeviceSlot& slot, const Scalar& s, DType dtype) {
  // The number goes to the device in its own type (int64 or float64) and
  // is converted there by Cast, whose conversions are defined for every
  // value (saturating, NaN -> 0).
  const DType natural = s.is_integral ? DType::kInt64 : DType::kFloat64;
  ASSIGN_OR_RETURN(Output value, AllocateOutput(slot, natural, Shape()));
  if (s.is_integral) {
    RETURN_IF_ERROR(slot.device->CopyFromHost(&s.i, *value.buffer, 0, 8));
  } else {
    RETURN_IF_ERROR(slot.device->CopyFromHost(&s.f, *value.buffer, 0, 8));
  }
  if (natural == dtype) return value;
  RETURN_IF_ERROR(slot.device->Supports(OpKind::kCast, dtype));
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, Shape()));
  RETURN_IF_ERROR(slot.device->Cast(value.ref(), out.ref()));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::BinaryOut(
    BinaryOp op, const StoredTensor& a, const StoredTensor* b,
    const Scalar* scalar, bool scalar_first, const StoredTensor* into) {
  DeviceSlot& slot = SlotOf(a.device);
  Device& device = *a.device;
  const OperandDesc a_desc{a.dtype, a.shape};
  std::optional<OperandDesc> b_desc, into_desc;
  if (b != nullptr) b_desc.emplace(OperandDesc{b->dtype, b->shape});
  if (into != nullptr) into_desc.emplace(OperandDesc{into->dtype, into->shape});
  ASSIGN_OR_RETURN(BinaryPlan plan,
                   PlanBinary(op, a_desc, b_desc ? &*b_desc : nullptr, scalar,
                              into_desc ? &*into_desc : nullptr));
  const DType dtype = plan.compute;
  const DType out_dtype = plan.out_dtype;
  RETURN_IF_ERROR(device.Supports(OpKind::kBinary, dtype));
  for (DType operand : {a.dtype, b != nullptr ? b->dtype : dtype}) {
    if (operand != dtype) {
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, operand));
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, dtype));
    }
  }

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
    RETURN_IF_ERROR(device.Binary(op, a_ref, b_ref, RefOf(*into)));
    return Output{};
  }
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, out_dtype, std::move(plan.out)));
  RETURN_IF_ERROR(device.Binary(op, a_ref, b_ref, out.ref()));
  if (into != nullptr) {
    RETURN_IF_ERROR(device.Supports(OpKind::kCast, into->dtype));
    RETURN_IF_ERROR(device.Cast(out.ref(), RefOf(*into)));
    return Output{};
  }
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::UnaryOut(
    UnaryOp op, const StoredTensor& x) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  ASSIGN_OR_RETURN(const DType dtype, PlanUnary(op, x.dtype));
  RETURN_IF_ERROR(device.Supports(OpKind::kUnary, dtype));
  if (dtype != x.dtype)
    RETURN_IF_ERROR(device.Supports(OpKind::kCast, x.dtype));
  Output temp;
  ASSIGN_OR_RETURN(TensorRef in, AsDType(slot, x, dtype, temp));
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, x.shape));
  RETURN_IF_ERROR(device.Unary(op, in, out.ref()));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::LinearOut(
    const StoredTensor& x, const StoredTensor& w, const StoredTensor* bias) {
  RETURN_IF_ERROR(CheckLinearShapes(x.shape, w.shape));
  DeviceSlot& slot = SlotOf(x.device);
  const int64_t perm[] = {1, 0};
  ASSIGN_OR_RETURN(Output wt, PermuteOut(w, perm));
  const TensorPtr wt_stored = Stored(slot, std::move(wt));
  ASSIGN_OR_RETURN(Output y, MatMulOut(x, *wt_stored));
  if (bias == nullptr) return y;
  const TensorPtr y_stored = Stored(slot, std::move(y));
  return BinaryOut(BinaryOp::kAdd, *y_stored, bias, nullptr, false, nullptr);
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::ReduceOut(
    ReduceOp op, const StoredTensor& x, std::span<const int64_t> dims,
    bool keepdim) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  ASSIGN_OR_RETURN(ReducePlan plan,
                   PlanReduce(op, x.dtype, x.shape, dims, keepdim));
  RETURN_IF_ERROR(device.Supports(OpKind::kReduce, plan.compute));
  if (plan.compute != x.dtype) {
    RETURN_IF_ERROR(device.Supports(OpKind::kCast, x.dtype));
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
  RETURN_IF_ERROR(device.Reduce(op, plan.dims, in, out.ref()));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::SoftmaxOut(
    const StoredTensor& x, int64_t dim, bool log) {
  ASSIGN_OR_RETURN(const SoftmaxPlan plan,
                   PlanSoftmax(x.dtype, x.shape, dim, log));
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

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::WhereOut(
    const StoredTensor& cond, const OpSpec::Bound& x_arg, const StoredTensor* x,
    const OpSpec::Bound& y_arg, const StoredTensor* y) {
  DeviceSlot& slot = SlotOf(cond.device);
  Device& device = *cond.device;
  const OperandDesc cond_desc{cond.dtype, cond.shape};
  std::optional<OperandDesc> x_desc, y_desc;
  if (x != nullptr) x_desc.emplace(OperandDesc{x->dtype, x->shape});
  if (y != nullptr) y_desc.emplace(OperandDesc{y->dtype, y->shape});
  ASSIGN_OR_RETURN(WherePlan plan,
                   PlanWhere(cond_desc, x_desc ? &*x_desc : nullptr,
                             x == nullptr ? &x_arg.scalar : nullptr,
                             y_desc ? &*y_desc : nullptr,
                             y == nullptr ? &y_arg.scalar : nullptr));
  RETURN_IF_ERROR(device.Supports(OpKind::kWhere, plan.dtype));
  // Each branch in the result dtype: a tensor (cast when it differs) or the
  // number as a 0-d tensor, broadcast by the kernel.
  Output x_temp, y_temp;
  auto branch = [&](const StoredTensor* t, const OpSpec::Bound& arg,
                    Output& temp) -> absl::StatusOr<TensorRef> {
    if (t == nullptr) {
      ASSIGN_OR_RETURN(temp, ScalarTensor(slot, arg.scalar, plan.dtype));
      return temp.ref();
    }
    if (t->dtype != plan.dtype) {
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, t->dtype));
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, plan.dtype));
    }
    return AsDType(slot, *t, plan.dtype, temp);
  };
  ASSIGN_OR_RETURN(const TensorRef x_ref, branch(x, x_arg, x_temp));
  ASSIGN_OR_RETURN(const TensorRef y_ref, branch(y, y_arg, y_temp));
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, plan.dtype, std::move(plan.out)));
  KernelCall call;
  call.kind = KernelKind::kWhere;
  call.inputs = {RefOf(cond), x_ref, y_ref};
  call.out = out.ref();
  RETURN_IF_ERROR(device.Launch(call));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::ClampOut(
    const StoredTensor& x, const OpSpec::Bound& min,
    const StoredTensor* min_tensor, const OpSpec::Bound& max,
    const StoredTensor* max_tensor) {
  using Kind = OpSpec::Bound::Kind;
  if (min.kind == Kind::kNone && max.kind == Kind::kNone) {
    return absl::InvalidArgumentError(
        "torch.clamp: At least one of 'min' or 'max' must not be None");
  }
  // PyTorch's result dtype is that of x with both bounds; applying them one
  // after the other promotes the same way.
  TensorPtr lower;  // maximum(x, min)
  if (min.kind != Kind::kNone) {
    ASSIGN_OR_RETURN(
        Output out, BinaryOut(BinaryOp::kMaximum, x, min_tensor,
                              min.kind == Kind::kScalar ? &min.scalar : nullptr,
                              false, nullptr));
    if (max.kind == Kind::kNone) return out;
    lower = Stored(SlotOf(x.device), std::move(out));
  }
  return BinaryOut(
      BinaryOp::kMinimum, lower != nullptr ? *lower : x, max_tensor,
      max.kind == Kind::kScalar ? &max.scalar : nullptr, false, nullptr);
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::PermuteOut(
    const StoredTensor& x, std::span<const int64_t> dims) {
  ASSIGN_OR_RETURN(PermutePlan plan, PlanPermute(x.shape, dims));
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, x.dtype, std::move(plan.out)));
  RETURN_IF_ERROR(x.device->Permute(RefOf(x), plan.perm, out.ref()));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::ReshapeOut(
    const StoredTensor& x, std::span<const int64_t> dims) {
  ASSIGN_OR_RETURN(Shape shape, PlanReshape(x.shape, dims));
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, x.dtype, std::move(shape)));
  Device::BlockCopy copy;
  copy.row_bytes = static_cast<int64_t>(x.nbytes);
  RETURN_IF_ERROR(x.device->CopyBlocks(copy, *x.buffer, *out.buffer));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::SliceOut(
    const StoredTensor& x, int axis, int64_t start, int64_t length,
    std::vector<int64_t> out_dims) {
  const int64_t es = static_cast<int64_t>(DTypeSize(x.dtype));
  const int64_t inner = x.shape.NumElements(axis + 1, x.shape.rank()) * es;
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(out_dims));
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, x.dtype, std::move(shape)));
  Device::BlockCopy copy;
  copy.rows = x.shape.NumElements(0, axis);
  copy.row_bytes = length * inner;
  copy.src_offset = start * inner;
  copy.src_stride = x.shape.dim(axis) * inner;
  copy.dst_stride = copy.row_bytes;
  RETURN_IF_ERROR(x.device->CopyBlocks(copy, *x.buffer, *out.buffer));
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::CatOut(
    std::span<const Value> xs, int64_t dim) {
  std::vector<OperandDesc> descs;
  descs.reserve(xs.size());
  for (const Value& v : xs) {
    descs.push_back(OperandDesc{v.tensor->dtype, v.tensor->shape});
  }
  ASSIGN_OR_RETURN(CatPlan plan, PlanCat(descs, dim));
  const StoredTensor& first = *xs[0].tensor;
  const int rank = first.shape.rank();
  const int axis = plan.axis;
  const DType dtype = plan.dtype;
  const int64_t total = plan.out.dim(axis);
  Device& device = *first.device;
  for (const Value& v : xs) {
    if (v.tensor->dtype != dtype) {
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, v.tensor->dtype));
      RETURN_IF_ERROR(device.Supports(OpKind::kCast, dtype));
    }
  }
  DeviceSlot& slot = SlotOf(first.device);
  ASSIGN_OR_RETURN(Output out,
                   AllocateOutput(slot, dtype, std::move(plan.out)));
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  const int64_t inner = first.shape.NumElements(axis + 1, rank) * es;
  int64_t offset = 0;
  for (const Value& v : xs) {
    Output temp;
    ASSIGN_OR_RETURN(TensorRef ref, AsDType(slot, *v.tensor, dtype, temp));
    Device::BlockCopy copy;
    copy.rows = first.shape.NumElements(0, axis);
    copy.row_bytes = ref.shape.dim(axis) * inner;
    copy.src_stride = copy.row_bytes;
    copy.dst_offset = offset * inner;
    copy.dst_stride = total * inner;
    RETURN_IF_ERROR(device.CopyBlocks(copy, *ref.buffer, *out.buffer));
    offset += ref.shape.dim(axis);
  }
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::CastOut(
    const StoredTensor& x, DType dtype) {
  RETURN_IF_ERROR(ValidateDType(dtype));
  DeviceSlot& slot = SlotOf(x.device);
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, x.shape));
  if (dtype == x.dtype) {
    Device::BlockCopy copy;
    copy.row_bytes = static_cast<int64_t>(x.nbytes);
    RETURN_IF_ERROR(x.device->CopyBlocks(copy, *x.buffer, *out.buffer));
    return out;
  }
  RETURN_IF_ERROR(x.device->Supports(OpKind::kCast, x.dtype));
  RETURN_IF_ERROR(x.device->Supports(OpKind::kCast, dtype));
  RETURN_IF_ERROR(x.device->Cast(RefOf(x), out.ref()));
  return out;
}

absl::Status Runtime::Impl::InPlace(const OpSpec& op, const StoredTensor& self,
                                    const StoredTensor* other) {
  const Scalar* scalar = op.scalar.has_value() ? &*op.scalar : nullptr;
  BinaryOp bop = BinaryOp::kAdd;
  TensorPtr scaled;  // kAxpy: alpha * other
  switch (op.in_place) {
    case InPlaceOp::kAdd:
      bop = BinaryOp::kAdd;
      break;
    case InPlaceOp::kSub:
      bop = BinaryOp::kSub;
      break;
    case InPlaceOp::kMul:
      bop = BinaryOp::kMul;
      break;
    case InPlaceOp::kDiv:
      bop = BinaryOp::kDiv;
      break;
    case InPlaceOp::kAxpy: {
      if (other == nullptr) {
        return absl::InvalidArgumentError("axpy_ needs a tensor operand x");
      }
      if (!op.alpha.is_integral && !IsFloating(other->dtype)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "axpy_: for integral input tensors, alpha must not be a floating "
            "point number (got ",
            op.alpha.ToString(), ")"));
      }
      ASSIGN_OR_RETURN(Output t, BinaryOut(BinaryOp::kMul, *other, nullptr,
                                           &op.alpha, false, nullptr));
      scaled = Stored(SlotOf(other->device), std::move(t));
      other = scaled.get();
      break;
    }
  }
  return BinaryOut(bop, self, other, other == nullptr ? scalar : nullptr, false,
                   &self)
      .status();
}

absl::StatusOr<Runtime::Impl::Value> Runtime::Impl::Apply(
    const OpSpec& op, std::span<const Value> in) {
  const std::string name = OpName(op);
  auto arity = [&](size_t lo, size_t hi) -> absl::Status {
    if (in.size() >= lo && in.size() <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        name, " takes ",
        lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, " to ", hi),
        " tensor operand", hi == 1 ? "" : "s", ", got ", in.size()));
  };
  const bool with_scalar = op.scalar.has_value();
  switch (op.kind) {
    case OpSpec::Kind::kBinary:
    case OpSpec::Kind::kInPlace:
      RETURN_IF_ERROR(with_scalar && op.in_place != InPlaceOp::kAxpy
                          ? arity(1, 1)
                          : arity(2, 2));
      break;
    case OpSpec::Kind::kMatMul:
      RETURN_IF_ERROR(arity(2, 2));
      break;
    case OpSpec::Kind::kLinear:
      RETURN_IF_ERROR(arity(2, 3));
      break;
    case OpSpec::Kind::kCat:
      RETURN_IF_ERROR(arity(1, 1024));
      break;
    case OpSpec::Kind::kClamp:
    case OpSpec::Kind::kWhere: {
      using Kind = OpSpec::Bound::Kind;
      const bool clamp = op.kind == OpSpec::Kind::kClamp;
      size_t n = 1;
      for (const OpSpec::Bound* b : {clamp ? &op.clamp_min : &op.where_input,
                                     clamp ? &op.clamp_max : &op.where_other}) {
        if (b->kind == Kind::kTensor) ++n;
      }
      RETURN_IF_ERROR(arity(n, n));
      if (!clamp && (op.where_input.kind == Kind::kNone ||
                     op.where_other.kind == Kind::kNone)) {
        return absl::InvalidArgumentError(
            "where takes an input and an other (each a tensor or a number)");
      }
      break;
    }
    default:
      RETURN_IF_ERROR(arity(1, 1));
      break;
  }
  for (size_t i = 1; i < in.size(); ++i) {
    RETURN_IF_ERROR(SameDevice(*in[0].tensor, *in[i].tensor));
  }
  const StoredTensor& x = *in[0].tensor;
  const StoredTensor* second = in.size() > 1 ? in[1].tensor.get() : nullptr;
  absl::StatusOr<Output> out;
  switch (op.kind) {
    case OpSpec::Kind::kBinary:
      out = BinaryOut(op.binary, x, second, with_scalar ? &*op.scalar : nullptr,
                      with_scalar && op.scalar_first, nullptr);
      break;
    case OpSpec::Kind::kUnary:
      out = UnaryOut(op.unary, x);
      break;
    case OpSpec::Kind::kMatMul:
      out = MatMulOut(x, *second);
      break;
    case OpSpec::Kind::kLinear:
      out = LinearOut(x, *second, in.size() > 2 ? in[2].tensor.get() : nullptr);
      break;
    case OpSpec::Kind::kReduce:
      if (!op.reduce_dims.empty()) {
        out = ReduceOut(op.reduce, x, op.reduce_dims, op.keepdim);
      } else if (op.dim.has_value()) {
        out = ReduceOut(op.reduce, x, std::span<const int64_t>(&*op.dim, 1),
                        op.keepdim);
      } else {
        out = ReduceOut(op.reduce, x, std::span<const int64_t>(), op.keepdim);
      }
      break;
    case OpSpec::Kind::kSoftmax:
      out = SoftmaxOut(x, op.dim.value_or(-1), op.log);
      break;
    case OpSpec::Kind::kClamp: {
      using Kind = OpSpec::Bound::Kind;
      const bool min_tensor = op.clamp_min.kind == Kind::kTensor;
      const bool max_tensor = op.clamp_max.kind == Kind::kTensor;
      const StoredTensor* lo = min_tensor ? second : nullptr;
      const StoredTensor* hi =
          max_tensor ? in[min_tensor ? 2 : 1].tensor.get() : nullptr;
      out = ClampOut(x, op.clamp_min, lo, op.clamp_max, hi);
      break;
    }
    case OpSpec::Kind::kWhere: {
      using Kind = OpSpec::Bound::Kind;
      size_t next = 1;
      const StoredTensor* input = op.where_input.kind == Kind::kTensor
                                      ? in[next++].tensor.get()
                                      : nullptr;
      const StoredTensor* other = op.where_other.kind == Kind::kTensor
                                      ? in[next++].tensor.get()
                                      : nullptr;
      out = WhereOut(x, op.where_input, input, op.where_other, other);
      break;
    }
    case OpSpec::Kind::kPermute:
      out = PermuteOut(x, op.dims);
      break;
    case OpSpec::Kind::kTranspose: {
      const int rank = x.shape.rank();
      ASSIGN_OR_RETURN(int d0, WrapDim(op.dim.value_or(0), rank));
      ASSIGN_OR_RETURN(int d1, WrapDim(op.dim1, rank));
      std::vector<int64_t> perm(rank);
      for (int i = 0; i < rank; ++i) perm[i] = i;
      if (rank > 0) std::swap(perm[d0], perm[d1]);
      out = PermuteOut(x, perm);
      break;
    }
    case OpSpec::Kind::kReshape:
      out = ReshapeOut(x, op.dims);
      break;
    case OpSpec::Kind::kNarrow:
    case OpSpec::Kind::kSelect: {
      const bool select = op.kind == OpSpec::Kind::kSelect;
      if (x.shape.rank() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, "() cannot be applied to a 0-dim tensor."));
      }
      ASSIGN_OR_RETURN(int axis, WrapDim(op.dim.value_or(0), x.shape.rank()));
      const int64_t size = x.shape.dim(axis);
      int64_t start = op.start;
      if (start < 0) start += size;
      std::vector<int64_t> out_dims = x.shape.dims();
      if (select) {
        if (start < 0 || start >= size) {
          return absl::InvalidArgumentError(absl::StrCat(
              "select(): index ", op.start, " out of range for tensor of size ",
              x.shape.ToString(), " at dimension ", axis));
        }
        out_dims.erase(out_dims.begin() + axis);
        out = SliceOut(x, axis, start, 1, std::move(out_dims));
      } else {
        if (start < 0 || start > size || op.length < 0 ||
            op.length > size - start) {
          return absl::InvalidArgumentError(absl::StrCat(
              "narrow(): start ", op.start, " and length ", op.length,
              " are out of range for dimension ", axis, " of size ", size,
              " (shape ", x.shape.ToString(), ")"));
        }
        out_dims[axis] = op.length;
        out = SliceOut(x, axis, start, op.length, std::move(out_dims));
      }
      break;
    }
    case OpSpec::Kind::kCat:
      out = CatOut(in, op.dim.value_or(0));
      break;
    case OpSpec::Kind::kCast:
      out = CastOut(x, op.dtype);
      break;
    case OpSpec::Kind::kInPlace:
      RETURN_IF_ERROR(InPlace(op, x, second));
      return in[0];
  }
  if (!out.ok()) return out.status();
  return Value{Stored(SlotOf(x.device), std::move(*out)), std::nullopt};
}

absl::StatusOr<TensorMeta> Runtime::Run(std::string_view session,
                                        const OpSpec& op) {
  std::vector<Impl::Value> in;
  in.reserve(op.inputs.size());
  for (const Operand& operand : op.inputs) {
    if (operand.is_result) {
      return absl::InvalidArgumentError(
          "result_of operands name an earlier op of an Execute list; a "
          "single op takes handles only");
    }
    ASSIGN_OR_RETURN(HandleEntry entry,
                     impl_->table().Lookup(session, operand.handle));
    in.push_back(Impl::Value{entry.tensor, entry});
  }
  if (in.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " needs at least one tensor operand"));
  }
  ASSIGN_OR_RETURN(Impl::Value result, impl_->Apply(op, in));
  if (result.entry.has_value()) return MetaOf(*result.entry);
  const StoredTensor& t = *result.tensor;
  return impl_->Register(session, impl_->SlotOf(t.device), t.dtype, t.shape,
                         t.nbytes, t.buffer, "");
}

absl::StatusOr<std::vector<TensorMeta>> Runtime::Execute(
    std::string_view session, std::span<const OpSpec> ops,
    std::span<const uint32_t> keep, const std::function<bool()>& cancelled) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
  std::vector<bool> kept(ops.size(), false);
  for (uint32_t k : keep) {
    if (k >= ops.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "keep names op #", k, " but the list has ", ops.size(), " ops"));
    }
    kept[k] = true;
  }
  // The last op reading each result, so that intermediates are freed as
  // soon as nothing reads them (a 1000-step list holds a step's worth).
  std::vector<int64_t> last_use(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    for (const Operand& operand : ops[i].inputs) {
      if (operand.is_result && operand.result_of < i) {
        last_use[operand.result_of] = static_cast<int64_t>(i);
      }
    }
  }
  std::vector<Impl::Value> values(ops.size());
  uint64_t kept_bytes = 0, kept_tensors = 0;  // new tensors to register
  for (size_t i = 0; i < ops.size(); ++i) {
    if (cancelled && cancelled()) {
      // `values` goes with the return: everything made so far is freed.
      return absl::CancelledError(
          absl::StrCat("Execute cancelled by the client before op #", i, " of ",
                       ops.size()));
    }
    const OpSpec& op = ops[i];
    std::vector<Impl::Value> in;
    in.reserve(op.inputs.size());
    absl::Status status;
    for (size_t j = 0; j < op.inputs.size() && status.ok(); ++j) {
      const Operand& operand = op.inputs[j];
      if (!operand.is_result) {
        absl::StatusOr<HandleEntry> entry =
            impl_->table().Lookup(session, operand.handle);
        if (entry.ok()) {
          in.push_back(Impl::Value{entry->tensor, *entry});
        } else {
          status = entry.status();
        }
      } else if (operand.result_of >= i) {
        status = absl::InvalidArgumentError(
            absl::StrCat("operand ", j, " is the result of op #",
                         operand.result_of, ", which is not an earlier op"));
      } else {
        in.push_back(values[operand.result_of]);
      }
    }
    if (status.ok() && in.empty()) {
      status = absl::InvalidArgumentError("the op has no tensor operand");
    }
    absl::StatusOr<Impl::Value> result =
        status.ok() ? impl_->Apply(op, in)
                    : absl::StatusOr<Impl::Value>(status);
    // A result the caller keeps must fit the session's quotas along with
    // the kept results before it: checked here, so that the failure names
    // the op that made it.
    if (result.ok() && kept[i] && !result->entry.has_value()) {
      absl::Status admitted = impl_->table().Admit(
          session, kept_bytes + result->tensor->nbytes, kept_tensors + 1);
      if (admitted.ok()) {
        kept_bytes += result->tensor->nbytes;
        ++kept_tensors;
      } else {
        result = admitted;
      }
    }
    if (!result.ok()) {
      // At most kDescribed operands: a cat of a thousand tensors must not
      // make a message larger than a reply's metadata may be.
      constexpr size_t kDescribed = 8;
      std::vector<std::string> described;
      for (size_t j = 0; j < std::min(op.inputs.size(), kDescribed); ++j) {
        const Operand& operand = op.inputs[j];
        std::string d = operand.is_result
                            ? absl::StrCat("result of op #", operand.result_of)
                            : absl::StrCat("handle ", operand.handle);
        if (j < in.size()) absl::StrAppend(&d, " ", Describe(*in[j].tensor));
        described.push_back(std::move(d));
      }
      if (op.inputs.size() > kDescribed) {
        described.push_back(
            absl::StrCat("... ", op.inputs.size() - kDescribed, " more"));
      }
      if (op.scalar.has_value()) {
        described.push_back(absl::StrCat("scalar ", op.scalar->ToString()));
      }
      return absl::Status(
          result.status().code(),
          absl::StrCat("op #", i, " (", OpName(op),
                       "; operands: ", absl::StrJoin(described, ", "),
                       "): ", result.status().message()));
    }
    values[i] = std::move(*result);
    for (const Operand& operand : op.inputs) {
      if (operand.is_result && !kept[operand.result_of] &&
          last_use[operand.result_of] == static_cast<int64_t>(i)) {
        values[operand.result_of] = Impl::Value{};
      }
    }
    if (last_use[i] < 0 && !kept[i]) values[i] = Impl::Value{};
  }
  std::vector<TensorMeta> out;
  out.reserve(keep.size());
  std::map<uint32_t, TensorMeta> registered;
  for (uint32_t k : keep) {
    auto it = registered.find(k);
    if (it == registered.end()) {
      const Impl::Value& v = values[k];
      absl::StatusOr<TensorMeta> meta;
      if (v.entry.has_value()) {
        meta = GetTensor(session, v.entry->handle);
      } else {
        const StoredTensor& t = *v.tensor;
        meta = impl_->Register(session, impl_->SlotOf(t.device), t.dtype,
                               t.shape, t.nbytes, t.buffer, "");
      }
      if (!meta.ok()) {
        for (const auto& [index, m] : registered) {
          if (!values[index].entry.has_value()) {
            (void)Release(session, m.handle);
          }
        }
        // Admitted above, so only a concurrent call of the session gets
        // here; the message still names the op.
        return absl::Status(
            meta.status().code(),
            absl::StrCat("op #", k, " (", OpName(ops[k]),
                         "; keeping its result): ", meta.status().message()));
      }
      it = registered.emplace(k, *std::move(meta)).first;
    }
    out.push_back(it->second);
  }
  return out;
}

absl::StatusOr<TensorMeta> Runtime::Binary(std::string_view session,
                                           BinaryOp op, uint64_t lhs,
                                           uint64_t rhs) {
  OpSpec spec;
  spec.kind = OpSpec::Kind::kBinary;
  spec.binary = op;
  spec.inputs = {Operand::Handle(lhs), Operand::Handle(rhs)};
  return Run(session, spec);
}

absl::StatusOr<TensorMeta> Runtime::MatMul(std::string_view session,
                                           uint64_t lhs, uint64_t rhs) {
  OpSpec spec;
  spec.kind = OpSpec::Kind::kMatMul;
  spec.inputs = {Operand::Handle(lhs), Operand::Handle(rhs)};
  return Run(session, spec);
}

}  // namespace tensord::core
