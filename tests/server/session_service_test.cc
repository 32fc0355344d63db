// Sessions over the wire, through raw stubs on a loopback server: the
// instance id on every reply, leases (OpenSession ttl, KeepAlive), request
// id dedupe, quotas and limits as codes and messages, cancellation freeing
// memory, and graceful shutdown.
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/server.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using std::chrono::milliseconds;

template <typename F>
bool Eventually(F done, milliseconds limit = milliseconds(1000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return done();
}

std::string Trailer(const grpc::ClientContext& ctx, const std::string& key) {
  const auto& md = ctx.GetServerTrailingMetadata();
  auto it = md.find(key);
  return it == md.end() ? "" : std::string(it->second.data(), it->second.size());
}

class SessionServiceTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options = {}) {
    options.listen = "127.0.0.1:0";
    options.runtime.host_memory_budget = 64 << 20;
    options.runtime.reap_interval = milliseconds(20);
    auto server = Server::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::TensorService::NewStub(channel_);
  }

  std::string Open(int64_t ttl_ms = 0, int64_t* granted = nullptr) {
    grpc::ClientContext ctx;
    v1::OpenSessionRequest req;
    req.set_ttl_ms(ttl_ms);
    v1::OpenSessionResponse resp;
    grpc::Status s = stub_->OpenSession(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (granted != nullptr) *granted = resp.ttl_ms();
    return resp.session();
  }

  grpc::Status CreateZeros(const std::string& session, int64_t n,
                           const std::string& request_id = "",
                           v1::TensorInfo* out = nullptr) {
    grpc::ClientContext ctx;
    if (!request_id.empty()) ctx.AddMetadata("tensord-request-id", request_id);
    v1::CreateRequest req;
    req.set_session(session);
    req.set_dtype(v1::FLOAT32);
    req.add_shape(n);
    req.mutable_fill()->set_kind(v1::Fill::ZEROS);
    v1::TensorResponse resp;
    grpc::Status s = stub_->Create(&ctx, req, &resp);
    if (out != nullptr) *out = resp.tensor();
    return s;
  }

  size_t TensorCount(const std::string& session) {
    grpc::ClientContext ctx;
    v1::ListTensorsRequest req;
    req.set_session(session);
    v1::ListTensorsResponse resp;
    EXPECT_TRUE(stub_->ListTensors(&ctx, req, &resp).ok());
    return resp.tensors_size();
  }

  uint64_t Held() {
    uint64_t held = 0;
    for (const auto& d : server_->runtime().ListDevices()) held += d.held_bytes;
    return held;
  }

  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
};

TEST_F(SessionServiceTest, EveryReplyCarriesTheInstanceId) {
  Start();
  ASSERT_EQ(server_->instance_id().size(), 16u);
  grpc::ClientContext ok_ctx;
  v1::ListDevicesResponse devices;
  ASSERT_TRUE(stub_->ListDevices(&ok_ctx, {}, &devices).ok());
  EXPECT_EQ(Trailer(ok_ctx, "tensord-instance"), server_->instance_id());
  // Failed calls and streams carry it too.
  grpc::ClientContext bad_ctx;
  v1::GetTensorRequest req;
  req.set_session("nope");
  v1::TensorResponse resp;
  EXPECT_EQ(stub_->GetTensor(&bad_ctx, req, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Trailer(bad_ctx, "tensord-instance"), server_->instance_id());
  grpc::ClientContext fetch_ctx;
  v1::FetchRequest fetch;
  fetch.set_session("nope");
  auto reader = stub_->Fetch(&fetch_ctx, fetch);
  v1::FetchChunk chunk;
  while (reader->Read(&chunk)) {
  }
  EXPECT_FALSE(reader->Finish().ok());
  EXPECT_EQ(Trailer(fetch_ctx, "tensord-instance"), server_->instance_id());
  // Another server has another id.
  ServerOptions in_process;
  in_process.listen = "";
  auto other = Server::Start(std::move(in_process));
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->instance_id(), server_->instance_id());
}

