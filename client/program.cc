// Program (tensord/program.h): a Batch's ops registered as a program per
// input signature, run with RunProgram.
#include "tensord/program.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "client/grpc_enums.h"
#include "client/grpc_ops.h"
#include "client/grpc_session.h"
#include "tensord/nn.h"

namespace tensord::client {
namespace internal {

// One input's dtype, shape and device.
using InputSignature = std::tuple<int, std::vector<int64_t>, std::string>;

struct ProgramState {
  std::shared_ptr<const Session> session;
  // The ops with the inputs as Operand.input, and the kept indices.
  v1::RegisterProgramRequest request;
  std::vector<Tensor> bound;  // what the ops read by handle, kept alive
  std::vector<std::pair<uint32_t, optim::Optimizer*>> optimizer_steps;
  std::map<std::vector<InputSignature>, uint64_t> programs;
  // The seeded dropouts: how many, and the least of the seeds recorded.
  uint64_t seeds = 0;
  uint64_t first_seed = 0;
  uint64_t runs = 0;
};

namespace {

InputSignature SignatureOf(const Tensor& t) {
  return {static_cast<int>(t.dtype()), t.shape(), t.device().str()};
}

// The program of `signature`: registered the first time (or again after
// the server dropped it).
uint64_t Registered(ProgramState& s,
                    const std::vector<InputSignature>& signature,
                    bool again = false) {
  auto it = s.programs.find(signature);
  if (it != s.programs.end() && !again) return it->second;
  v1::RegisterProgramRequest request = s.request;
  for (const auto& [dtype, shape, device] : signature) {
    v1::ProgramInput* in = request.add_inputs();
    in->set_dtype(static_cast<v1::DType>(dtype));
    for (int64_t d : shape) in->add_shape(d);
    in->set_device(device);
  }
  const uint64_t id =
      s.session
          ->Call(&v1::TensorService::Stub::RegisterProgram, std::move(request))
          .program()
          .program();
  s.programs[signature] = id;
  return id;
}

}  // namespace
}  // namespace internal

Program Batch::compile(const std::vector<Tensor>& inputs) {
  if (state_->ran) {
    throw Error(StatusCode::FAILED_PRECONDITION,
                "a Batch runs or compiles only once");
  }
  state_->ran = true;
  auto program = std::make_shared<internal::ProgramState>();
  program->session = state_->session;
  std::map<uint64_t, uint32_t> slot;  // input handle -> its position
  std::vector<internal::InputSignature> signature;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (internal::TensorAccess::State(inputs[i])->session != state_->session) {
      throw Error(StatusCode::INVALID_ARGUMENT,
                  "program input tensor belongs to another client's session");
    }
    slot[inputs[i].handle()] = static_cast<uint32_t>(i);
    signature.push_back(internal::SignatureOf(inputs[i]));
  }
  for (v1::Op& op : *state_->request.mutable_ops()) {
    internal::AnyOperand(op, [&](v1::Operand& operand) {
      if (operand.source_case() == v1::Operand::kHandle) {
        auto it = slot.find(operand.handle());
        if (it != slot.end()) operand.set_input(it->second);
      }
      return false;  // every operand
    });
  }
  for (const v1::Op& op : state_->request.ops()) {
    if (!op.has_dropout() || !op.dropout().has_seed()) continue;
    const uint64_t seed = op.dropout().seed();
    program->first_seed =
        program->seeds == 0 ? seed : std::min(program->first_seed, seed);
    ++program->seeds;
  }
  *program->request.mutable_ops() = std::move(*state_->request.mutable_ops());
  *program->request.mutable_keep() = state_->request.keep();
  program->request.set_tag("batch");
  for (Tensor& t : state_->inputs) {
    if (slot.count(t.handle()) == 0) program->bound.push_back(std::move(t));
  }
  state_->inputs.clear();
  program->optimizer_steps = std::move(state_->optimizer_steps);
  // Recording a step counted it; compiled, it counts when it runs.
  for (const auto& [index, optimizer] : program->optimizer_steps) {
    --optimizer->steps_;
  }
  internal::Registered(*program, signature);
  return Program(std::move(program));
}

size_t Program::ops() const {
  return static_cast<size_t>(state_->request.ops_size());
}

size_t Program::programs() const { return state_->programs.size(); }

BatchResults Program::run(const std::vector<Tensor>& inputs) {
  internal::ProgramState& s = *state_;
  std::vector<internal::InputSignature> signature;
  v1::RunProgramRequest request;
  for (const Tensor& t : inputs) {
    if (internal::TensorAccess::State(t)->session != s.session) {
      throw Error(StatusCode::INVALID_ARGUMENT,
                  "program input tensor belongs to another client's session");
    }
    signature.push_back(internal::SignatureOf(t));
    request.add_inputs()->set_handle(t.handle());
  }
  const size_t expected =
      s.programs.empty() ? inputs.size() : s.programs.begin()->first.size();
  if (inputs.size() != expected) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "the program takes " + std::to_string(expected) +
                    " inputs, got " + std::to_string(inputs.size()));
  }
  request.set_program(internal::Registered(s, signature));
  for (const auto& [index, optimizer] : s.optimizer_steps) {
    v1::OptimizerStepArgs now;
    optimizer->Fill(&now);
    v1::ProgramStepArgs* step = request.add_steps();
    step->set_op(index);
    step->set_step(++optimizer->steps_);
    step->set_lr(now.lr());
    step->set_weight_decay(now.weight_decay());
    if (now.kind() == v1::SGD) step->set_momentum(now.momentum());
  }
  // The first run draws the recorded seeds; each later one the next seeds
  // of the thread's sequence, as the eager step would.
  if (s.seeds > 0 && s.runs > 0) {
    request.set_seed_offset(internal::TakeSeeds(s.seeds) - s.first_seed);
  }
  ++s.runs;
  v1::RunProgramResponse response;
  try {
    response = s.session->Call(&v1::TensorService::Stub::RunProgram, request);
  } catch (const Error& e) {
    if (e.code() != StatusCode::NOT_FOUND ||
        std::string(e.what()).find("unknown program") == std::string::npos) {
      throw;
    }
    // Dropped as the session's least recently run program: again.
    request.set_program(internal::Registered(s, signature, /*again=*/true));
    response = s.session->Call(&v1::TensorService::Stub::RunProgram, request);
  }
  BatchResults results;
  for (int i = 0; i < response.kept_size(); ++i) {
    const uint32_t index = s.request.keep(i);
    if (results.tensors_.count(index) > 0) continue;
    const v1::TensorInfo& info = response.kept(i);
    // An in-place op's result is its target's handle, which a Tensor (an
    // input or a bound tensor) already owns: share it.
    std::optional<Tensor> existing;
    for (const Tensor& t : inputs) {
      if (t.handle() == info.handle()) existing = t;
    }
    for (const Tensor& t : s.bound) {
      if (t.handle() == info.handle()) existing = t;
    }
    results.tensors_.emplace(
        index, existing.has_value()
                   ? *existing
                   : internal::TensorAccess::Make(s.session->Adopt(info)));
    if (!info.value().empty()) results.values_.emplace(index, info.value());
  }
  return results;
}

}  // namespace tensord::client
