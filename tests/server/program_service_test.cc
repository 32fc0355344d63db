// Programs (RegisterProgram, RunProgram, ListPrograms, ReleaseProgram)
// through raw generated stubs against a real server on a loopback socket:
// a training step registered once and replayed equals the same ops sent as
// Execute lists; the guards (inputs of another signature, a released bound
// tensor), the bounds, the least-recently-used drop and the session's end.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/server.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::server {
namespace {

using ::testing::HasSubstr;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <typename T>
std::vector<T> Values(const std::string& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

v1::Operand Handle(uint64_t h) {
  v1::Operand o;
  o.set_handle(h);
  return o;
}
v1::Operand Result(uint32_t i) {
  v1::Operand o;
  o.set_result_of(i);
  return o;
}
v1::Operand Input(uint32_t i) {
  v1::Operand o;
  o.set_input(i);
  return o;
}

// The ops of one step of linear regression on w [3, 1] with SGD: loss =
// mean((x @ w - y)^2); backward; w -= lr * grad; zero_grad. `x`, `y`: the
// operands of the batch (a program's inputs, or handles). The loss is op
// #3.
std::vector<v1::Op> StepOps(const v1::Operand& x, const v1::Operand& y,
                            uint64_t w) {
  std::vector<v1::Op> ops(7);
  ops[0].mutable_matmul()->mutable_lhs()->CopyFrom(x);
  *ops[0].mutable_matmul()->mutable_rhs() = Handle(w);
  auto* sub = ops[1].mutable_binary();
  sub->set_op(v1::SUB);
  *sub->mutable_lhs() = Result(0);
  sub->mutable_rhs()->CopyFrom(y);
  auto* sq = ops[2].mutable_binary();
  sq->set_op(v1::MUL);
  *sq->mutable_lhs() = Result(1);
  *sq->mutable_rhs() = Result(1);
  auto* mean = ops[3].mutable_reduce();
  mean->set_op(v1::MEAN);
  *mean->mutable_x() = Result(2);
  *ops[4].mutable_backward()->mutable_root() = Result(3);
  auto* step = ops[5].mutable_optimizer_step();
  step->set_kind(v1::SGD);
  *step->add_params() = Handle(w);
  step->set_lr(0.1);
  step->set_step(1);
  ops[5].set_no_grad(true);
  *ops[6].mutable_zero_grad()->add_tensors() = Handle(w);
  return ops;
}

class ProgramServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.runtime.host_devices = 2;
    options.runtime.host_memory_budget = 8 << 20;
    auto server = Server::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::TensorService::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
    session_ = OpenSession();
  }

  std::string OpenSession() {
    grpc::ClientContext ctx;
    v1::OpenSessionRequest req;
    v1::OpenSessionResponse resp;
    EXPECT_TRUE(stub_->OpenSession(&ctx, req, &resp).ok());
    return resp.session();
  }