TEST_F(SessionServiceTest, LeaseExpiresUnlessKeptAlive) {
  ServerOptions options;
  options.runtime.session_ttl = milliseconds(60000);
  Start(std::move(options));
  int64_t granted = 0;
  // Renewed every 100 ms, a 600 ms lease survives a loaded machine's
  // oversleeping; the idle one lapses within the 1.2 s loop.
  const std::string idle = Open(600, &granted);
  EXPECT_EQ(granted, 600);
  const std::string kept = Open(600);
  int64_t default_ttl = 0;
  Open(0, &default_ttl);
  EXPECT_EQ(default_ttl, 60000);
  ASSERT_TRUE(CreateZeros(idle, 4096).ok());
  ASSERT_TRUE(CreateZeros(kept, 1024).ok());
  EXPECT_EQ(Held(), 5120u * 4);
  for (int i = 0; i < 12; ++i) {  // 1.2 s: twice the lease
    std::this_thread::sleep_for(milliseconds(100));
    grpc::ClientContext ctx;
    v1::KeepAliveRequest req;
    req.set_session(kept);
    v1::KeepAliveResponse resp;
    ASSERT_TRUE(stub_->KeepAlive(&ctx, req, &resp).ok()) << i;
    EXPECT_EQ(resp.ttl_ms(), 600);
  }
  EXPECT_TRUE(Eventually([&] { return Held() == 1024u * 4; },
                         milliseconds(10000)));
  grpc::ClientContext ctx;
  v1::KeepAliveRequest req;
  req.set_session(idle);
  v1::KeepAliveResponse resp;
  EXPECT_EQ(stub_->KeepAlive(&ctx, req, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(TensorCount(kept), 1u);
}

TEST_F(SessionServiceTest, SameRequestIdMakesOneTensor) {
  Start();
  const std::string s = Open();
  v1::TensorInfo first, second, third;
  ASSERT_TRUE(CreateZeros(s, 16, "req-1", &first).ok());
  ASSERT_TRUE(CreateZeros(s, 16, "req-1", &second).ok());
  EXPECT_EQ(first.handle(), second.handle());
  EXPECT_EQ(TensorCount(s), 1u);
  EXPECT_EQ(Held(), 64u);
  ASSERT_TRUE(CreateZeros(s, 16, "req-2", &third).ok());
  EXPECT_NE(third.handle(), first.handle());
  // Without an id every call acts.
  ASSERT_TRUE(CreateZeros(s, 16).ok());
  ASSERT_TRUE(CreateZeros(s, 16).ok());
  EXPECT_EQ(TensorCount(s), 4u);
  // A retried Release is not NOT_FOUND the second time.
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("tensord-request-id", "rel-1");
    v1::ReleaseRequest req;
    req.set_session(s);
    req.set_handle(first.handle());
    v1::ReleaseResponse resp;
    EXPECT_TRUE(stub_->Release(&ctx, req, &resp).ok()) << i;
  }
  EXPECT_EQ(TensorCount(s), 3u);
  // Ids are scoped to the session: another session's "req-1" is new.
  const std::string other = Open();
  v1::TensorInfo theirs;
  ASSERT_TRUE(CreateZeros(other, 16, "req-1", &theirs).ok());
  EXPECT_NE(theirs.handle(), first.handle());
}

TEST_F(SessionServiceTest, RetriedUploadReturnsTheFirstResult) {
  Start();
  const std::string s = Open();
  auto upload = [&](v1::TensorInfo* out) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("tensord-request-id", "up-1");
    v1::TensorResponse resp;
    auto writer = stub_->Upload(&ctx, &resp);
    v1::UploadRequest msg;
    msg.mutable_header()->set_session(s);
    msg.mutable_header()->set_dtype(v1::INT32);
    msg.mutable_header()->add_shape(4);
    msg.set_data(std::string(16, '\1'));
    writer->Write(msg);
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    *out = resp.tensor();
    return status;
  };
  v1::TensorInfo a, b;
  ASSERT_TRUE(upload(&a).ok());
  ASSERT_TRUE(upload(&b).ok());
  EXPECT_EQ(a.handle(), b.handle());
  EXPECT_EQ(TensorCount(s), 1u);
}

