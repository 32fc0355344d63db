#include "core/runtime/program.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/base/op_table.h"
#include "core/base/status.h"
#include "core/planner/planner.h"
#include "core/runtime/op_list.h"

namespace tensord::core {

std::string ProgramValue::ToString() const {
  return absl::StrCat(ToAbsl(DTypeName(dtype)), " ", shape.ToString(), " on ",
                      device == nullptr ? "?" : device->name());
}

absl::Status CheckProgramBounds(size_t ops, size_t inputs) {
  if (ops > kMaxProgramOps) {
    return absl::InvalidArgumentError(
        absl::StrCat("the program has ", ops, " ops; the server's limit is ",
                     kMaxProgramOps, " (Limits.max_program_ops)"));
  }
  if (inputs > kMaxProgramInputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the program has ", inputs, " inputs; the server's limit is ",
        kMaxProgramInputs, " (Limits.max_program_inputs)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Program>> Program::Compile(
    std::vector<ProgramValue> inputs, std::vector<OpSpec> ops,
    std::vector<uint32_t> keep, std::string tag, const Lookup& lookup) {
  RETURN_IF_ERROR(CheckProgramBounds(ops.size(), inputs.size()));
  for (uint32_t k : keep) {
    if (k >= ops.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "keep names op #", k, " but the program has ", ops.size(), " ops"));
    }
  }
  std::shared_ptr<Program> p(new Program());
  p->inputs_ = std::move(inputs);
  p->keep_ = std::move(keep);
  p->tag_ = std::move(tag);
  p->plans_.reserve(ops.size());
  p->results_.reserve(ops.size());
  p->last_use_.assign(ops.size(), -1);
  absl::flat_hash_map<uint64_t, size_t> bound_index;  // handle -> bound_
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpSpec& op = ops[i];
    // Copies: bound_ grows while an op's operands are gathered.
    absl::InlinedVector<ProgramValue, 4> values;
    absl::Status status;
    for (size_t j = 0; j < op.inputs.size() && status.ok(); ++j) {
      const Operand& operand = op.inputs[j];
      if (operand.is_input) {
        if (operand.input >= p->inputs_.size()) {
          status = absl::InvalidArgumentError(
              absl::StrCat("operand ", j, " is input #", operand.input,
                           " but the program has ", p->inputs_.size(),
                           " inputs"));
          continue;
        }
        values.push_back(p->inputs_[operand.input]);
      } else if (operand.is_result) {
        if (operand.result_of >= i) {
          status = absl::InvalidArgumentError(
              absl::StrCat("operand ", j, " is the result of op #",
                           operand.result_of, ", which is not an earlier op"));
          continue;
        }
        values.push_back(p->results_[operand.result_of]);
        p->last_use_[operand.result_of] = static_cast<int64_t>(i);
      } else {
        auto it = bound_index.find(operand.handle);
        if (it == bound_index.end()) {
          absl::StatusOr<ProgramValue> v = lookup(operand.handle);
          if (!v.ok()) {
            status = v.status();
            continue;
          }
          it = bound_index.emplace(operand.handle, p->bound_.size()).first;
          p->bound_.push_back(BoundTensor{operand.handle, *std::move(v)});
        }
        values.push_back(p->bound_[it->second].value);
      }
    }
    if (status.ok() && values.empty()) {
      status = absl::InvalidArgumentError("the op has no tensor operand");
    }
    absl::StatusOr<OpResult> plan =
        status.ok() ? absl::StatusOr<OpResult>(OpResult{}) : status;
    if (status.ok()) {
      absl::InlinedVector<OpInput, 4> planned;
      for (const ProgramValue& v : values) {
        planned.push_back(OpInput{v.dtype, v.shape, v.device->name()});
      }
      plan = PlanOp(op, {planned.data(), planned.size()},
                    TargetOf(*values[0].device));
    }
    if (!plan.ok()) {
      return OpListFailure(i, op, plan.status(), [&](size_t j) -> std::string {
        if (j >= values.size()) return "";
        return absl::StrCat(values[j].shape.ToString(), " ",
                            ToAbsl(DTypeName(values[j].dtype)));
      });
    }
    // The result: operand 0 itself (an in-place op, an optimizer step, ...)
    // or a new tensor on operand 0's device.
    p->results_.push_back(RowOf(op).returns_input
                              ? values[0]
                              : ProgramValue{plan->dtype, plan->shape,
                                             values[0].device});
    p->plans_.push_back(*std::move(plan));
  }
  p->ops_ = std::move(ops);
  return p;
}

std::vector<ProgramValue> Program::kept_values() const {
  std::vector<ProgramValue> out;
  out.reserve(keep_.size());
  for (uint32_t k : keep_) out.push_back(results_[k]);
  return out;
}

absl::Status Program::CheckInput(uint64_t id, size_t i,
                                 const ProgramValue& value) const {
  if (value == inputs_[i]) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "input #", i, " of program ", id, ": expected ", inputs_[i].ToString(),
      ", got ", value.ToString(),
      " (a program runs on inputs of its placeholders' dtype, shape and "
      "device: register another one for this signature)"));
}

absl::Status Program::CheckBound(
    uint64_t id, size_t i, const absl::StatusOr<ProgramValue>& now) const {
  const BoundTensor& b = bound_[i];
  if (!now.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "program ", id, " reads tensor ", b.handle, " (", b.value.ToString(),
        "), which the session no longer has: it was released after the "
        "program was registered (", now.status().message(), ")"));
  }
  if (*now == b.value) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "program ", id, " reads tensor ", b.handle, " as ", b.value.ToString(),
      ", but the session's tensor ", b.handle, " is now ", now->ToString()));
}

}  // namespace tensord::core
