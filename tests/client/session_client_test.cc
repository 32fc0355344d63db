// The client library's side of leases: background keepalive, re-attaching
// after the connection dropped, detecting a server restart, and stopping
// the keepalive thread on destruction.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/server.h"
#include "tensord/client.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using std::chrono::milliseconds;

std::unique_ptr<server::Server> StartServer(const std::string& listen) {
  server::ServerOptions options;
  options.listen = listen;
  options.runtime.host_memory_budget = 64 << 20;
  options.runtime.reap_interval = milliseconds(20);
  auto s = server::Server::Start(std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

std::shared_ptr<grpc::Channel> Dial(const server::Server& s) {
  return grpc::CreateChannel(s.address(), grpc::InsecureChannelCredentials());
}

uint64_t Held(server::Server& s) {
  uint64_t held = 0;
  for (const auto& d : s.runtime().ListDevices()) held += d.held_bytes;
  return held;
}

// Held(s) once it reads `bytes`, or after 5 s.
uint64_t WaitForHeld(server::Server& s, uint64_t bytes) {
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (Held(s) != bytes && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  return Held(s);
}

TEST(SessionClientTest, KeepAliveKeepsAnIdleSessionPastItsLease) {
  auto server = StartServer("127.0.0.1:0");
  ClientOptions options;
  // Keepalive every 200 ms against a 600 ms lease: a loaded machine may
  // run a keepalive late by 400 ms and the session still lives.
  options.ttl = milliseconds(600);
  Client client(Dial(*server), options);
  EXPECT_EQ(client.session_ttl(), milliseconds(600));
  Tensor x = client.tensor<float>({1, 2, 3});
  std::this_thread::sleep_for(milliseconds(1500));  // 2.5 leases, idle
  EXPECT_EQ(client.tensors().size(), 1u);
  EXPECT_EQ(x.fetch<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(SessionClientTest, WithoutKeepAliveTheLeaseRunsOutAndMemoryIsFreed) {
  auto server = StartServer("127.0.0.1:0");
  ClientOptions options;
  options.ttl = milliseconds(200);
  options.keepalive = false;
  Client client(Dial(*server), options);
  Tensor x = client.zeros({1024});
  // The create streamed without waiting; a listing is a sync point.
  EXPECT_EQ(client.tensors().size(), 1u);
  EXPECT_EQ(Held(*server), 4096u);
  // The reaper frees it one lease (200 ms) after the last call; poll so a
  // loaded machine's late reaper thread is not a failure.
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(10000);
  // The reaper drops the session before it frees the tensors: wait for both.
  while ((server->runtime().session_count() != 0 || Held(*server) != 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(Held(*server), 0u);
  EXPECT_EQ(server->runtime().session_count(), 0u);
  try {
    client.tensors();
    FAIL() << "the session should be gone";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::NOT_FOUND);
  }
}

TEST(SessionClientTest, ReattachAfterTheConnectionDroppedFindsTheTensors) {
  auto server = StartServer("127.0.0.1:0");
  std::string session;
  uint64_t handle = 0;
  {
    // A client that goes away without closing its session: its channel
    // (and connection) is gone once this scope ends.
    auto channel = Dial(*server);
    auto stub = v1::TensorService::NewStub(channel);
    grpc::ClientContext ctx;
    v1::OpenSessionRequest open;
    open.set_ttl_ms(5000);
    v1::OpenSessionResponse opened;
    ASSERT_TRUE(stub->OpenSession(&ctx, open, &opened).ok());
    session = opened.session();
    grpc::ClientContext cctx;
    v1::CreateRequest create;
    create.set_session(session);
    create.set_dtype(v1::INT64);
    create.add_shape(3);
    create.mutable_fill()->set_kind(v1::Fill::ARANGE);
    create.mutable_fill()->set_end(3);
    v1::TensorResponse made;
    ASSERT_TRUE(stub->Create(&cctx, create, &made).ok());
    handle = made.tensor().handle();
  }
  Client client = Client::Attach(Dial(*server), session);
  EXPECT_EQ(client.session(), session);
  EXPECT_EQ(client.session_ttl(), milliseconds(5000));
  const std::vector<TensorInfo> tensors = client.tensors();
  ASSERT_EQ(tensors.size(), 1u);
  EXPECT_EQ(tensors[0].handle, handle);
  Tensor t = client.attach_tensor(handle);
  EXPECT_EQ(t.fetch<int64_t>(), (std::vector<int64_t>{0, 1, 2}));

  try {
    Client::Attach(Dial(*server), "0123456789abcdef0123456789abcdef");
    FAIL() << "attaching to an unknown session should fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::NOT_FOUND);
  }
}

TEST(SessionClientTest, ServerRestartIsDetected) {
  auto first = StartServer("127.0.0.1:0");
  const int port = first->port();
  const std::string address = first->address();
  Client client(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  EXPECT_EQ(client.server_instance(), first->instance_id());
  Tensor x = client.tensor<float>({1});
  first.reset();  // the server goes away with the session's tensors
  auto second = StartServer("127.0.0.1:" + std::to_string(port));
  ASSERT_NE(second, nullptr);
  ASSERT_NE(second->instance_id(), client.server_instance());
  try {
    // The client reconnects (retrying while the port comes back).
    for (int i = 0; i < 20; ++i) {
      try {
        client.tensors();
        break;
      } catch (const Error& e) {
        if (e.code() != StatusCode::UNAVAILABLE) throw;
        std::this_thread::sleep_for(milliseconds(50));
      }
    }
    FAIL() << "a restart should be reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(e.message(),
                AllOf(HasSubstr("server restarted"),
                      HasSubstr(client.server_instance()),
                      HasSubstr(second->instance_id()),
                      HasSubstr("this session's tensors are gone")));
  }
}

TEST(SessionClientTest, KeepAliveThreadStopsPromptlyOnDestruction) {
  auto server = StartServer("127.0.0.1:0");
  ClientOptions options;
  options.ttl = milliseconds(3000);  // keepalive every second
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    Client client(server->InProcessChannel(), options);
    Tensor t = client.zeros({4});
  }
  // Each destruction joins its thread without waiting out the period.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  EXPECT_EQ(server->runtime().session_count(), 0u);
  EXPECT_EQ(Held(*server), 0u);
}

TEST(SessionClientTest, ClientRequestIdsDoNotCollapseDistinctCalls) {
  // Every mutating call carries a fresh id: two identical creates are two
  // tensors, and two clients attached to one session do not collide.
  auto server = StartServer("127.0.0.1:0");
  Client a(server->InProcessChannel());
  Client b = Client::Attach(server->InProcessChannel(), a.session());
  Tensor x = a.zeros({2});
  Tensor y = a.zeros({2});
  Tensor z = b.zeros({2});
  // b's ops are ordered with b's calls; a sees them once b has synced.
  b.synchronize();
  EXPECT_NE(x.handle(), y.handle());
  EXPECT_NE(y.handle(), z.handle());
  EXPECT_EQ(a.tensors().size(), 3u);
}

// Turns the reply of the first `drops` Create calls into UNAVAILABLE after
// the server has done them: a connection lost on the way back.
class DropReplies : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit DropReplies(std::atomic<int>* drops) : drops_(drops) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new Dropper(std::string(info->method()), drops_);
  }

 private:
  class Dropper : public grpc::experimental::Interceptor {
   public:
    Dropper(std::string method, std::atomic<int>* drops)
        : method_(std::move(method)), drops_(drops) {}
    void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
      using grpc::experimental::InterceptionHookPoints;
      if (m->QueryInterceptionHookPoint(
              InterceptionHookPoints::POST_RECV_STATUS) &&
          method_ == "/tensord.v1.TensorService/Create" &&
          drops_->fetch_sub(1) > 0) {
        *m->GetRecvStatus() =
            grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection lost");
      }
      m->Proceed();
    }

   private:
    const std::string method_;
    std::atomic<int>* drops_;
  };
  std::atomic<int>* drops_;
};

TEST(SessionClientTest, RetriedCreateAfterALostReplyMakesOneTensor) {
  auto server = StartServer("127.0.0.1:0");
  std::atomic<int> drops{2};
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<DropReplies>(&drops));
  auto channel = grpc::experimental::CreateCustomChannelWithInterceptors(
      server->address(), grpc::InsecureChannelCredentials(),
      grpc::ChannelArguments(), std::move(interceptors));
  // The unary Create's retries (a streamed create resends on reconnect:
  // stream_client_test).
  ClientOptions unary;
  unary.pipeline = false;
  Client client(channel, unary);
  Tensor x = client.tensor<float>({1, 2, 3});  // two lost replies, retried
  EXPECT_LE(drops.load(), 0);
  EXPECT_EQ(client.tensors().size(), 1u);  // done once, not three times
  EXPECT_EQ(Held(*server), 12u);
  EXPECT_EQ(x.fetch<float>(), (std::vector<float>{1, 2, 3}));
}

// Counts the calls of one method the client makes.
class CountCalls : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  CountCalls(std::string method, std::atomic<int>* calls)
      : method_("/tensord.v1.TensorService/" + std::move(method)),
        calls_(calls) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    if (info->method() == method_) ++*calls_;
    return nullptr;
  }

 private:
  const std::string method_;
  std::atomic<int>* calls_;
};

