// The session's ordered command stream (tensord.proto, Stream) over a real
// loopback server through raw generated stubs: commands run in order under
// handles the client chose, a failure stops the stream until cleared, a
// reconnect replays and runs nothing twice, and the stream's bounds, its
// takeover and its session's end.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/collectives/host_communicator.h"
#include "server/server.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::server {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

constexpr uint64_t kMine = uint64_t{1} << 63;  // the first client handle

class StreamServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  void Start(ServerOptions options) {
    options.listen = "127.0.0.1:0";
    if (options.runtime.host_memory_budget == 0) {
      options.runtime.host_memory_budget = 64 << 20;
    }
    options.runtime.reap_interval = milliseconds(10);
    server_.reset();
    auto server = Server::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::TensorService::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::OpenSessionResponse opened;
    ASSERT_TRUE(stub_->OpenSession(&ctx, {}, &opened).ok());
    session_ = opened.session();
  }

  struct Connection {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::StreamRequest,
                                             v1::StreamResponse>>
        rw;
  };
  std::unique_ptr<Connection> Connect() {
    auto c = std::make_unique<Connection>();
    c->rw = stub_->Stream(&c->ctx);
    return c;
  }

  // Sends `commands` (the first message of a connection opens it) and
  // reads replies until every command's has come.
  std::vector<v1::CommandReply> Send(Connection& c,
                                     std::vector<v1::Command> commands,
                                     bool open = false,
                                     uint64_t received_through = 0,
                                     v1::StreamOpened* opened = nullptr) {
    v1::StreamRequest req;
    if (open) req.mutable_open()->set_session(session_);
    req.set_received_through(received_through);
    for (auto& cmd : commands) *req.add_commands() = cmd;
    EXPECT_TRUE(c.rw->Write(req));
    std::vector<v1::CommandReply> replies;
    uint64_t last = commands.empty() ? 0 : commands.back().seq();
    while (replies.empty() || replies.back().seq() < last) {
      v1::StreamResponse resp;
      if (!c.rw->Read(&resp)) break;
      if (resp.has_opened() && opened != nullptr) *opened = resp.opened();
      for (const auto& r : resp.replies()) replies.push_back(r);
      if (commands.empty()) break;
    }
    return replies;
  }

  grpc::Status Close(Connection& c) {
    c.rw->WritesDone();
    v1::StreamResponse ignored;
    while (c.rw->Read(&ignored)) {
    }
    return c.rw->Finish();
  }

  static v1::Command Create(uint64_t seq, uint64_t result,
                            std::vector<float> values) {
    v1::Command cmd;
    cmd.set_seq(seq);
    cmd.set_result(result);
    v1::CreateRequest* c = cmd.mutable_create();
    c->set_dtype(v1::FLOAT32);
    c->add_shape(static_cast<int64_t>(values.size()));
    c->set_data(std::string(reinterpret_cast<const char*>(values.data()),
                            values.size() * sizeof(float)));
    return cmd;
  }
  static v1::Command Zeros(uint64_t seq, uint64_t result, int64_t n) {
    v1::Command cmd;
    cmd.set_seq(seq);
    cmd.set_result(result);
    v1::CreateRequest* c = cmd.mutable_create();
    c->set_dtype(v1::FLOAT32);
    c->add_shape(n);
    c->mutable_fill()->set_kind(v1::Fill::ZEROS);
    return cmd;
  }
  static v1::Command Add(uint64_t seq, uint64_t result, uint64_t a,
                         uint64_t b) {
    v1::Command cmd;
    cmd.set_seq(seq);
    cmd.set_result(result);
    v1::BinaryArgs* add = cmd.mutable_run()->mutable_op()->mutable_binary();
    add->set_op(v1::ADD);
    add->mutable_lhs()->set_handle(a);
    add->mutable_rhs()->set_handle(b);
    return cmd;
  }
  static v1::Command Read(uint64_t seq, uint64_t handle) {
    v1::Command cmd;
    cmd.set_seq(seq);
    cmd.mutable_read()->set_handle(handle);
    return cmd;
  }
  static v1::Command Release(uint64_t seq, std::vector<uint64_t> handles) {
    v1::Command cmd;
    cmd.set_seq(seq);
    for (uint64_t h : handles) cmd.mutable_release()->add_release(h);
    return cmd;
  }
  static std::vector<float> Floats(const v1::CommandReply& r) {
    std::vector<float> out(r.chunk().data().size() / sizeof(float));
    std::memcpy(out.data(), r.chunk().data().data(), r.chunk().data().size());
    return out;
  }

  std::vector<uint64_t> Handles() {
    grpc::ClientContext ctx;
    v1::ListTensorsRequest req;
    req.set_session(session_);
    v1::ListTensorsResponse resp;
    EXPECT_TRUE(stub_->ListTensors(&ctx, req, &resp).ok());
    std::vector<uint64_t> out;
    for (const auto& t : resp.tensors()) out.push_back(t.handle());
    return out;
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
  std::string session_;
};

