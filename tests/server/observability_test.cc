// Health, reflection and /metrics on a real server.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/refusal_log.h"
#include "server/server.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::server {
namespace {

using ::testing::HasSubstr;
using HealthResponse = grpc::health::v1::HealthCheckResponse;

class ObservabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    auto server = Server::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
  }

  HealthResponse::ServingStatus Health(const std::string& service) {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    HealthResponse resp;
    grpc::Status s = stub->Check(&ctx, req, &resp);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      return HealthResponse::UNKNOWN;  // the service name is not registered
    }
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.status();
  }

  std::string Scrape() {
    httplib::Client http("127.0.0.1", server_->metrics_port());
    auto res = http.Get("/metrics");
    EXPECT_TRUE(res) << "no response from /metrics";
    if (!res) return "";
    EXPECT_EQ(res->status, 200);
    return res->body;
  }

  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ObservabilityTest, HealthServingThenNotServingWhileDraining) {
  EXPECT_EQ(Health(""), HealthResponse::SERVING);
  EXPECT_EQ(Health("tensord.v1.TensorService"), HealthResponse::SERVING);
  EXPECT_EQ(Health("no.such.Service"), HealthResponse::UNKNOWN);

  // A watcher (what load balancers and probes use) sees SERVING, then
  // NOT_SERVING when the server starts draining.
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("tensord.v1.TensorService");
  auto watch = stub->Watch(&ctx, req);
  HealthResponse resp;
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), HealthResponse::SERVING);
  std::thread shutdown([this] { server_->Shutdown(std::chrono::seconds(2)); });
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), HealthResponse::NOT_SERVING);
  ctx.TryCancel();
  shutdown.join();
}

TEST_F(ObservabilityTest, ReflectionListsTheService) {
  // grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo with
  // list_services = "" (field 7), sent as raw bytes: no reflection stubs
  // are needed to prove the service answers.
  grpc::GenericStub stub(channel_);
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      &cq);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  const char request[] = {0x3a, 0x00};  // field 7 (list_services), empty
  grpc::Slice slice(request, sizeof request);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(in.Dump(&slices).ok());
  std::string body;
  for (const auto& s : slices)
    body.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_THAT(body, HasSubstr("tensord.v1.TensorService"));
  ctx.TryCancel();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok)) {
    if (tag == reinterpret_cast<void*>(4)) break;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(ObservabilityTest, MetricsMoveWithRpcs) {
  const std::string before = Scrape();
  EXPECT_THAT(before, HasSubstr("tensord_sessions 0"));
  EXPECT_THAT(before,
              HasSubstr("tensord_device_live_tensors{device=\"cpu\"} 0"));

  auto stub = v1::TensorService::NewStub(channel_);
  grpc::ClientContext c1;
  v1::OpenSessionResponse session;
  ASSERT_TRUE(stub->OpenSession(&c1, {}, &session).ok());
  grpc::ClientContext c2;
  v1::CreateRequest create;
  create.set_session(session.session());
  create.set_dtype(v1::FLOAT32);
  create.add_shape(256);
  create.mutable_fill()->set_kind(v1::Fill::ONES);
  v1::TensorResponse created;
  ASSERT_TRUE(stub->Create(&c2, create, &created).ok());
  grpc::ClientContext c3;
  create.set_device("cuda:7");
  EXPECT_FALSE(stub->Create(&c3, create, &created).ok());

  const std::string after = Scrape();
  EXPECT_THAT(after, HasSubstr("tensord_sessions 1"));
  EXPECT_THAT(after,
              HasSubstr("tensord_device_live_tensors{device=\"cpu\"} 1"));
  EXPECT_THAT(after,
              HasSubstr("tensord_device_held_bytes{device=\"cpu\"} 1024"));
  EXPECT_THAT(after,
              HasSubstr("tensord_rpcs_total{method=\"Create\",code=\"OK\"} 1"));
  EXPECT_THAT(
      after,
      HasSubstr("tensord_rpcs_total{method=\"Create\",code=\"NOT_FOUND\"} 1"));
  EXPECT_THAT(
      after,
      HasSubstr("tensord_rpc_duration_seconds_count{method=\"Create\"} 2"));
  EXPECT_THAT(after,
              HasSubstr("# TYPE tensord_rpc_duration_seconds histogram"));
  // The kernel library's cache, per device (counters since start).
  for (const char* counter :
       {"prepared", "reused", "evicted", "reorders", "team_calls",
        "alone_calls", "contended"}) {
    EXPECT_THAT(after, HasSubstr(std::string("# TYPE tensord_device_library_") +
                                 counter + "_total counter"));
    EXPECT_THAT(after, HasSubstr(std::string("tensord_device_library_") +
                                 counter + "_total{device=\"cpu\"} "));
  }
}

}  // namespace
}  // namespace tensord::server