TEST_F(SessionServiceTest, QuotasAndMaxSessions) {
  ServerOptions options;
  options.runtime.session_max_bytes = 1024;
  options.runtime.session_max_tensors = 3;
  options.runtime.max_sessions = 2;
  Start(std::move(options));
  const std::string s = Open();
  grpc::Status over = CreateZeros(s, 512);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(over.error_message(),
              AllOf(HasSubstr("--session-max-bytes"),
                    HasSubstr("requested 2048 bytes"), HasSubstr("holds 0"),
                    HasSubstr("limit of 1024 bytes")));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(CreateZeros(s, 1).ok());
  grpc::Status count = CreateZeros(s, 1);
  EXPECT_EQ(count.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(count.error_message(), HasSubstr("--session-max-tensors"));

  Open();
  grpc::ClientContext ctx;
  v1::OpenSessionResponse resp;
  grpc::Status third = stub_->OpenSession(&ctx, {}, &resp);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(third.error_message(),
              AllOf(HasSubstr("too many sessions"), HasSubstr("--max-sessions")));
}

TEST_F(SessionServiceTest, InlineCreateLimitPointsToUpload) {
  ServerOptions options;
  options.max_inline_bytes = 1024;
  Start(std::move(options));
  const std::string s = Open();
  grpc::ClientContext ctx;
  v1::CreateRequest req;
  req.set_session(s);
  req.set_dtype(v1::FLOAT32);
  req.add_shape(257);
  req.set_data(std::string(257 * 4, '\0'));
  v1::TensorResponse resp;
  grpc::Status status = stub_->Create(&ctx, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr("1028 bytes"), HasSubstr("at most 1024"),
                    HasSubstr("--max-inline-bytes"), HasSubstr("Upload")));
}

TEST_F(SessionServiceTest, CancelledUploadFreesItsTensor) {
  Start();
  const std::string s = Open();
  grpc::ClientContext ctx;
  v1::TensorResponse resp;
  auto writer = stub_->Upload(&ctx, &resp);
  v1::UploadRequest msg;
  msg.mutable_header()->set_session(s);
  msg.mutable_header()->set_dtype(v1::FLOAT32);
  msg.mutable_header()->add_shape(1 << 20);  // 4 MiB
  msg.set_data(std::string(1 << 16, '\0'));
  ASSERT_TRUE(writer->Write(msg));
  ASSERT_TRUE(Eventually([&] { return Held() == 4u << 20; }));
  ctx.TryCancel();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(Eventually([&] { return Held() == 0; }));
  EXPECT_EQ(TensorCount(s), 0u);
}

TEST_F(SessionServiceTest, CancelledFetchLetsGoOfTheTensor) {
  Start();
  const std::string s = Open();
  v1::TensorInfo t;
  ASSERT_TRUE(CreateZeros(s, 1 << 20, "", &t).ok());  // 4 MiB
  grpc::ClientContext ctx;
  v1::FetchRequest req;
  req.set_session(s);
  req.set_handle(t.handle());
  req.set_chunk_bytes(4096);
  auto reader = stub_->Fetch(&ctx, req);
  v1::FetchChunk chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  {  // Released while the fetch holds it: the memory stays until it ends.
    grpc::ClientContext rctx;
    v1::ReleaseRequest rel;
    rel.set_session(s);
    rel.set_handle(t.handle());
    v1::ReleaseResponse rresp;
    ASSERT_TRUE(stub_->Release(&rctx, rel, &rresp).ok());
  }
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(Eventually([&] { return Held() == 0; }));
}

