// The Runtime's programs (core/runtime/program.h): registered in the
// session's handle table, run by the op-list loop Execute runs
// (Runtime::RunList, core/executor/executor.cc) on the plans made once.
#include <utility>

#include "core/runtime/program.h"
#include "core/runtime/runtime_impl.h"

namespace tensord::core {
namespace {

ProgramValue ValueOf(const StoredTensor& t) {
  return ProgramValue{t.dtype, t.shape, t.device};
}

TensorMeta MetaOfValue(const ProgramValue& v) {
  TensorMeta meta;
  meta.device = v.device->name();
  meta.dtype = v.dtype;
  meta.shape = v.shape;
  meta.nbytes = v.shape.ByteSize(v.dtype).value_or(0);
  return meta;
}

Runtime::ProgramMeta MetaOfProgram(uint64_t id, const Program& p) {
  Runtime::ProgramMeta meta;
  meta.id = id;
  meta.tag = p.tag();
  for (const ProgramValue& v : p.inputs()) {
    meta.inputs.push_back(MetaOfValue(v));
  }
  for (const ProgramValue& v : p.kept_values()) {
    meta.results.push_back(MetaOfValue(v));
  }
  meta.ops = p.ops().size();
  for (const BoundTensor& b : p.bound()) meta.bound.push_back(b.handle);
  meta.runs = p.runs();
  return meta;
}

}  // namespace

absl::StatusOr<Runtime::ProgramMeta> Runtime::RegisterProgram(
    std::string_view session, std::span<const ProgramInput> inputs,
    std::vector<OpSpec> ops, std::vector<uint32_t> keep,
    std::string_view tag) {
  ASSIGN_OR_RETURN(std::unique_ptr<HandleTable::SessionPin> pin,
                   impl_->table().Pin(session));
  RETURN_IF_ERROR(CheckTag(tag));
  RETURN_IF_ERROR(CheckProgramBounds(ops.size(), inputs.size()));
  std::vector<ProgramValue> placeholders;
  placeholders.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ProgramInput& in = inputs[i];
    auto named = [i](const absl::Status& s) {
      return Rewrapped(s, s.code(),
                       absl::StrCat("input #", i, ": ", s.message()));
    };
    absl::StatusOr<DeviceSlot*> slot = impl_->FindSlot(in.device);
    if (!slot.ok()) return named(slot.status());
    if (absl::Status s = ValidateDType(in.dtype); !s.ok()) return named(s);
    absl::StatusOr<Shape> shape = Shape::Make(in.dims);
    if (!shape.ok()) return named(shape.status());
    if (absl::StatusOr<uint64_t> n = shape->ByteSize(in.dtype); !n.ok()) {
      return named(n.status());
    }
    placeholders.push_back(
        ProgramValue{in.dtype, *std::move(shape), (*slot)->device.get()});
  }
  ASSIGN_OR_RETURN(
      std::shared_ptr<Program> program,
      Program::Compile(std::move(placeholders), std::move(ops),
                       std::move(keep), std::string(tag),
                       [&](uint64_t handle) -> absl::StatusOr<ProgramValue> {
                         ASSIGN_OR_RETURN(
                             HandleEntry entry,
                             impl_->table().Lookup(session, handle));
                         return ValueOf(*entry.tensor);
                       }));
  ASSIGN_OR_RETURN(const uint64_t id,
                   impl_->table().AddProgram(session, program));
  return MetaOfProgram(id, *program);
}