  uint64_t CreateFloat(const std::vector<float>& values,
                       std::vector<int64_t> shape, bool requires_grad = false,
                       const std::string& device = "cpu:0") {
    grpc::ClientContext ctx;
    v1::CreateRequest req;
    req.set_session(session_);
    req.set_device(device);
    req.set_dtype(v1::FLOAT32);
    for (int64_t d : shape) req.add_shape(d);
    req.set_data(Bytes(values));
    v1::TensorResponse resp;
    grpc::Status s = stub_->Create(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    const uint64_t h = resp.tensor().handle();
    if (requires_grad) {
      v1::Op op;
      *op.mutable_requires_grad()->mutable_x() = Handle(h);
      grpc::ClientContext rctx;
      v1::RunRequest run;
      run.set_session(session_);
      *run.mutable_op() = op;
      v1::TensorResponse rresp;
      grpc::Status rs = stub_->Run(&rctx, run, &rresp);
      EXPECT_TRUE(rs.ok()) << rs.error_message();
    }
    return h;
  }

  std::vector<float> FetchFloats(uint64_t handle) {
    grpc::ClientContext ctx;
    v1::ReadRequest req;
    req.set_session(session_);
    req.set_handle(handle);
    v1::FetchChunk chunk;
    grpc::Status s = stub_->Read(&ctx, req, &chunk);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return Values<float>(chunk.data());
  }

  static void AddInput(v1::RegisterProgramRequest& req,
                       std::vector<int64_t> shape,
                       const std::string& device = "cpu:0",
                       v1::DType dtype = v1::FLOAT32) {
    v1::ProgramInput* in = req.add_inputs();
    in->set_dtype(dtype);
    for (int64_t d : shape) in->add_shape(d);
    in->set_device(device);
  }

  grpc::Status Register(v1::RegisterProgramRequest req,
                        v1::ProgramInfo* out = nullptr) {
    req.set_session(session_);
    grpc::ClientContext ctx;
    v1::RegisterProgramResponse resp;
    grpc::Status s = stub_->RegisterProgram(&ctx, req, &resp);
    if (out != nullptr) *out = resp.program();
    return s;
  }

  // The regression step as a program of inputs x [4, 3], y [4, 1].
  v1::ProgramInfo RegisterStep(uint64_t w) {
    v1::RegisterProgramRequest req;
    AddInput(req, {4, 3});
    AddInput(req, {4, 1});
    for (v1::Op& op : StepOps(Input(0), Input(1), w)) *req.add_ops() = op;
    req.add_keep(3);
    req.set_tag("step");
    v1::ProgramInfo info;
    grpc::Status s = Register(req, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }

  grpc::Status RunProgram(uint64_t program,
                          const std::vector<v1::ProgramArg>& args,
                          v1::RunProgramResponse* out = nullptr) {
    grpc::ClientContext ctx;
    v1::RunProgramRequest req;
    req.set_session(session_);
    req.set_program(program);
    for (const v1::ProgramArg& a : args) *req.add_inputs() = a;
    v1::RunProgramResponse resp;
    grpc::Status s = stub_->RunProgram(&ctx, req, &resp);
    if (out != nullptr) *out = resp;
    return s;
  }

  static v1::ProgramArg Data(const std::vector<float>& values) {
    v1::ProgramArg a;
    a.set_data(Bytes(values));
    return a;
  }
  static v1::ProgramArg HandleArg(uint64_t h) {
    v1::ProgramArg a;
    a.set_handle(h);
    return a;
  }

  std::vector<v1::ProgramInfo> List() {
    grpc::ClientContext ctx;
    v1::ListProgramsRequest req;
    req.set_session(session_);
    v1::ListProgramsResponse resp;
    grpc::Status s = stub_->ListPrograms(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.programs().begin(), resp.programs().end()};
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
  std::string session_;
};

const std::vector<float> kW = {0.5f, -0.25f, 1.0f};
std::vector<float> BatchX(int step) {
  std::vector<float> x(12);
  for (int i = 0; i < 12; ++i) x[i] = 0.1f * static_cast<float>(i - step);
  return x;
}
std::vector<float> BatchY(int step) {
  return {1.0f, -1.0f + 0.5f * static_cast<float>(step), 0.25f, 2.0f};
}

TEST_F(ProgramServiceTest, ReplayedStepEqualsTheSameOpsSentAsExecute) {
  const uint64_t w_program = CreateFloat(kW, {3, 1}, true);
  const uint64_t w_execute = CreateFloat(kW, {3, 1}, true);
  const v1::ProgramInfo info = RegisterStep(w_program);
  EXPECT_EQ(info.ops(), 7u);
  EXPECT_EQ(info.tag(), "step");
  ASSERT_EQ(info.results_size(), 1);
  EXPECT_EQ(info.results(0).dtype(), v1::FLOAT32);
  EXPECT_EQ(info.results(0).shape_size(), 0);  // the loss is 0-d
  EXPECT_EQ(info.results(0).device(), "cpu:0");
  ASSERT_EQ(info.bound_size(), 1);
  EXPECT_EQ(info.bound(0), w_program);
  ASSERT_EQ(info.inputs_size(), 2);
  EXPECT_EQ(info.inputs(1).shape(0), 4);

  for (int step = 0; step < 4; ++step) {
    // The same step as an Execute list on the other copy of w.
    const uint64_t x = CreateFloat(BatchX(step), {4, 3});
    const uint64_t y = CreateFloat(BatchY(step), {4, 1});
    grpc::ClientContext ctx;
    v1::ExecuteRequest ex;
    ex.set_session(session_);
    for (v1::Op& op : StepOps(Handle(x), Handle(y), w_execute)) {
      *ex.add_ops() = op;
    }
    ex.add_keep(3);
    v1::ExecuteResponse ex_resp;
    grpc::Status es = stub_->Execute(&ctx, ex, &ex_resp);
    ASSERT_TRUE(es.ok()) << es.error_message();

    // The program: x inline, y by handle.
    v1::RunProgramResponse run;
    grpc::Status rs = RunProgram(info.program(), {Data(BatchX(step)),
                                                  HandleArg(y)}, &run);
    ASSERT_TRUE(rs.ok()) << rs.error_message();
    ASSERT_EQ(run.kept_size(), 1);
    EXPECT_NE(run.kept(0).handle(), 0u);
    EXPECT_EQ(run.kept(0).grad_fn(), "MeanBackward0");
    // The loss's value rides the reply, equal to Execute's bit for bit.
    ASSERT_EQ(run.kept(0).value().size(), sizeof(float));
    EXPECT_EQ(run.kept(0).value(), ex_resp.kept(0).value());
    EXPECT_EQ(FetchFloats(w_program), FetchFloats(w_execute)) << "step " << step;
  }
  EXPECT_NE(FetchFloats(w_program), kW);  // it trained
  const std::vector<v1::ProgramInfo> listed = List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].program(), info.program());
  EXPECT_EQ(listed[0].runs(), 4u);
}

TEST_F(ProgramServiceTest, InputsOfAnotherSignatureAreRefusedNamingTheInput) {
  const uint64_t w = CreateFloat(kW, {3, 1}, true);
  const v1::ProgramInfo info = RegisterStep(w);
  const uint64_t small = CreateFloat({1, 2, 3}, {1, 3});
  grpc::Status s =
      RunProgram(info.program(), {HandleArg(small), Data(BatchY(0))});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("input #0 of program " +
                        std::to_string(info.program()) +
                        ": expected float32 [4, 3] on cpu:0, got float32 "
                        "[1, 3] on cpu:0"));
  const uint64_t other_device = CreateFloat(BatchX(0), {4, 3}, false, "cpu:1");
  s = RunProgram(info.program(), {HandleArg(other_device), Data(BatchY(0))});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("got float32 [4, 3] on cpu:1"));
  s = RunProgram(info.program(), {Data({1, 2}), Data(BatchY(0))});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("data is 8 bytes but its "
                                           "placeholder, float32 [4, 3] on "
                                           "cpu:0, needs 48 bytes"));
  s = RunProgram(info.program(), {Data(BatchX(0))});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("takes 2 inputs, got 1"));
  s = RunProgram(info.program(), {Data(BatchX(0)), v1::ProgramArg()});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("input #1 is not set"));
  // Nothing ran: w is as it was, and the right inputs still work.
  EXPECT_EQ(FetchFloats(w), kW);
  s = RunProgram(info.program(), {Data(BatchX(0)), Data(BatchY(0))});
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(ProgramServiceTest, AnOptimizerStepsArgumentsArePerRun) {
  const uint64_t w = CreateFloat(kW, {3, 1}, true);
  const v1::ProgramInfo info = RegisterStep(w);
  auto run_with = [&](v1::ProgramStepArgs step) {
    grpc::ClientContext ctx;
    v1::RunProgramRequest req;
    req.set_session(session_);
    req.set_program(info.program());
    *req.add_inputs() = Data(BatchX(0));
    *req.add_inputs() = Data(BatchY(0));
    *req.add_steps() = step;
    v1::RunProgramResponse resp;
    return stub_->RunProgram(&ctx, req, &resp);
  };
  v1::ProgramStepArgs frozen;
  frozen.set_op(5);
  frozen.set_lr(0.0);  // a scheduler's lr, no new program
  frozen.set_step(3);
  grpc::Status s = run_with(frozen);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(FetchFloats(w), kW);
  v1::ProgramStepArgs negative = frozen;
  negative.set_lr(-0.1);
  s = run_with(negative);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("Invalid learning rate: -0.1"));
  v1::ProgramStepArgs zero_step = frozen;
  zero_step.set_step(-1);
  s = run_with(zero_step);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("step must count from 1"));
  v1::ProgramStepArgs not_a_step = frozen;
  not_a_step.set_op(0);
  s = run_with(not_a_step);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("not an optimizer step"));
  EXPECT_EQ(FetchFloats(w), kW);  // nothing ran
  v1::ProgramStepArgs trains = frozen;
  trains.set_lr(0.1);
  ASSERT_TRUE(run_with(trains).ok());
  EXPECT_NE(FetchFloats(w), kW);
}