std::shared_ptr<grpc::Channel> DialCounting(const server::Server& s,
                                            const std::string& method,
                                            std::atomic<int>* calls) {
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<CountCalls>(method, calls));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      s.address(), grpc::InsecureChannelCredentials(),
      grpc::ChannelArguments(), std::move(interceptors));
}

TEST(SessionClientTest, DroppedTensorsRideTheNextCallInsteadOfAReleaseEach) {
  auto server = StartServer("127.0.0.1:0");
  std::atomic<int> releases{0};
  ClientOptions unary;  // the unary calls' release lists
  unary.pipeline = false;
  Client client(DialCounting(*server, "Release", &releases), unary);
  Tensor a = client.ones({64});
  Tensor b = client.ones({64});
  constexpr int kSteps = 50;
  for (int i = 0; i < kSteps; ++i) (void)(a + b);  // each result dropped
  // Each dropped result went with the next add; one the machine was too
  // slow to carry within the flush delay may have gone on its own.
  EXPECT_LT(releases.load(), kSteps / 5);
  EXPECT_EQ(client.tensors().size(), 2u);  // the last one, sent now
  EXPECT_EQ(Held(*server), 2u * 256);
}

TEST(SessionClientTest, ADroppedTensorIsReleasedSoonWithoutAnotherCall) {
  for (bool pipeline : {false, true}) {
    SCOPED_TRACE(pipeline ? "pipelined" : "unary");
    auto server = StartServer("127.0.0.1:0");
    std::atomic<int> releases{0};
    ClientOptions options;
    options.pipeline = pipeline;
    Client client(DialCounting(*server, "Release", &releases), options);
    {
      Tensor x = client.zeros({1024});
      EXPECT_EQ(client.tensors().size(), 1u);
    }
    // Freed by the client's background release — a Release RPC, or a
    // release command on the session's stream — not by a listing or a call.
    EXPECT_EQ(WaitForHeld(*server, 0), 0u);
    EXPECT_EQ(releases.load(), pipeline ? 0 : 1);
  }
}

