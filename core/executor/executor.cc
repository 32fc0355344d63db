#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "core/autograd/engine.h"
#include "core/base/op_table.h"
#include "core/base/refusal.h"
#include "core/planner/op_plan.h"
#include "core/planner/planner.h"
#include "core/runtime/op_list.h"
#include "core/runtime/runtime_impl.h"

namespace tensord::core {

Executor::Executor(const std::vector<std::unique_ptr<DeviceSlot>>& slots,
                   HandleTable& table, Admitter& admitter)
    : slots_(slots),
      table_(table),
      admitter_(admitter),
      autograd_(std::make_unique<AutogradEngine>(*this, table)) {}

Executor::~Executor() = default;

DeviceSlot& Executor::SlotOf(const Device* device) const {
  for (const auto& slot : slots_) {
    if (slot->device.get() == device) return *slot;
  }
  // Every stored tensor's device is one of ours.
  std::abort();
}

namespace {

std::string Describe(const StoredTensor& t) {
  return absl::StrCat(t.shape.ToString(), " ", ToAbsl(DTypeName(t.dtype)));
}

}  // namespace

absl::Status Executor::InPlace(const OpSpec& op, const StoredTensor& self,
                               const StoredTensor* other) {
  const Scalar* scalar = op.scalar.has_value() ? &*op.scalar : nullptr;
  const BinaryOp bop = InPlaceBinaryOp(op.in_place);
  TensorPtr scaled;  // kAxpy: alpha * other
  if (op.in_place == InPlaceOp::kAxpy) {
    // PlanOp has checked that `other` is there and alpha suits it.
    ASSIGN_OR_RETURN(Output t, BinaryOut(BinaryOp::kMul, *other, nullptr,
                                         &op.alpha, false, nullptr));
    scaled = Stored(SlotOf(other->device), std::move(t));
    other = scaled.get();
  }
  return BinaryOut(bop, self, other, other == nullptr ? scalar : nullptr, false,
                   &self)
      .status();
}

absl::StatusOr<Executor::Value> Executor::Apply(const OpSpec& op,
                                                std::span<const Value> in) {
  // Arity, the same-device rule and the op's own rules, in one place with
  // the eager client (core/planner/op_plan.h); the *Out methods below then plan
  // their kernels.
  absl::InlinedVector<OpInput, 4> inputs;  // no allocation per op
  for (const Value& v : in) {
    inputs.push_back(
        OpInput{v.tensor->dtype, v.tensor->shape, v.tensor->device->name()});
  }
  const Capabilities none;  // no operand: PlanOp reports the arity first
  ASSIGN_OR_RETURN(
      const OpResult plan,
      PlanOp(op, {inputs.data(), inputs.size()},
             in.empty() ? Target{none, ""} : TargetOf(*in[0].tensor->device)));
  return ApplyPlanned(op, in, plan);
}

absl::StatusOr<Executor::Value> Executor::ApplyPlanned(
    const OpSpec& op, std::span<const Value> in, const OpResult& plan) {
  const Emit emit = EmitOf(RowIndexOf(op));
  if (emit == nullptr) {
    return absl::InternalError(absl::StrCat("Apply: ", OpName(op)));
  }
  return (this->*emit)(op, in, plan);
}

Executor::Emit Executor::EmitOf(size_t row) {
#include "core/op_emit.inc"  // generated: kEmitOf, one per row
  static_assert(std::size(kEmitOf) == kOpRowCount);
  return kEmitOf[row];
}

absl::StatusOr<Executor::Value> Executor::Made(const OpSpec& op,
                                               std::span<const Value> in,
                                               const OpResult& plan,
                                               absl::StatusOr<Output> out,
                                               TensorPtr extra) {
  if (!out.ok()) return out.status();
  TensorPtr result = Stored(SlotOf(in[0].tensor->device), std::move(*out));
  autograd_->RecordGrad(op, in, result, std::move(extra), plan.plan);
  return Value{std::move(result), std::nullopt};
}

namespace {

// in[i]'s tensor, or nullptr past the end (`in`: the Values of Apply).
template <typename Values>
const StoredTensor* Nth(const Values& in, size_t i) {
  return i < in.size() ? in[i].tensor.get() : nullptr;
}

}  // namespace

absl::StatusOr<Executor::Value> Executor::EmitBinary(const OpSpec& op,
                                                     std::span<const Value> in,
                                                     const OpResult& plan) {
  const bool with_scalar = op.scalar.has_value();
  // PlanOp's plan: the op is not planned again.
  return Made(op, in, plan,
              BinaryOut(plan.Plan<BinaryPlan>(), op.binary, *in[0].tensor,
                        Nth(in, 1), with_scalar ? &*op.scalar : nullptr,
                        with_scalar && op.scalar_first, nullptr));
}

absl::StatusOr<Executor::Value> Executor::EmitUnary(const OpSpec& op,
                                                    std::span<const Value> in,
                                                    const OpResult& plan) {
  return Made(
      op, in, plan,
      UnaryOut(plan.Plan<UnaryPlan>(), op.unary, *in[0].tensor, op.args));
}

absl::StatusOr<Executor::Value> Executor::EmitMatMul(const OpSpec& op,
                                                     std::span<const Value> in,
                                                     const OpResult& plan) {
  return Made(op, in, plan,
              MatMulOut(plan.Plan<MatMulPlan>(), *in[0].tensor, *in[1].tensor));
}

absl::StatusOr<Executor::Value> Executor::EmitLinear(const OpSpec& op,
                                                     std::span<const Value> in,
                                                     const OpResult& plan) {
  return Made(op, in, plan,
              LinearOut(plan.Plan<MatMulPlan>(), *in[0].tensor, *in[1].tensor,
                        Nth(in, 2)));
}

absl::StatusOr<Executor::Value> Executor::EmitReduce(const OpSpec& op,
                                                     std::span<const Value> in,
                                                     const OpResult& plan) {
  return Made(op, in, plan,
              ReduceOut(plan.Plan<ReducePlan>(), op.reduce, *in[0].tensor));
}

absl::StatusOr<Executor::Value> Executor::EmitSoftmax(const OpSpec& op,
                                                      std::span<const Value> in,
                                                      const OpResult& plan) {
  return Made(op, in, plan,
              SoftmaxOut(plan.Plan<SoftmaxPlan>(), *in[0].tensor, op.log));
}

absl::StatusOr<Executor::Value> Executor::EmitClamp(const OpSpec& op,
                                                    std::span<const Value> in,
                                                    const OpResult& plan) {
  using Kind = OpSpec::Bound::Kind;
  const bool min_tensor = op.clamp_min.kind == Kind::kTensor;
  const bool max_tensor = op.clamp_max.kind == Kind::kTensor;
  const StoredTensor* lo = min_tensor ? in[1].tensor.get() : nullptr;
  const StoredTensor* hi =
      max_tensor ? in[min_tensor ? 2 : 1].tensor.get() : nullptr;
  return Made(op, in, plan,
              ClampOut(plan.Plan<ClampPlan>(), *in[0].tensor, op.clamp_min, lo,
                       op.clamp_max, hi));
}

absl::StatusOr<Executor::Value> Executor::EmitWhere(const OpSpec& op,
                                                    std::span<const Value> in,
                                                    const OpResult& plan) {
  using Kind = OpSpec::Bound::Kind;
  size_t next = 1;
  const StoredTensor* input =
      op.where_input.kind == Kind::kTensor ? in[next++].tensor.get() : nullptr;
  const StoredTensor* other =
      op.where_other.kind == Kind::kTensor ? in[next++].tensor.get() : nullptr;
  return Made(op, in, plan,
              WhereOut(plan.Plan<WherePlan>(), *in[0].tensor, op.where_input,
                       input, op.where_other, other));
}

absl::StatusOr<Executor::Value> Executor::EmitPermute(const OpSpec& op,
                                                      std::span<const Value> in,
                                                      const OpResult& plan) {
  return Made(op, in, plan,
              PermuteOut(plan.Plan<PermutePlan>(), *in[0].tensor));
}

absl::StatusOr<Executor::Value> Executor::EmitTranspose(
    const OpSpec& op, std::span<const Value> in, const OpResult& plan) {
  return Made(op, in, plan,
              PermuteOut(plan.Plan<PermutePlan>(), *in[0].tensor));
}

absl::StatusOr<Executor::Value> Executor::EmitReshape(const OpSpec& op,
                                                      std::span<const Value> in,
                                                      const OpResult& plan) {
  return Made(op, in, plan,
              ReshapeOut(plan.Plan<ReshapePlan>(), *in[0].tensor));
}

absl::StatusOr<Executor::Value> Executor::EmitSlice(const OpSpec& op,
                                                    std::span<const Value> in,
                                                    const OpResult& plan) {
  return Made(op, in, plan, SliceOut(*in[0].tensor, plan.Plan<SlicePlan>()));
}

absl::StatusOr<Executor::Value> Executor::EmitCat(const OpSpec& op,
                                                  std::span<const Value> in,
                                                  const OpResult& plan) {
  return Made(op, in, plan, CatOut(plan.Plan<CatPlan>(), in));
}

absl::StatusOr<Executor::Value> Executor::EmitCast(const OpSpec& op,
                                                   std::span<const Value> in,
                                                   const OpResult& plan) {
  return Made(op, in, plan, CastPlannedOut(*in[0].tensor, op.dtype));
}

absl::StatusOr<Executor::Value> Executor::EmitInPlace(const OpSpec& op,
                                                      std::span<const Value> in,
                                                      const OpResult& plan) {
  RETURN_IF_ERROR(autograd_->CheckInPlaceGrad(op, in));
  RETURN_IF_ERROR(InPlace(op, *in[0].tensor, Nth(in, 1)));
  in[0].tensor->buffer->BumpVersion();
  return in[0];
}

absl::StatusOr<Executor::Value> Executor::EmitConv2d(const OpSpec& op,
                                                     std::span<const Value> in,
                                                     const OpResult& plan) {
  return Made(op, in, plan,
              Conv2dOut(plan.Plan<Conv2dPlan>(), *in[0].tensor, *in[1].tensor,
                        Nth(in, 2)));
}

absl::StatusOr<Executor::Value> Executor::EmitPool2d(const OpSpec& op,
                                                     std::span<const Value> in,
                                                     const OpResult& plan) {
  return Made(op, in, plan,
              Pool2dOut(plan.Plan<Pool2dPlan>(), PoolKindOf(op), *in[0].tensor,
                        op.window));
}

absl::StatusOr<Executor::Value> Executor::EmitLoss(const OpSpec& op,
                                                   std::span<const Value> in,
                                                   const OpResult& plan) {
  return Made(op, in, plan,
              LossOut(plan.Plan<LossPlan>(), op, *in[0].tensor, *in[1].tensor));
}

absl::StatusOr<Executor::Value> Executor::EmitAdaptiveAvgPool2d(
    const OpSpec& op, std::span<const Value> in, const OpResult& plan) {
  return Made(
      op, in, plan,
      AdaptiveAvgPool2dOut(plan.Plan<AdaptivePoolPlan>(), *in[0].tensor));
}

absl::StatusOr<Executor::Value> Executor::EmitDropout(const OpSpec& op,
                                                      std::span<const Value> in,
                                                      const OpResult& plan) {
  const StoredTensor& x = *in[0].tensor;
  TensorPtr mask;  // the factor each element got, for the backward
  absl::StatusOr<Output> out =
      DropoutOut(x, op.dropout_p, op.train, op.seed,
                 !op.no_grad && x.autograd->Tracked() ? &mask : nullptr);
  return Made(op, in, plan, std::move(out), std::move(mask));
}

absl::StatusOr<Executor::Value> Executor::EmitOptimizerStep(
    const OpSpec& op, std::span<const Value> in, const OpResult& plan) {
  RETURN_IF_ERROR(OptimizerStep(op, in));
  return in[0];
}

absl::StatusOr<TensorMeta> Runtime::Run(std::string_view session,
                                        const OpSpec& op) {
  std::vector<Executor::Value> in;
  in.reserve(op.inputs.size());
  for (const Operand& operand : op.inputs) {
    if (operand.is_result) {
      return absl::InvalidArgumentError(
          "result_of operands name an earlier op of an Execute list; a "
          "single op takes handles only");
    }
    if (operand.is_input) {
      return absl::InvalidArgumentError(
          "input operands name a registered program's inputs "
          "(RegisterProgram); a single op takes handles only");
    }
    ASSIGN_OR_RETURN(HandleEntry entry,
                     impl_->table().Lookup(session, operand.handle));
    in.push_back(Executor::Value{entry.tensor, entry});
  }
  if (in.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " needs at least one tensor operand"));
  }
  AdmissionScope scope(session);
  ASSIGN_OR_RETURN(Executor::Value result, impl_->executor().Apply(op, in));
  if (result.entry.has_value()) return MetaOf(*result.entry);
  return impl_->Register(session, std::move(result.tensor), "");
}