// SGD's momentum and weight decay are a run's arguments, as lr is: a run
// with them equals the step executed with them, bit for bit; momentum may
// not cross zero (the step's operands hold a momentum buffer or none).
TEST_F(ProgramServiceTest, MomentumAndWeightDecayArePerRun) {
  const uint64_t w_program = CreateFloat(kW, {3, 1}, true);
  const uint64_t w_execute = CreateFloat(kW, {3, 1}, true);
  const uint64_t buf_program = CreateFloat({0, 0, 0}, {3, 1});
  const uint64_t buf_execute = CreateFloat({0, 0, 0}, {3, 1});
  auto with_momentum = [](std::vector<v1::Op> ops, uint64_t buf,
                          double momentum, double weight_decay, int step) {
    v1::OptimizerStepArgs* sgd = ops[5].mutable_optimizer_step();
    *sgd->add_state() = Handle(buf);
    sgd->set_momentum(momentum);
    sgd->set_weight_decay(weight_decay);
    sgd->set_step(step);
    return ops;
  };
  v1::RegisterProgramRequest req;
  AddInput(req, {4, 3});
  AddInput(req, {4, 1});
  for (v1::Op& op : with_momentum(StepOps(Input(0), Input(1), w_program),
                                  buf_program, 0.9, 0, 1)) {
    *req.add_ops() = op;
  }
  req.add_keep(3);
  v1::ProgramInfo info;
  grpc::Status s = Register(req, &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto run_with = [&](int step, double momentum, double weight_decay) {
    grpc::ClientContext ctx;
    v1::RunProgramRequest run;
    run.set_session(session_);
    run.set_program(info.program());
    *run.add_inputs() = Data(BatchX(step));
    *run.add_inputs() = Data(BatchY(step));
    v1::ProgramStepArgs* args = run.add_steps();
    args->set_op(5);
    args->set_step(step + 1);
    args->set_momentum(momentum);
    args->set_weight_decay(weight_decay);
    v1::RunProgramResponse resp;
    return stub_->RunProgram(&ctx, run, &resp);
  };
  for (int step = 0; step < 3; ++step) {
    const double momentum = 0.5 + 0.1 * step, weight_decay = 0.01 * step;
    s = run_with(step, momentum, weight_decay);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const uint64_t x = CreateFloat(BatchX(step), {4, 3});
    const uint64_t y = CreateFloat(BatchY(step), {4, 1});
    grpc::ClientContext ctx;
    v1::ExecuteRequest ex;
    ex.set_session(session_);
    for (v1::Op& op :
         with_momentum(StepOps(Handle(x), Handle(y), w_execute), buf_execute,
                       momentum, weight_decay, step + 1)) {
      *ex.add_ops() = op;
    }
    v1::ExecuteResponse ex_resp;
    ASSERT_TRUE(stub_->Execute(&ctx, ex, &ex_resp).ok());
    EXPECT_EQ(FetchFloats(w_program), FetchFloats(w_execute))
        << "step " << step;
    EXPECT_EQ(FetchFloats(buf_program), FetchFloats(buf_execute));
  }
  const std::vector<float> trained = FetchFloats(w_program);
  s = run_with(3, 0, 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("op #5 of program " + std::to_string(info.program()) +
                        " momentum 0, but it was registered with momentum "
                        "buffers: momentum must stay > 0"));
  s = run_with(3, 0.9, -1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("Invalid weight_decay value: -1"));
  EXPECT_EQ(FetchFloats(w_program), trained);  // nothing ran
  // A step registered without momentum keeps none.
  const v1::ProgramInfo plain = RegisterStep(CreateFloat(kW, {3, 1}, true));
  grpc::ClientContext ctx;
  v1::RunProgramRequest run;
  run.set_session(session_);
  run.set_program(plain.program());
  *run.add_inputs() = Data(BatchX(0));
  *run.add_inputs() = Data(BatchY(0));
  run.add_steps()->set_op(5);
  run.mutable_steps(0)->set_momentum(0.9);
  v1::RunProgramResponse resp;
  s = stub_->RunProgram(&ctx, run, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("registered without momentum buffers: momentum must "
                        "stay 0"));
}

// RunProgramRequest.seed_offset: a seeded dropout draws the mask of its
// seed plus the offset, so replays differ from each other and each equals
// the eager op with that seed; unseeded, every run draws afresh.
TEST_F(ProgramServiceTest, ASeedOffsetGivesEachRunItsOwnMaskReproducibly) {
  const std::vector<float> ones(256, 1.0f);
  v1::RegisterProgramRequest req;
  AddInput(req, {256});
  v1::DropoutArgs* seeded = req.add_ops()->mutable_dropout();
  *seeded->mutable_x() = Input(0);
  seeded->set_seed(7);
  v1::DropoutArgs* unseeded = req.add_ops()->mutable_dropout();
  *unseeded->mutable_x() = Input(0);
  req.add_keep(0);
  req.add_keep(1);
  v1::ProgramInfo info;
  grpc::Status s = Register(req, &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto run_at = [&](uint64_t offset) {
    grpc::ClientContext ctx;
    v1::RunProgramRequest run;
    run.set_session(session_);
    run.set_program(info.program());
    *run.add_inputs() = Data(ones);
    run.set_seed_offset(offset);
    v1::RunProgramResponse resp;
    grpc::Status rs = stub_->RunProgram(&ctx, run, &resp);
    EXPECT_TRUE(rs.ok()) << rs.error_message();
    return std::make_pair(FetchFloats(resp.kept(0).handle()),
                          FetchFloats(resp.kept(1).handle()));
  };
  auto eager = [&](uint64_t seed) {
    grpc::ClientContext ctx;
    v1::RunRequest run;
    run.set_session(session_);
    v1::DropoutArgs* d = run.mutable_op()->mutable_dropout();
    *d->mutable_x() = Handle(CreateFloat(ones, {256}));
    d->set_seed(seed);
    v1::TensorResponse resp;
    EXPECT_TRUE(stub_->Run(&ctx, run, &resp).ok());
    return FetchFloats(resp.tensor().handle());
  };
  const auto [first, first_unseeded] = run_at(0);
  const auto [again, again_unseeded] = run_at(0);
  const auto [next, next_unseeded] = run_at(1);
  EXPECT_EQ(first, again);
  EXPECT_EQ(first, eager(7));
  EXPECT_NE(next, first);
  EXPECT_EQ(next, eager(8));
  EXPECT_EQ(run_at(~uint64_t{0}).first, eager(6));  // wraps
  EXPECT_NE(first_unseeded, again_unseeded);
}

TEST_F(ProgramServiceTest, AReleasedBoundTensorIsAFailedPreconditionNamingIt) {
  const uint64_t w = CreateFloat(kW, {3, 1}, true);
  const v1::ProgramInfo info = RegisterStep(w);
  {
    grpc::ClientContext ctx;
    v1::ReleaseRequest req;
    req.set_session(session_);
    req.set_handle(w);
    v1::ReleaseResponse resp;
    ASSERT_TRUE(stub_->Release(&ctx, req, &resp).ok());
  }
  grpc::Status s =
      RunProgram(info.program(), {Data(BatchX(0)), Data(BatchY(0))});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(),
              HasSubstr("program " + std::to_string(info.program()) +
                        " reads tensor " + std::to_string(w) +
                        " (float32 [3, 1] on cpu:0), which the session no "
                        "longer has"));
}

TEST_F(ProgramServiceTest, RegistrationPlansEveryOpAndRunsNothing) {
  const uint64_t w = CreateFloat(kW, {3, 1}, true);
  // x [4, 2] cannot multiply w [3, 1]: op #0's planning error, as Execute
  // words it.
  v1::RegisterProgramRequest bad;
  AddInput(bad, {4, 2});
  AddInput(bad, {4, 1});
  for (v1::Op& op : StepOps(Input(0), Input(1), w)) *bad.add_ops() = op;
  grpc::Status s = Register(bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("op #0 (matmul; operands: input #0 [4, 2] float32, "
                        "handle " + std::to_string(w) +
                        " [3, 1] float32): mat1 and mat2 shapes cannot be "
                        "multiplied (4x2 and 3x1)"));
  // The same-device rule at registration: y on cpu:1.
  v1::RegisterProgramRequest devices;
  AddInput(devices, {4, 3});
  AddInput(devices, {4, 1}, "cpu:1");
  for (v1::Op& op : StepOps(Input(0), Input(1), w)) *devices.add_ops() = op;
  s = Register(devices);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("op #1 (sub;"));
  EXPECT_THAT(s.error_message(),
              HasSubstr("Expected all tensors to be on the same device"));
  // Operands that name nothing.
  v1::RegisterProgramRequest past;
  AddInput(past, {2});
  v1::Op neg;
  neg.mutable_unary()->set_op(v1::NEG);
  *neg.mutable_unary()->mutable_x() = Input(1);
  *past.add_ops() = neg;
  s = Register(past);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("op #0 (neg; operands: input #1): operand 0 is input "
                        "#1 but the program has 1 inputs"));
  *past.mutable_ops(0)->mutable_unary()->mutable_x() = Handle(w + 1000);
  s = Register(past);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  *past.mutable_ops(0)->mutable_unary()->mutable_x() = Input(0);
  past.add_keep(1);
  s = Register(past);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("keep names op #1"));
  // A bad placeholder.
  v1::RegisterProgramRequest placeholder;
  AddInput(placeholder, {2}, "cpu:7");
  s = Register(placeholder);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("input #0: "));
  v1::RegisterProgramRequest negative;
  AddInput(negative, {-2});
  s = Register(negative);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("input #0: "));
  EXPECT_TRUE(List().empty());
  // Nothing ran, and an input operand outside a program is refused.
  EXPECT_EQ(FetchFloats(w), kW);
  grpc::ClientContext ctx;
  v1::ExecuteRequest ex;
  ex.set_session(session_);
  *ex.add_ops() = neg;
  v1::ExecuteResponse ex_resp;
  s = stub_->Execute(&ctx, ex, &ex_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("only a registered program"));
}