namespace tensord::server {
namespace {

// Issue 30 item 4: refusals are counted by reason in
// tensord_refusals_total and logged with the peer, rate-limited.
TEST(RefusalMetricsTest, EveryRefusalIsCountedByReason) {
  char dir[] = "/tmp/tensord-refusals-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string tokens = std::string(dir) + "/tokens";
  {
    std::FILE* f = std::fopen(tokens.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("good-token\n", f);
    std::fclose(f);
  }
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "127.0.0.1:0";
  options.auth_token_file = tokens;
  options.runtime.host_memory_budget = 1 << 20;
  options.runtime.session_max_bytes = 4096;
  auto server = Server::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::TensorService::NewStub(grpc::CreateChannel(
      (*server)->address(), grpc::InsecureChannelCredentials()));
  auto open = [&](const char* token, std::string* session) {
    grpc::ClientContext ctx;
    if (token != nullptr) ctx.AddMetadata("authorization", token);
    v1::OpenSessionRequest req;
    v1::OpenSessionResponse resp;
    grpc::Status s = stub->OpenSession(&ctx, req, &resp);
    if (session != nullptr) *session = resp.session();
    return s.error_code();
  };
  EXPECT_EQ(open(nullptr, nullptr), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(open("Bearer bad-token", nullptr),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(open("Basic good-token", nullptr),
            grpc::StatusCode::UNAUTHENTICATED);
  std::string session;
  ASSERT_EQ(open("Bearer good-token", &session), grpc::StatusCode::OK);
  auto create = [&](int64_t n) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer good-token");
    v1::CreateRequest req;
    req.set_session(session);
    req.set_dtype(v1::FLOAT32);
    req.add_shape(n);
    req.mutable_fill()->set_kind(v1::Fill::ZEROS);
    v1::TensorResponse resp;
    return stub->Create(&ctx, req, &resp).error_code();
  };
  EXPECT_EQ(create(1025), grpc::StatusCode::RESOURCE_EXHAUSTED);  // quota
  std::string other;
  ASSERT_EQ(open("Bearer good-token", &other), grpc::StatusCode::OK);
  session = other;
  EXPECT_EQ(create(1024), grpc::StatusCode::OK);
  session.clear();
  std::string third;
  for (int i = 0; i < 300; ++i) {  // fill the 1 MiB budget across sessions
    if (open("Bearer good-token", &third) != grpc::StatusCode::OK) break;
    session = third;
    if (create(1024) == grpc::StatusCode::RESOURCE_EXHAUSTED) break;
  }
  httplib::Client http("127.0.0.1", (*server)->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body,
              HasSubstr("tensord_refusals_total{reason=\"no_token\"} 1\n"));
  EXPECT_THAT(res->body,
              HasSubstr("tensord_refusals_total{reason=\"bad_token\"} 2\n"));
  EXPECT_THAT(res->body, HasSubstr("tensord_refusals_total{reason=\"session_"
                                   "quota\"} 1\n"));
  EXPECT_THAT(res->body, HasSubstr("tensord_refusals_total{reason=\"device_"
                                   "budget\"} 1\n"));
  std::remove(tokens.c_str());
  rmdir(dir);
}

// A command of the bidi Stream refused for a quota is counted and logged as
// a unary RPC's refusal is: the same reason, the peer, the session's first
// 8 characters and the command ("rpc=Stream/create").
TEST(RefusalMetricsTest, StreamCommandRefusalIsCountedAndLogged) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "127.0.0.1:0";
  options.runtime.host_memory_budget = 1 << 20;
  options.runtime.session_max_bytes = 4096;
  auto server = Server::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::TensorService::NewStub(grpc::CreateChannel(
      (*server)->address(), grpc::InsecureChannelCredentials()));
  std::string session;
  {
    grpc::ClientContext ctx;
    v1::OpenSessionResponse opened;
    ASSERT_TRUE(stub->OpenSession(&ctx, {}, &opened).ok());
    session = opened.session();
  }
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  std::vector<v1::CommandReply> replies;
  {
    grpc::ClientContext ctx;
    auto rw = stub->Stream(&ctx);
    v1::StreamRequest req;
    req.mutable_open()->set_session(session);
    v1::Command* cmd = req.add_commands();
    cmd->set_seq(1);
    v1::CreateRequest* c = cmd->mutable_create();
    c->set_dtype(v1::FLOAT32);
    c->add_shape(1025);  // 4100 bytes: over the 4096-byte quota
    c->mutable_fill()->set_kind(v1::Fill::ZEROS);
    ASSERT_TRUE(rw->Write(req));
    rw->WritesDone();
    v1::StreamResponse resp;
    while (rw->Read(&resp)) {
      for (const auto& r : resp.replies()) replies.push_back(r);
    }
    (void)rw->Finish();
  }
  spdlog::set_default_logger(previous);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(replies[0].message(),
              HasSubstr("quota exceeded (--session-max-bytes)"));
  httplib::Client http("127.0.0.1", (*server)->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, HasSubstr("tensord_refusals_total{reason=\"session_"
                                   "quota\"} 1\n"));
  EXPECT_THAT(log.str(),
              HasSubstr("refused (session_quota): peer=ipv4:127.0.0.1:"));
  EXPECT_THAT(log.str(), HasSubstr("session=" + session.substr(0, 8) +
                                   " rpc=Stream/create: "));
  EXPECT_EQ(log.str().find(session), std::string::npos)
      << "the whole session id is a credential";
}

TEST(RefusalLogTest, AtMostFiveLinesPerReasonPerSecond) {
  RefusalLog log;
  const auto t0 = RefusalLog::Clock::now();
  int logged = 0;
  for (int i = 0; i < 100; ++i) {
    logged += log.Record(core::Refusal::kBadToken, "ipv4:10.0.0.1:5000", "",
                         "OpenSession", "the bearer token is not accepted", t0);
  }
  EXPECT_EQ(logged, RefusalLog::kLinesPerSecond);
  // Another reason has its own allowance; a new second starts a new one
  // (its first line counts the 95 left out).
  EXPECT_TRUE(log.Record(core::Refusal::kSessionQuota, "ipv4:10.0.0.1:5000",
                         "0123abcd", "Create", "quota", t0));
  EXPECT_TRUE(log.Record(core::Refusal::kBadToken, "ipv4:10.0.0.1:5000", "",
                         "OpenSession", "again",
                         t0 + std::chrono::milliseconds(1000)));
}

}  // namespace
}  // namespace tensord::server