TEST_F(SessionServiceTest, CancelledExecuteStopsEarly) {
  Start();
  const std::string s = Open();
  v1::TensorInfo x;
  ASSERT_TRUE(CreateZeros(s, 1 << 18, "", &x).ok());  // 1 MiB
  const uint64_t baseline = Held();
  // 20000 adds of 1 MiB tensors: seconds of work if it ran to the end.
  v1::ExecuteRequest req;
  req.set_session(s);
  for (uint32_t i = 0; i < 20000; ++i) {
    v1::Op* op = req.add_ops();
    op->mutable_binary()->set_op(v1::ADD);
    if (i == 0) {
      op->mutable_binary()->mutable_lhs()->set_handle(x.handle());
    } else {
      op->mutable_binary()->mutable_lhs()->set_result_of(i - 1);
    }
    op->mutable_binary()->mutable_rhs()->set_handle(x.handle());
  }
  req.add_keep(19999);
  grpc::ClientContext ctx;
  v1::ExecuteResponse resp;
  auto call = std::async(std::launch::async,
                         [&] { return stub_->Execute(&ctx, req, &resp); });
  ASSERT_TRUE(Eventually([&] { return Held() > baseline; }));
  const auto cancelled_at = std::chrono::steady_clock::now();
  ctx.TryCancel();
  EXPECT_EQ(call.get().error_code(), grpc::StatusCode::CANCELLED);
  // The server stops between ops: its intermediates are gone at once, not
  // when the list would have ended.
  EXPECT_TRUE(Eventually([&] { return Held() == baseline; }));
  EXPECT_LT(std::chrono::steady_clock::now() - cancelled_at, milliseconds(1000));
  EXPECT_EQ(TensorCount(s), 1u);
}

TEST_F(SessionServiceTest, GracefulShutdownFinishesInFlightRefusesNew) {
  Start();
  const std::string s = Open();
  // An upload in flight when shutdown starts.
  grpc::ClientContext up_ctx;
  v1::TensorResponse up_resp;
  auto writer = stub_->Upload(&up_ctx, &up_resp);
  v1::UploadRequest msg;
  msg.mutable_header()->set_session(s);
  msg.mutable_header()->set_dtype(v1::FLOAT32);
  msg.mutable_header()->add_shape(1 << 18);
  msg.set_data(std::string(1 << 19, '\0'));
  ASSERT_TRUE(writer->Write(msg));
  ASSERT_TRUE(Eventually([&] { return Held() == 1u << 20; }));

  const auto start = std::chrono::steady_clock::now();
  auto shutdown = std::async(std::launch::async, [&] {
    server_->Shutdown(milliseconds(5000));
  });
  std::this_thread::sleep_for(milliseconds(100));
  // Draining: health says NOT_SERVING, new calls are refused.
  {
    grpc::ClientContext ctx;
    v1::OpenSessionResponse resp;
    grpc::Status refused = stub_->OpenSession(&ctx, {}, &resp);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(refused.error_message(), "server is shutting down");
  }
  {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("tensord.v1.TensorService");
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  }
  // The in-flight upload still completes.
  msg.clear_header();
  ASSERT_TRUE(writer->Write(msg));
  writer->WritesDone();
  grpc::Status finished = writer->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  EXPECT_EQ(up_resp.tensor().nbytes(), 1u << 20);
  shutdown.get();
  // Shutdown returned once nothing was in flight, well inside the grace.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
}

TEST_F(SessionServiceTest, ShutdownCancelsWhatOutlivesTheGrace) {
  Start();
  const std::string s = Open();
  grpc::ClientContext up_ctx;
  v1::TensorResponse up_resp;
  auto writer = stub_->Upload(&up_ctx, &up_resp);
  v1::UploadRequest msg;
  msg.mutable_header()->set_session(s);
  msg.mutable_header()->set_dtype(v1::FLOAT32);
  msg.mutable_header()->add_shape(1 << 18);
  msg.set_data(std::string(4096, '\0'));
  ASSERT_TRUE(writer->Write(msg));
  ASSERT_TRUE(Eventually([&] { return Held() == 1u << 20; }));
  const auto start = std::chrono::steady_clock::now();
  server_->Shutdown(milliseconds(200));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(190));
  EXPECT_LT(took, milliseconds(2000));
  EXPECT_FALSE(writer->Finish().ok());
  server_->Wait();
  EXPECT_TRUE(Eventually([&] { return Held() == 0; }));
}

}  // namespace
}  // namespace tensord::server