TEST_F(ProgramServiceTest, BoundsAreInTheLimitsAndTheLeastRecentlyRunIsDropped) {
  v1::Limits limits;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->GetLimits(&ctx, v1::GetLimitsRequest(), &limits).ok());
  }
  EXPECT_EQ(limits.max_session_programs(), 16u);
  EXPECT_EQ(limits.max_program_ops(), 16384u);
  EXPECT_EQ(limits.max_program_inputs(), 256u);

  v1::RegisterProgramRequest too_many;
  for (uint32_t i = 0; i <= limits.max_program_inputs(); ++i) {
    AddInput(too_many, {1});
  }
  grpc::Status s = Register(too_many);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("Limits.max_program_inputs"));
  v1::RegisterProgramRequest long_list;
  AddInput(long_list, {1});
  v1::Op neg;
  neg.mutable_unary()->set_op(v1::NEG);
  *neg.mutable_unary()->mutable_x() = Input(0);
  for (uint32_t i = 0; i <= limits.max_program_ops(); ++i) {
    *long_list.add_ops() = neg;
  }
  s = Register(long_list);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("Limits.max_program_ops"));

  // One past the bound drops the least recently run, not the oldest.
  v1::RegisterProgramRequest tiny;
  AddInput(tiny, {1});
  *tiny.add_ops() = neg;
  tiny.add_keep(0);
  std::vector<uint64_t> ids;
  for (uint32_t i = 0; i < limits.max_session_programs(); ++i) {
    v1::ProgramInfo info;
    ASSERT_TRUE(Register(tiny, &info).ok());
    ids.push_back(info.program());
  }
  v1::RunProgramResponse run;
  ASSERT_TRUE(RunProgram(ids[0], {Data({2.0f})}, &run).ok());
  ASSERT_EQ(run.kept_size(), 1);
  EXPECT_EQ(Values<float>(run.kept(0).value()), std::vector<float>{-2.0f});
  v1::ProgramInfo extra;
  ASSERT_TRUE(Register(tiny, &extra).ok());
  EXPECT_EQ(List().size(), limits.max_session_programs());
  EXPECT_TRUE(RunProgram(ids[0], {Data({1.0f})}).ok());  // kept: run lately
  s = RunProgram(ids[1], {Data({1.0f})});  // dropped
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("unknown program"));

  // Released explicitly; unknown afterwards.
  {
    grpc::ClientContext ctx;
    v1::ReleaseProgramRequest req;
    req.set_session(session_);
    req.set_program(extra.program());
    v1::ReleaseProgramResponse resp;
    ASSERT_TRUE(stub_->ReleaseProgram(&ctx, req, &resp).ok());
    grpc::ClientContext again;
    EXPECT_EQ(stub_->ReleaseProgram(&again, req, &resp).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_EQ(RunProgram(extra.program(), {Data({1.0f})}).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(ProgramServiceTest, ProgramsAreTheSessionsOwn) {
  v1::RegisterProgramRequest tiny;
  AddInput(tiny, {1});
  v1::Op neg;
  neg.mutable_unary()->set_op(v1::NEG);
  *neg.mutable_unary()->mutable_x() = Input(0);
  *tiny.add_ops() = neg;
  tiny.add_keep(0);
  v1::ProgramInfo info;
  ASSERT_TRUE(Register(tiny, &info).ok());
  const std::string mine = session_;
  session_ = OpenSession();  // another session does not see it
  EXPECT_EQ(RunProgram(info.program(), {Data({1.0f})}).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(List().empty());
  session_ = mine;
  grpc::ClientContext ctx;
  v1::CloseSessionRequest close;
  close.set_session(mine);
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(stub_->CloseSession(&ctx, close, &closed).ok());
  EXPECT_EQ(RunProgram(info.program(), {Data({1.0f})}).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// A client that re-attaches (a new connection naming the session, as after
// a dropped one or a restarted process) finds its programs: listed, and run
// on the tensors they bind, which go on training.
TEST_F(ProgramServiceTest, ProgramsSurviveAClientsReattach) {
  const uint64_t w = CreateFloat(kW, {3, 1}, true);
  const v1::ProgramInfo info = RegisterStep(w);
  ASSERT_TRUE(
      RunProgram(info.program(), {Data(BatchX(0)), Data(BatchY(0))}).ok());
  const std::vector<float> once = FetchFloats(w);
  stub_.reset();  // the first connection goes
  stub_ = v1::TensorService::NewStub(grpc::CreateChannel(
      server_->address(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    v1::KeepAliveRequest req;
    req.set_session(session_);
    v1::KeepAliveResponse resp;
    ASSERT_TRUE(stub_->KeepAlive(&ctx, req, &resp).ok());
  }
  const std::vector<v1::ProgramInfo> listed = List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].program(), info.program());
  EXPECT_EQ(listed[0].runs(), 1u);
  EXPECT_EQ(listed[0].tag(), "step");
  v1::RunProgramResponse run;
  grpc::Status s =
      RunProgram(info.program(), {Data(BatchX(1)), Data(BatchY(1))}, &run);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(run.kept(0).value().size(), sizeof(float));
  EXPECT_NE(FetchFloats(w), once);  // it trained on
}

}  // namespace
}  // namespace tensord::server