TEST_F(StreamServiceTest, CommandsRunInOrderUnderTheClientsHandles) {
  auto c = Connect();
  v1::StreamOpened opened;
  // One message: two creates, an add of their results, a read of its
  // result and a release, none waiting for another's answer.
  auto replies = Send(*c,
                      {Create(1, kMine + 1, {1, 2, 3}),
                       Create(2, kMine + 2, {10, 20, 30}),
                       Add(3, kMine + 3, kMine + 1, kMine + 2),
                       Read(4, kMine + 3), Release(5, {kMine + 1})},
                      /*open=*/true, 0, &opened);
  EXPECT_EQ(opened.executed_through(), 0u);
  ASSERT_EQ(replies.size(), 5u);
  for (uint64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(replies[i].seq(), i + 1);
    EXPECT_EQ(replies[i].code(), 0) << replies[i].message();
  }
  EXPECT_EQ(replies[2].tensor().handle(), kMine + 3);
  EXPECT_THAT(replies[2].tensor().shape(), ::testing::ElementsAre(3));
  EXPECT_EQ(Floats(replies[3]), (std::vector<float>{11, 22, 33}));
  // The unary RPCs see the same tensors under the same handles.
  EXPECT_THAT(Handles(), ::testing::ElementsAre(kMine + 2, kMine + 3));
  EXPECT_TRUE(Close(*c).ok());
}