absl::StatusOr<std::vector<TensorMeta>> Runtime::RunProgram(
    std::string_view session, uint64_t id, std::span<const ProgramArg> args,
    std::span<const ProgramStepArgs> steps,
    const std::function<bool()>& cancelled, uint64_t seed_offset) {
  ASSIGN_OR_RETURN(std::unique_ptr<HandleTable::SessionPin> pin,
                   impl_->table().Pin(session));
  ASSIGN_OR_RETURN(std::shared_ptr<const Program> program,
                   impl_->table().FindProgram(session, id));
  const std::vector<ProgramValue>& placeholders = program->inputs();
  if (args.size() != placeholders.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("program ", id, " takes ", placeholders.size(),
                     " inputs, got ", args.size()));
  }
  // The optimizer steps' arguments of this run, checked as the op's own.
  absl::flat_hash_map<uint32_t, OpSpec> replaced;
  for (const ProgramStepArgs& step : steps) {
    const std::vector<OpSpec>& ops = program->ops();
    if (step.op >= ops.size() ||
        ops[step.op].kind != OpSpec::Kind::kOptimizerStep) {
      return absl::InvalidArgumentError(absl::StrCat(
          "steps names op #", step.op, " of program ", id,
          ", which is not an optimizer step"));
    }
    OpSpec op = ops[step.op];
    OptimizerArgs& a = op.optimizer;
    if (step.step != 0) a.step = step.step;
    if (step.lr.has_value()) a.lr = *step.lr;
    if (step.weight_decay.has_value()) a.weight_decay = *step.weight_decay;
    if (step.momentum.has_value()) {
      if (a.kind != OptimizerKind::kSgd) {
        return absl::InvalidArgumentError(absl::StrCat(
            "steps gives op #", step.op, " of program ", id,
            " a momentum, but it is not an SGD step"));
      }
      if ((*step.momentum != 0) != (a.momentum != 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "steps gives op #", step.op, " of program ", id, " momentum ",
            *step.momentum, ", but it was registered ",
            a.momentum != 0 ? "with momentum buffers: momentum must stay > 0"
                            : "without momentum buffers: momentum must stay 0",
            " (register the step again to change that)"));
      }
      a.momentum = *step.momentum;
    }
    RETURN_IF_ERROR(CheckOptimizerArgs(a));
    if (!replaced.emplace(step.op, std::move(op)).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "steps names op #", step.op, " twice"));
    }
  }
  // This run's seeds of the seeded random ops.
  if (seed_offset != 0) {
    const std::vector<OpSpec>& ops = program->ops();
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != OpSpec::Kind::kDropout || !ops[i].seed.has_value()) {
        continue;
      }
      OpSpec op = ops[i];
      op.seed = *op.seed + seed_offset;  // unsigned: wraps
      replaced.emplace(static_cast<uint32_t>(i), std::move(op));
    }
  }
  // Inline inputs are admitted for the session like any buffer.
  AdmissionScope scope(session);
  std::vector<Executor::Value> inputs;
  inputs.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ProgramArg& arg = args[i];
    const ProgramValue& want = placeholders[i];
    if (!arg.is_data) {
      absl::StatusOr<HandleEntry> entry =
          impl_->table().Lookup(session, arg.handle);
      if (!entry.ok()) {
        return Rewrapped(entry.status(), entry.status().code(),
                         absl::StrCat("input #", i, " of program ", id, ": ",
                                      entry.status().message()));
      }
      RETURN_IF_ERROR(program->CheckInput(id, i, ValueOf(*entry->tensor)));
      inputs.push_back(Executor::Value{entry->tensor, *entry});
      continue;
    }
    const uint64_t nbytes = want.shape.ByteSize(want.dtype).value_or(0);
    if (arg.data.size() != nbytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input #", i, " of program ", id, ": data is ", arg.data.size(),
          " bytes but its placeholder, ", want.ToString(), ", needs ", nbytes,
          " bytes"));
    }
    if (want.dtype == DType::kBool) {
      RETURN_IF_ERROR(CheckBoolData(arg.data, 0));
    }
    DeviceSlot& slot = impl_->SlotOf(want.device);
    ASSIGN_OR_RETURN(Executor::Output out,
                     impl_->AllocateOutput(slot, want.dtype, want.shape));
    RETURN_IF_ERROR(
        slot.device->CopyFromHost(arg.data.data(), *out.buffer, 0, nbytes));
    inputs.push_back(Executor::Value{
        impl_->executor().Stored(slot, std::move(out)), std::nullopt});
  }
  // The bound tensors, each the tensor the program was planned for.
  absl::flat_hash_map<uint64_t, HandleEntry> looked_up;
  const std::vector<BoundTensor>& bound = program->bound();
  for (size_t i = 0; i < bound.size(); ++i) {
    absl::StatusOr<HandleEntry> entry =
        impl_->table().Lookup(session, bound[i].handle);
    RETURN_IF_ERROR(program->CheckBound(
        id, i,
        entry.ok() ? absl::StatusOr<ProgramValue>(ValueOf(*entry->tensor))
                   : absl::StatusOr<ProgramValue>(entry.status())));
    looked_up.emplace(bound[i].handle, *std::move(entry));
  }
  OpList list;
  list.ops = program->ops();
  list.keep = program->keep();
  list.plans = program->plans();
  list.last_use = program->last_use();
  list.inputs = inputs;
  list.looked_up = &looked_up;
  list.replaced = replaced.empty() ? nullptr : &replaced;
  list.cancelled = cancelled ? &cancelled : nullptr;
  ASSIGN_OR_RETURN(std::vector<TensorMeta> kept, RunList(session, list));
  program->CountRun();
  return kept;
}

absl::StatusOr<std::vector<Runtime::ProgramMeta>> Runtime::ListPrograms(
    std::string_view session) {
  ASSIGN_OR_RETURN(auto programs, impl_->table().ListPrograms(session));
  std::vector<ProgramMeta> out;
  out.reserve(programs.size());
  for (const auto& [id, program] : programs) {
    out.push_back(MetaOfProgram(id, *program));
  }
  return out;
}

absl::Status Runtime::ReleaseProgram(std::string_view session,
                                     uint64_t program) {
  return impl_->table().RemoveProgram(session, program);
}

}  // namespace tensord::core