// A drop while the flush is already due (an earlier drop armed it, then a
// call carried that one) does not wake the background thread again: it
// goes at the time already set. And after a flush, the next drop sets a
// new one. (The first case needs the carrier's Create to finish within the
// 2 ms flush delay, as it does on an unloaded machine; under load the timer
// fires first and the round covers the second case twice.)
TEST(SessionClientTest, DropsAfterTheFirstAreReleasedWithoutAnotherCall) {
  auto server = StartServer("127.0.0.1:0");
  std::atomic<int> releases{0};
  ClientOptions unary;
  unary.pipeline = false;
  Client client(DialCounting(*server, "Release", &releases), unary);
  Tensor keep = client.zeros({256});
  for (int round = 1; round <= 3; ++round) {
    SCOPED_TRACE(round);
    { Tensor x = client.zeros({256}); }  // dropped: the flush is set
    std::optional<Tensor> carrier = client.zeros({256});  // carries x
    { Tensor y = client.zeros({256}); }  // dropped while the flush is due
    carrier.reset();
    EXPECT_EQ(WaitForHeld(*server, 1024), 1024u);
    EXPECT_EQ(client.tensors().size(), 1u);
  }
  EXPECT_GE(releases.load(), 3);  // at least one Release of its own a round
}

// A call that carried dropped handles and failed puts them back; they
// still go within the flush delay, though the timer the drop set has fired
// meanwhile (the failing call retried for 175 ms) and no call follows.
TEST(SessionClientTest, HandlesAFailedCallCarriedStillGoWithoutAnotherCall) {
  auto server = StartServer("127.0.0.1:0");
  std::atomic<int> drops{0};
  std::atomic<int> releases{0};
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<DropReplies>(&drops));
  interceptors.push_back(std::make_unique<CountCalls>("Release", &releases));
  ClientOptions unary;
  unary.pipeline = false;
  Client client(grpc::experimental::CreateCustomChannelWithInterceptors(
                    server->address(), grpc::InsecureChannelCredentials(),
                    grpc::ChannelArguments(), std::move(interceptors)),
                unary);
  { Tensor x = client.zeros({256}); }  // dropped: the flush timer is set
  drops = 100;                          // every Create's reply lost
  EXPECT_THROW((void)client.zeros({8}), Error);  // carried x, then gave it back
  drops = 0;
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (releases.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(releases.load(), 1);
  // x is gone; what is left is the tensor whose Create reply was lost.
  EXPECT_EQ(Held(*server), 8u * 4);
}

TEST(SessionClientTest, DroppedTensorsMakeRoomUnderAQuota) {
  server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.runtime.host_memory_budget = 64 << 20;
  options.runtime.session_max_bytes = 3 << 20;
  auto s = server::Server::Start(std::move(options));
  ASSERT_TRUE(s.ok()) << s.status();
  Client client(Dial(**s));
  Tensor keep = client.zeros({1 << 19});  // 2 MiB of the 3 MiB quota
  for (int i = 0; i < 20; ++i) {
    // Each 1 MiB result fits only once the previous one is freed: a Run
    // carries it (or the retry after RESOURCE_EXHAUSTED sends it).
    Tensor t = client.zeros({1 << 18});
    (void)t;
  }
  EXPECT_EQ(client.tensors().size(), 1u);
}

}  // namespace
}  // namespace tensord
