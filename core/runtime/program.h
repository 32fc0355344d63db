// A program: an op list planned once against typed inputs, then run many
// times (RegisterProgram / RunProgram in tensord.proto; a training step).
//
// Compile checks the list against its bounds, gives every operand its
// metadata — an input placeholder's, a bound session tensor's as it is at
// registration, or an earlier op's planned result — and plans every op
// with PlanOp (core/planner/op_plan.h), the planner Execute uses, with
// Execute's "op #<i> (...)" message when one fails. A run then only checks
// its inputs and bound tensors against what was planned (CheckInput,
// CheckBound) and runs each op's emit on its stored plan: nothing is
// decoded or planned again.
//
// A program holds no tensor: its bound tensors are named by handle and
// looked up at each run, so releasing one makes the next run fail (as
// FAILED_PRECONDITION naming it) instead of keeping its memory alive.
//
// Thread-safety: immutable once compiled, but for the run counter.
#ifndef TENSORD_CORE_RUNTIME_PROGRAM_H_
#define TENSORD_CORE_RUNTIME_PROGRAM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/ops.h"
#include "core/base/shape.h"
#include "core/planner/op_plan.h"
#include "core/runtime/stored_tensor.h"

namespace tensord::core {

// Bounds on one program (Limits.max_program_ops, max_program_inputs).
inline constexpr size_t kMaxProgramOps = 16384;
inline constexpr size_t kMaxProgramInputs = 256;
// Programs one session holds (Limits.max_session_programs); past it the
// least recently used is dropped.
inline constexpr size_t kMaxSessionPrograms = 16;

// INVALID_ARGUMENT naming the limit when a program of `ops` ops and
// `inputs` inputs is past kMaxProgramOps or kMaxProgramInputs: the one
// check, which the server makes before converting a request and Compile
// makes for every caller.
absl::Status CheckProgramBounds(size_t ops, size_t inputs);

// A tensor's metadata as a program plans it: an input placeholder, a bound
// tensor or an op's result.
struct ProgramValue {
  DType dtype = DType::kFloat32;
  Shape shape;
  const Device* device = nullptr;  // borrowed: the Runtime's
  bool operator==(const ProgramValue& o) const {
    return dtype == o.dtype && shape == o.shape && device == o.device;
  }
  std::string ToString() const;  // "float32 [8, 784] on cpu"
};

// A session tensor the program reads by handle.
struct BoundTensor {
  uint64_t handle = 0;
  ProgramValue value;
};

class Program {
 public:
  // The metadata of session tensor `handle` now (NOT_FOUND for one the
  // session lacks).
  using Lookup = std::function<absl::StatusOr<ProgramValue>(uint64_t handle)>;
  // Plans `ops` for `inputs`. INVALID_ARGUMENT past kMaxProgramOps or
  // kMaxProgramInputs, for an input operand past the inputs, a result_of
  // that names no earlier op, an op without a tensor operand, or a `keep`
  // past the list; a planning error as Execute reports it; `lookup`'s
  // error for an unknown bound handle.
  static absl::StatusOr<std::shared_ptr<Program>> Compile(
      std::vector<ProgramValue> inputs, std::vector<OpSpec> ops,
      std::vector<uint32_t> keep, std::string tag, const Lookup& lookup);

  const std::vector<ProgramValue>& inputs() const { return inputs_; }
  const std::vector<OpSpec>& ops() const { return ops_; }
  // plans()[i]: PlanOp's plan of ops()[i] for the planned operands.
  const std::vector<OpResult>& plans() const { return plans_; }
  const std::vector<uint32_t>& keep() const { return keep_; }
  // last_use()[i]: the last op reading op i's result (-1: none).
  const std::vector<int64_t>& last_use() const { return last_use_; }
  const std::vector<BoundTensor>& bound() const { return bound_; }
  // The planned result of each kept op, in the order of keep().
  std::vector<ProgramValue> kept_values() const;
  const std::string& tag() const { return tag_; }

  // INVALID_ARGUMENT "input #<i> of program <id>: expected <placeholder>,
  // got <value>" unless `value` is the placeholder's dtype, shape and
  // device.
  absl::Status CheckInput(uint64_t id, size_t i,
                          const ProgramValue& value) const;
  // FAILED_PRECONDITION naming the handle when bound tensor #i is not the
  // tensor the program was planned for (`now`: its metadata now, or the
  // lookup's error when it has been released).
  absl::Status CheckBound(uint64_t id, size_t i,
                          const absl::StatusOr<ProgramValue>& now) const;

  uint64_t runs() const { return runs_.load(std::memory_order_relaxed); }
  void CountRun() const { runs_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Program() = default;
  std::vector<ProgramValue> inputs_;
  std::vector<OpSpec> ops_;
  std::vector<OpResult> plans_;
  std::vector<ProgramValue> results_;  // each op's planned result
  std::vector<uint32_t> keep_;
  std::vector<int64_t> last_use_;
  std::vector<BoundTensor> bound_;
  std::string tag_;
  mutable std::atomic<uint64_t> runs_{0};
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_PROGRAM_H_