// Issue 30: a stream command is admitted as its unary RPC is: a tensor
// that fills the quota exactly is made, one element more is refused naming
// the quota, and the session's bytes stay where they were.
TEST_F(StreamServiceTest, ACommandIsAdmittedAtTheQuotaEdge) {
  ServerOptions options;
  options.runtime.session_max_bytes = 4096;
  Start(std::move(options));
  auto held = [&] {
    grpc::ClientContext ctx;
    v1::GetStatsResponse stats;
    EXPECT_TRUE(stub_->GetStats(&ctx, {}, &stats).ok());
    return stats.held_bytes();
  };
  auto c = Connect();
  auto fits = Send(*c, {Zeros(1, kMine, 1024)}, /*open=*/true);
  ASSERT_EQ(fits.size(), 1u);
  EXPECT_EQ(fits[0].code(), 0) << fits[0].message();
  EXPECT_EQ(held(), 4096u);
  auto over = Send(*c, {Zeros(2, kMine + 1, 1)});
  ASSERT_EQ(over.size(), 1u);
  EXPECT_EQ(over[0].code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(over[0].message(),
              HasSubstr("session memory quota exceeded (--session-max-bytes): "
                        "requested 4 bytes; the session holds 4096 of its "
                        "limit of 4096 bytes"));
  EXPECT_EQ(held(), 4096u);
  Close(*c);
}

TEST_F(StreamServiceTest, AFailureStopsTheStreamUntilCleared) {
  auto c = Connect();
  // 3 is 128 MiB, past the 64 MiB budget: only the server can know. The
  // refused add (4) carries a release list: honoured all the same.
  v1::Command add = Add(4, kMine + 4, kMine + 1, kMine + 1);
  add.mutable_run()->add_release(kMine + 2);
  auto replies = Send(*c,
                      {Zeros(1, kMine + 1, 4), Zeros(2, kMine + 2, 4),
                       Zeros(3, kMine + 3, 32 << 20), add,
                       Release(5, {kMine + 1})},
                      true);
  ASSERT_EQ(replies.size(), 5u);
  EXPECT_EQ(replies[0].code(), 0);
  EXPECT_EQ(replies[1].code(), 0);
  EXPECT_EQ(replies[2].code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(replies[3].code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(replies[3].message(),
              HasSubstr("not run: command 3 (create) failed: "
                        "RESOURCE_EXHAUSTED: "));
  EXPECT_THAT(replies[3].message(), HasSubstr("send clear_error"));
  EXPECT_EQ(replies[4].code(), 0);  // releases still run
  EXPECT_TRUE(Handles().empty());   // 2 by the refused add's list

  v1::Command wrong;
  wrong.set_seq(6);
  wrong.mutable_clear_error()->set_seq(4);
  v1::Command clear;
  clear.set_seq(7);
  clear.mutable_clear_error()->set_seq(3);
  replies = Send(*c, {wrong, clear, Zeros(8, kMine + 8, 4)});
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(replies[0].message(),
              HasSubstr("names command 4 but the stream stopped at command 3"));
  EXPECT_EQ(replies[1].code(), 0);
  EXPECT_EQ(replies[2].code(), 0) << replies[2].message();
  EXPECT_THAT(Handles(), ::testing::ElementsAre(kMine + 8));
  EXPECT_TRUE(Close(*c).ok());
}

// An Execute's list as one command: in order with the commands before it
// (its operands are their results, under the client's handles), its kept
// results under the server's handles in the reply; a failing op fails the
// command with Execute's message and stops the stream; `result` is refused.
TEST_F(StreamServiceTest, AnExecuteIsOneCommand) {
  auto c = Connect();
  v1::Command execute;
  execute.set_seq(3);
  v1::ExecuteRequest* list = execute.mutable_execute();
  for (int i = 0; i < 3; ++i) {
    v1::BinaryArgs* add = list->add_ops()->mutable_binary();
    add->set_op(v1::ADD);
    if (i == 0) {
      add->mutable_lhs()->set_handle(kMine + 1);
    } else {
      add->mutable_lhs()->set_result_of(static_cast<uint32_t>(i - 1));
    }
    add->mutable_rhs()->set_handle(kMine + 2);
  }
  list->add_keep(2);
  list->add_release(kMine + 1);
  auto replies = Send(
      *c,
      {Create(1, kMine + 1, {1, 2}), Create(2, kMine + 2, {10, 20}), execute},
      /*open=*/true);
  ASSERT_EQ(replies.size(), 3u);
  // The list's release runs before its ops: its operand kMine + 1 is gone.
  EXPECT_EQ(replies[2].code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(replies[2].message(), HasSubstr("op #0"));
  v1::Command clear;
  clear.set_seq(4);
  clear.mutable_clear_error()->set_seq(3);
  execute.set_seq(5);
  execute.mutable_execute()->clear_release();
  execute.mutable_execute()
      ->mutable_ops(0)
      ->mutable_binary()
      ->mutable_lhs()
      ->set_handle(kMine + 2);
  replies = Send(*c, {clear, execute});
  ASSERT_EQ(replies.size(), 2u);
  ASSERT_EQ(replies[1].code(), 0) << replies[1].message();
  ASSERT_EQ(replies[1].kept_size(), 1);
  const uint64_t kept = replies[1].kept(0).handle();
  EXPECT_LT(kept, kMine);  // the server's handle
  EXPECT_THAT(replies[1].kept(0).shape(), ::testing::ElementsAre(2));
  replies = Send(*c, {Read(6, kept)});
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(Floats(replies[0]), (std::vector<float>{40, 80}));

  // A failing op: Execute's status, and the stream stops there.
  v1::Command bad = execute;
  bad.set_seq(7);
  bad.mutable_execute()
      ->mutable_ops(1)
      ->mutable_binary()
      ->mutable_rhs()
      ->set_handle(kMine + 99);
  replies = Send(*c, {bad, Read(8, kept)});
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(replies[0].message(), HasSubstr("op #1"));
  EXPECT_EQ(replies[0].kept_size(), 0);
  EXPECT_EQ(replies[1].code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(replies[1].message(), HasSubstr("command 7 (execute) failed"));

  clear.set_seq(9);
  clear.mutable_clear_error()->set_seq(7);
  v1::Command named = execute;
  named.set_seq(10);
  named.set_result(kMine + 5);
  replies = Send(*c, {clear, named});
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[1].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(replies[1].message(), HasSubstr("leave `result` 0"));
  EXPECT_THAT(Handles(), ::testing::ElementsAre(kept, kMine + 2));
  Close(*c);
}

// A program's run as one command: in order with the commands before it
// (the tensor it binds is one of theirs, under the client's handle), its
// release list honoured, its kept results under the server's handles in the
// reply, with the value of a one-element one; a failing run fails the
// command and stops the stream; `result` is refused.
TEST_F(StreamServiceTest, ARunProgramIsOneCommand) {
  auto c = Connect();
  auto replies = Send(*c, {Create(1, kMine + 1, {10, 20})}, /*open=*/true);
  ASSERT_EQ(replies.size(), 1u);
  ASSERT_EQ(replies[0].code(), 0) << replies[0].message();
  // sum(input #0 + kMine + 1), and the sum itself kept.
  v1::RegisterProgramRequest reg;
  reg.set_session(session_);
  v1::ProgramInput* in = reg.add_inputs();
  in->set_dtype(v1::FLOAT32);
  in->add_shape(2);
  v1::BinaryArgs* add = reg.add_ops()->mutable_binary();
  add->set_op(v1::ADD);
  add->mutable_lhs()->set_input(0);
  add->mutable_rhs()->set_handle(kMine + 1);
  v1::ReduceArgs* sum = reg.add_ops()->mutable_reduce();
  sum->set_op(v1::SUM);
  sum->mutable_x()->set_result_of(0);
  reg.add_keep(0);
  reg.add_keep(1);
  v1::RegisterProgramResponse registered;
  {
    grpc::ClientContext ctx;
    grpc::Status s = stub_->RegisterProgram(&ctx, reg, &registered);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  v1::Command run;
  run.set_seq(3);
  v1::RunProgramRequest* r = run.mutable_run_program();
  r->set_program(registered.program().program());
  const std::vector<float> x = {1, 2};
  r->add_inputs()->set_data(std::string(
      reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float)));
  r->add_release(kMine + 3);  // made by the command before it
  replies = Send(*c, {Create(2, kMine + 3, {7}), run, Read(4, kMine + 3)});
  ASSERT_EQ(replies.size(), 3u);
  ASSERT_EQ(replies[1].code(), 0) << replies[1].message();
  ASSERT_EQ(replies[1].kept_size(), 2);
  EXPECT_LT(replies[1].kept(0).handle(), kMine);  // the server's handles
  float total = 0;
  ASSERT_EQ(replies[1].kept(1).value().size(), sizeof(float));
  std::memcpy(&total, replies[1].kept(1).value().data(), sizeof(float));
  EXPECT_EQ(total, 33.0f);
  EXPECT_EQ(replies[2].code(), grpc::StatusCode::NOT_FOUND);  // released
  v1::Command clear;
  clear.set_seq(5);
  clear.mutable_clear_error()->set_seq(4);
  replies = Send(*c, {clear, Read(6, replies[1].kept(0).handle())});
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(Floats(replies[1]), (std::vector<float>{11, 22}));

  // A run that fails (one byte short): RunProgram's status, and the stream
  // stops there.
  v1::Command bad = run;
  bad.set_seq(7);
  bad.mutable_run_program()->clear_release();
  bad.mutable_run_program()->mutable_inputs(0)->mutable_data()->pop_back();
  replies = Send(*c, {bad, Read(8, kMine + 1)});
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(replies[0].message(), HasSubstr("data is 7 bytes"));
  EXPECT_EQ(replies[0].kept_size(), 0);
  EXPECT_THAT(replies[1].message(),
              HasSubstr("command 7 (run_program) failed"));
  clear.set_seq(9);
  clear.mutable_clear_error()->set_seq(7);
  v1::Command named = run;
  named.set_seq(10);
  named.mutable_run_program()->clear_release();
  named.set_result(kMine + 5);
  replies = Send(*c, {clear, named});
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[1].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(replies[1].message(), HasSubstr("leave `result` 0"));
  Close(*c);
}

// A collective as one command: in order with the creates before it (their
// tensors under the client's handles), all_reduce in place with its inputs'
// infos in the reply's kept list; a refused one stops the stream like any
// failing command; `result` is refused.
TEST_F(StreamServiceTest, ACollectiveIsOneCommand) {
  if (!core::HostCollectivesBuilt()) {
    GTEST_SKIP() << "built without Gloo (libgloo-dev): no collectives";
  }
  ServerOptions options;
  options.runtime.host_devices = 2;
  Start(std::move(options));
  v1::CreateGroupRequest make;
  make.set_session(session_);
  make.add_devices("cpu:0");
  make.add_devices("cpu:1");
  v1::CreateGroupResponse made;
  {
    grpc::ClientContext ctx;
    grpc::Status s = stub_->CreateGroup(&ctx, make, &made);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  v1::Command on1 = Create(2, kMine + 2, {10, 20});
  on1.mutable_create()->set_device("cpu:1");
  v1::Command reduce;
  reduce.set_seq(3);
  v1::CollectiveRequest* r = reduce.mutable_collective();
  r->set_group(made.group().group());
  r->set_kind(v1::ALL_REDUCE);
  r->add_tensors(kMine + 1);
  r->add_tensors(kMine + 2);
  auto c = Connect();
  auto replies = Send(*c, {Create(1, kMine + 1, {1, 2}), on1, reduce,
                           Read(4, kMine + 1), Read(5, kMine + 2)},
                      /*open=*/true);
  ASSERT_EQ(replies.size(), 5u);
  ASSERT_EQ(replies[2].code(), 0) << replies[2].message();
  ASSERT_EQ(replies[2].kept_size(), 2);
  EXPECT_EQ(replies[2].kept(0).handle(), kMine + 1);
  EXPECT_EQ(replies[2].kept(1).device(), "cpu:1");
  EXPECT_EQ(Floats(replies[3]), (std::vector<float>{11, 22}));
  EXPECT_EQ(Floats(replies[4]), (std::vector<float>{11, 22}));

  v1::Command twice = reduce;  // two tensors on cpu:0: refused, stream stops
  twice.set_seq(6);
  twice.mutable_collective()->set_tensors(1, kMine + 1);
  replies = Send(*c, {twice, Read(7, kMine + 1)});
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(replies[0].message(), HasSubstr("found two on cpu:0"));
  EXPECT_THAT(replies[1].message(),
              HasSubstr("command 6 (collective) failed"));
  v1::Command clear;
  clear.set_seq(8);
  clear.mutable_clear_error()->set_seq(6);
  v1::Command named = reduce;
  named.set_seq(9);
  named.set_result(kMine + 9);
  replies = Send(*c, {clear, named, Read(10, kMine + 2)});
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[1].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(replies[1].message(), HasSubstr("leave `result` 0"));
  Close(*c);
}

// ExecuteRequest.results: the kept results under the client's handles, so
// that a client that planned the list uses them before the reply; refused
// before anything runs when they do not fit the keep list, and in the RPC.
TEST_F(StreamServiceTest, AnExecuteNamesItsKeptResultsWhenAsked) {
  auto c = Connect();
  auto add_list = [](uint64_t seq, std::vector<uint32_t> keep,
                     std::vector<uint64_t> results) {
    v1::Command cmd;
    cmd.set_seq(seq);
    v1::ExecuteRequest* list = cmd.mutable_execute();
    v1::BinaryArgs* add = list->add_ops()->mutable_binary();
    add->set_op(v1::ADD);
    add->mutable_lhs()->set_handle(kMine + 1);
    add->mutable_rhs()->set_handle(kMine + 1);
    v1::InPlaceArgs* mul = list->add_ops()->mutable_in_place();
    mul->set_op(v1::MUL_);
    mul->mutable_target()->set_result_of(0);
    mul->mutable_scalar()->set_float_value(10);
    for (uint32_t k : keep) list->add_keep(k);
    for (uint64_t r : results) list->add_results(r);
    return cmd;
  };
  auto replies = Send(*c,
                      {Create(1, kMine + 1, {1, 2}),
                       add_list(2, {0}, {kMine + 2}), Read(3, kMine + 2)},
                      /*open=*/true);
  ASSERT_EQ(replies.size(), 3u);
  ASSERT_EQ(replies[1].code(), 0) << replies[1].message();
  ASSERT_EQ(replies[1].kept_size(), 1);
  EXPECT_EQ(replies[1].kept(0).handle(), kMine + 2);
  EXPECT_EQ(Floats(replies[2]), (std::vector<float>{20, 40}));

  struct Refused {
    std::vector<uint32_t> keep;
    std::vector<uint64_t> results;
    std::string message;
  };
  const Refused refused[] = {
      {{0}, {kMine + 3, kMine + 4}, "results names 2 handles for 1 kept"},
      {{0, 0}, {kMine + 3, kMine + 4}, "keep names op #0 twice"},
      {{1}, {kMine + 3}, "kept op #1 (mul_) gives back its operand"},
      {{0}, {kMine + 2}, "in use"},  // the renaming's own rule
  };
  uint64_t seq = 4;
  for (const Refused& r : refused) {
    replies = Send(*c, {add_list(seq, r.keep, r.results)});
    ASSERT_EQ(replies.size(), 1u);
    EXPECT_EQ(replies[0].code(), grpc::StatusCode::INVALID_ARGUMENT)
        << r.message << ": " << replies[0].message();
    EXPECT_THAT(replies[0].message(), HasSubstr(r.message));
    v1::Command clear;
    clear.set_seq(seq + 1);
    clear.mutable_clear_error()->set_seq(seq);
    ASSERT_EQ(Send(*c, {clear})[0].code(), 0);
    seq += 2;
  }
  EXPECT_THAT(Handles(), ::testing::ElementsAre(kMine + 1, kMine + 2));
  Close(*c);

  grpc::ClientContext ctx;
  v1::ExecuteRequest unary = add_list(0, {0}, {kMine + 9}).execute();
  unary.set_session(session_);
  v1::ExecuteResponse resp;
  const grpc::Status status = stub_->Execute(&ctx, unary, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("command stream only"));
}

TEST_F(StreamServiceTest, AReconnectReplaysAndRunsNothingTwice) {
  auto first = Connect();
  auto replies = Send(*first,
                      {Create(1, kMine + 1, {1, 2}), Create(2, kMine + 2, {3, 4}),
                       Add(3, kMine + 3, kMine + 1, kMine + 2)},
                      true);
  ASSERT_EQ(replies.size(), 3u);
  first->ctx.TryCancel();  // the connection drops; the client holds reply 1
  (void)first->rw->Finish();

  auto second = Connect();
  v1::StreamOpened opened;
  // Resend everything after what the client holds, plus one more.
  replies = Send(*second,
                 {Create(2, kMine + 2, {3, 4}),
                  Add(3, kMine + 3, kMine + 1, kMine + 2), Read(4, kMine + 3)},
                 true, /*received_through=*/1, &opened);
  EXPECT_EQ(opened.executed_through(), 3u);
  // The replayed replies of 2 and 3 (kept: unacknowledged), then 4's.
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0].seq(), 2u);
  EXPECT_EQ(replies[0].code(), 0);
  EXPECT_EQ(replies[1].seq(), 3u);
  EXPECT_EQ(replies[2].seq(), 4u);
  EXPECT_EQ(Floats(replies[2]), (std::vector<float>{4, 6}));
  // Ran once: three tensors, not five (and no "already in use" errors).
  EXPECT_EQ(Handles().size(), 3u);
  EXPECT_TRUE(Close(*second).ok());
}

TEST_F(StreamServiceTest, BadSeqsHandlesAndSizesAreRefused) {
  auto c = Connect();
  // A handle a client may not choose, and one in use: the command fails
  // (and stops the stream); the tensor it made is not kept.
  auto replies = Send(*c, {Zeros(1, kMine + 1, 4), Zeros(2, 5, 4)}, true);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[1].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(replies[1].message(), HasSubstr("2^63"));
  v1::Command clear;
  clear.set_seq(3);
  clear.mutable_clear_error()->set_seq(2);
  replies = Send(*c, {clear, Zeros(4, kMine + 1, 4)});
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[1].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(replies[1].message(), HasSubstr("already in use"));
  EXPECT_EQ(Handles().size(), 1u);

  // A gap in the seqs ends the stream.
  v1::StreamRequest req;
  *req.add_commands() = Zeros(9, kMine + 9, 4);
  ASSERT_TRUE(c->rw->Write(req));
  grpc::Status s = Close(*c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("command seq 9 follows 4"));

  // So does a first message without `open`, and one with too many
  // commands.
  auto d = Connect();
  ASSERT_TRUE(d->rw->Write(v1::StreamRequest()));
  s = Close(*d);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("must carry `open`"));
  auto e = Connect();
  req.Clear();
  req.mutable_open()->set_session(session_);
  for (uint64_t i = 0; i < 1025; ++i) {
    v1::Command* sync = req.add_commands();
    sync->set_seq(5 + i);
    sync->mutable_sync();
  }
  ASSERT_TRUE(e->rw->Write(req));
  s = Close(*e);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("at most 1024"));
}

// A message that ends the stream, with more already sent behind it: the
// client still gets the stream's status (not a hang until its deadline),
// over a socket and over the in-process channel alike.
TEST_F(StreamServiceTest, AStreamEndedWithMessagesUnreadStillAnswers) {
  for (int run = 0; run < 4; ++run) {
    const bool in_process = run % 2 == 1;
    const bool opens = run < 2;  // else the first message lacks `open`
    SCOPED_TRACE(in_process ? "in-process" : "tcp");
    SCOPED_TRACE(opens ? "a gap in the seqs" : "no open");
    auto stub = in_process ? v1::TensorService::NewStub(
                                 server_->InProcessChannel())
                           : nullptr;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    auto rw = (in_process ? stub.get() : stub_.get())->Stream(&ctx);
    v1::StreamRequest first;
    if (opens) {
      first.mutable_open()->set_session(session_);
      first.mutable_open()->set_stream(in_process ? 2 : 1);
    }
    *first.add_commands() = Zeros(113, kMine + 1, 4);  // a gap: ends it
    v1::StreamRequest more;
    v1::Command sync;
    sync.set_seq(114);
    sync.mutable_sync();
    *more.add_commands() = sync;
    rw->Write(first);
    for (int i = 0; i < 3; ++i) {
      if (!rw->Write(more)) break;
    }
    rw->WritesDone();
    v1::StreamResponse ignored;
    while (rw->Read(&ignored)) {
    }
    const grpc::Status s = rw->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
    EXPECT_THAT(s.error_message(),
                HasSubstr(opens ? "command seq 113 follows 0"
                                : "must carry `open`"));
  }
}

TEST_F(StreamServiceTest, ANewStreamTakesOverAndTheSessionsEndEndsIt) {
  auto first = Connect();
  ASSERT_EQ(Send(*first, {Zeros(1, kMine + 1, 4)}, true).size(), 1u);
  auto second = Connect();
  ASSERT_EQ(Send(*second, {Zeros(2, kMine + 2, 4)}, true, 1).size(), 1u);
  grpc::Status s = Close(*first);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(s.error_message(), HasSubstr("took over"));

  // Another stream of the session (another client attached to it) has its
  // own seqs and runs beside it.
  auto other = Connect();
  v1::StreamRequest open;
  open.mutable_open()->set_session(session_);
  open.mutable_open()->set_stream(7);
  *open.add_commands() = Zeros(1, kMine + 100, 4);
  ASSERT_TRUE(other->rw->Write(open));
  v1::StreamResponse answer;
  while (answer.replies_size() == 0) ASSERT_TRUE(other->rw->Read(&answer));
  EXPECT_EQ(answer.replies(0).code(), 0) << answer.replies(0).message();
  EXPECT_EQ(Handles().size(), 3u);
  EXPECT_TRUE(Close(*other).ok());

  // Closing the session ends its open stream, idle as it is.
  grpc::ClientContext ctx;
  v1::CloseSessionRequest close;
  close.set_session(session_);
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(stub_->CloseSession(&ctx, close, &closed).ok());
  EXPECT_EQ(closed.released_tensors(), 3u);
  v1::StreamResponse ignored;
  EXPECT_FALSE(second->rw->Read(&ignored));
  s = second->rw->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(StreamServiceTest, LimitsAndCapabilitiesAreReported) {
  grpc::ClientContext ctx;
  v1::Limits limits;
  ASSERT_TRUE(stub_->GetLimits(&ctx, {}, &limits).ok());
  EXPECT_EQ(limits.max_stream_commands(), 1024u);
  EXPECT_EQ(limits.max_stream_unacknowledged(), 16384u);

  grpc::ClientContext devices_ctx;
  v1::ListDevicesResponse devices;
  ASSERT_TRUE(stub_->ListDevices(&devices_ctx, {}, &devices).ok());
  ASSERT_FALSE(devices.devices().empty());
  uint32_t matmul = 0, random = 0;
  for (const v1::Capability& c : devices.devices(0).capabilities()) {
    if (c.family() == v1::MATMUL_FAMILY) matmul = c.dtypes();
    if (c.family() == v1::RANDOM_FILL) random = c.dtypes();
  }
  EXPECT_TRUE(matmul & (1u << v1::FLOAT32));
  EXPECT_FALSE(matmul & (1u << v1::BOOL));  // no bool matmul on the CPU
  EXPECT_EQ(random, (1u << v1::FLOAT32) | (1u << v1::FLOAT64));
}

}  // namespace
}  // namespace tensord::server