absl::StatusOr<std::vector<TensorMeta>> Runtime::Execute(
    std::string_view session, std::span<const OpSpec> ops,
    std::span<const uint32_t> keep, const std::function<bool()>& cancelled) {
  // The session found once for the list's lookups and admissions.
  ASSIGN_OR_RETURN(std::unique_ptr<HandleTable::SessionPin> pin,
                   impl_->table().Pin(session));
  for (uint32_t k : keep) {
    if (k >= ops.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "keep names op #", k, " but the list has ", ops.size(), " ops"));
    }
  }
  absl::flat_hash_map<uint64_t, HandleEntry> looked_up;
  OpList list;
  list.ops = ops;
  list.keep = keep;
  list.looked_up = &looked_up;
  list.cancelled = cancelled ? &cancelled : nullptr;
  return RunList(session, list);
}

absl::StatusOr<std::vector<TensorMeta>> Runtime::RunList(
    std::string_view session, const OpList& list) {
  const std::span<const OpSpec> ops = list.ops;
  // Every buffer an op makes is admitted before it is allocated, against
  // the session's quotas with what the list holds so far (its kept results,
  // intermediates still to be read, what autograd saved): the op that
  // crosses a limit is refused, before it allocates.
  AdmissionScope scope(session);
  std::vector<bool> kept(ops.size(), false);
  for (uint32_t k : list.keep) kept[k] = true;
  // The last op reading each result, so that intermediates are freed as
  // soon as nothing reads them (a 1000-step list holds a step's worth).
  std::vector<int64_t> computed_last_use;
  std::span<const int64_t> last_use = list.last_use;
  if (last_use.empty()) {
    computed_last_use.assign(ops.size(), -1);
    for (size_t i = 0; i < ops.size(); ++i) {
      for (const Operand& operand : ops[i].inputs) {
        if (operand.is_result && operand.result_of < i) {
          computed_last_use[operand.result_of] = static_cast<int64_t>(i);
        }
      }
    }
    last_use = computed_last_use;
  }
  std::vector<Executor::Value> values(ops.size());
  // The session's tensors each op names, looked up once per list (a list
  // may read one weight a thousand times).
  absl::flat_hash_map<uint64_t, HandleEntry>& looked_up = *list.looked_up;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (list.cancelled != nullptr && (*list.cancelled)()) {
      // `values` goes with the return: everything made so far is freed.
      return absl::CancelledError(
          absl::StrCat("Execute cancelled by the client before op #", i, " of ",
                       ops.size()));
    }
    const OpSpec* replaced = nullptr;
    if (list.replaced != nullptr) {
      auto it = list.replaced->find(static_cast<uint32_t>(i));
      if (it != list.replaced->end()) replaced = &it->second;
    }
    const OpSpec& op = replaced != nullptr ? *replaced : ops[i];
    absl::InlinedVector<Executor::Value, 4> in;
    in.reserve(op.inputs.size());
    absl::Status status;
    for (size_t j = 0; j < op.inputs.size() && status.ok(); ++j) {
      const Operand& operand = op.inputs[j];
      if (operand.is_input) {
        if (operand.input >= list.inputs.size()) {
          status = absl::InvalidArgumentError(absl::StrCat(
              "operand ", j, " is a program's input #", operand.input,
              ", which only a registered program (RegisterProgram) has"));
          continue;
        }
        in.push_back(list.inputs[operand.input]);
      } else if (!operand.is_result) {
        auto it = looked_up.find(operand.handle);
        if (it == looked_up.end()) {
          absl::StatusOr<HandleEntry> entry =
              impl_->table().Lookup(session, operand.handle);
          if (entry.ok()) {
            it = looked_up.emplace(operand.handle, *std::move(entry)).first;
          } else {
            status = entry.status();
            continue;
          }
        }
        in.push_back(Executor::Value{it->second.tensor, it->second});
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
    absl::StatusOr<Executor::Value> result =
        !status.ok() ? absl::StatusOr<Executor::Value>(status)
        : list.plans.empty()
            ? impl_->executor().Apply(op, {in.data(), in.size()})
            : impl_->executor().ApplyPlanned(op, {in.data(), in.size()},
                                             list.plans[i]);
    if (!result.ok()) {
      return OpListFailure(i, op, result.status(), [&](size_t j) {
        return j < in.size() ? Describe(*in[j].tensor) : std::string();
      });
    }
    values[i] = std::move(*result);
    for (const Operand& operand : op.inputs) {
      if (operand.is_result && !kept[operand.result_of] &&
          last_use[operand.result_of] == static_cast<int64_t>(i)) {
        values[operand.result_of] = Executor::Value{};
      }
    }
    if (last_use[i] < 0 && !kept[i]) values[i] = Executor::Value{};
  }
  std::vector<TensorMeta> out;
  out.reserve(list.keep.size());
  std::map<uint32_t, TensorMeta> registered;
  for (uint32_t k : list.keep) {
    auto it = registered.find(k);
    if (it == registered.end()) {
      const Executor::Value& v = values[k];
      absl::StatusOr<TensorMeta> meta;
      if (v.entry.has_value()) {
        meta = GetTensor(session, v.entry->handle);
      } else {
        meta = impl_->Register(session, v.tensor, "");
      }
      if (!meta.ok()) {
        for (const auto& [index, m] : registered) {
          if (!values[index].entry.has_value()) {
            (void)Release(session, m.handle);
          }
        }
        // Admitted when allocated, so only a concurrent call of the
        // session gets here; the message still names the op.
        return Rewrapped(
            meta.status(), meta.status().code(),
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
