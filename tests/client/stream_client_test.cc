// The pipelined client (issue 17) against a real server: ops go on the
// session's command stream without a round trip each, PyTorch's errors are
// still thrown by the causing line, errors only the server knows come at
// the next sync point naming the op, and a connection cut anywhere in a
// scripted sequence loses nothing and runs nothing twice.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/command_stream.h"
#include "tests/client/cuttable_proxy.h"
#include "server/server.h"
#include "tensord/client.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using std::chrono::milliseconds;

std::unique_ptr<server::Server> StartServer(uint64_t budget = 64 << 20,
                                            int host_devices = 1) {
  server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.runtime.host_memory_budget = budget;
  options.runtime.host_devices = host_devices;
  auto s = server::Server::Start(std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

template <typename F>
Error ErrorOf(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  return Error(StatusCode::OK, "");
}

// Counts the client's calls per method.
class CountCalls : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit CountCalls(std::map<std::string, int>* calls, std::mutex* mu)
      : calls_(calls), mu_(mu) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    std::lock_guard<std::mutex> lock(*mu_);
    ++(*calls_)[info->method()];
    return nullptr;
  }

 private:
  std::map<std::string, int>* calls_;
  std::mutex* mu_;
};

// A channel to `address` whose calls are counted in `calls`.
std::shared_ptr<grpc::Channel> DialCounting(const std::string& address,
                                            std::map<std::string, int>* calls,
                                            std::mutex* mu) {
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<CountCalls>(calls, mu));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, grpc::InsecureChannelCredentials(), grpc::ChannelArguments(),
      std::move(interceptors));
}

TEST(StreamClientTest, AChainOfOpsIsOneStreamAndNoUnaryCalls) {
  auto server = StartServer();
  std::map<std::string, int> calls;
  std::mutex mu;
  Client client(DialCounting(server->address(), &calls, &mu));
  Tensor x = client.tensor<float>({1, 2, 3});
  Tensor y = client.ones({3});
  for (int i = 0; i < 100; ++i) x = x + y;  // each known before it runs
  EXPECT_THAT(x.shape(), ElementsAre(3));
  EXPECT_EQ(x.dtype(), DType::kFloat32);
  EXPECT_EQ(x.fetch<float>(), (std::vector<float>{101, 102, 103}));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(calls["/tensord.v1.TensorService/Stream"], 1);
  EXPECT_EQ(calls["/tensord.v1.TensorService/Create"], 0);
  EXPECT_EQ(calls["/tensord.v1.TensorService/Run"], 0);
  EXPECT_EQ(calls["/tensord.v1.TensorService/Read"], 0);
  EXPECT_EQ(calls["/tensord.v1.TensorService/Release"], 0);
}

TEST(StreamClientTest, ErrorsKnownBeforeLaunchAreThrownByTheCausingLine) {
  auto server = StartServer(64 << 20, /*host_devices=*/2);
  Client client(server->InProcessChannel());
  Tensor a = client.ones({2, 3});
  Tensor b = client.ones({4, 5});
  Error shapes = ErrorOf([&] { (void)a.matmul(b); });
  EXPECT_EQ(shapes.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(shapes.message(),
            "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  EXPECT_EQ(shapes.kind(), ErrorKind::kRuntimeError);
  // torch's IndexError, known at the line too (the local planner's kind).
  Error dim = ErrorOf([&] { (void)a.sum(5); });
  EXPECT_EQ(dim.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(dim.kind(), ErrorKind::kIndexError);
  EXPECT_EQ(dim.message(),
            "Dimension out of range (expected to be in range of [-2, 1], but "
            "got 5)");
  Tensor c = client.ones({2, 3}, DType::kFloat32, "cpu:1");
  Error devices = ErrorOf([&] { (void)(a + c); });
  EXPECT_EQ(devices.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(devices.message(),
            "Expected all tensors to be on the same device, but found at "
            "least two devices, cpu:0 and cpu:1!");
  Tensor flags = client.tensor<bool>({true, false});
  Error dtype = ErrorOf([&] { (void)flags.matmul(flags); });
  EXPECT_EQ(dtype.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(dtype.message(), HasSubstr("not implemented for 'Bool'"));
  // Nothing was sent for them: the stream has no failure to report.
  EXPECT_EQ((a + a).sum().item<float>(), 12);
}

// An error only the server finds (a target out of range) still carries
// torch's class: from error_kind on the stream, from the trailer unary.
TEST(StreamClientTest, ServerErrorsCarryTorchsExceptionClass) {
  auto server = StartServer(64 << 20);
  for (bool pipeline : {true, false}) {
    SCOPED_TRACE(pipeline ? "stream" : "unary");
    ClientOptions options;
    options.pipeline = pipeline;
    Client client(server->InProcessChannel(), options);
    Tensor scores = client.ones({2, 3});
    Tensor targets = client.tensor<int64_t>({0, 5});
    Error e = ErrorOf([&] { (void)nll_loss(scores, targets).item<float>(); });
    EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(e.kind(), ErrorKind::kIndexError);
    EXPECT_THAT(e.message(), HasSubstr("Target 5 is out of bounds."));
    client.synchronize();  // the failure is reported once
    EXPECT_EQ(scores.sum().item<float>(), 6);
  }
}

TEST(StreamClientTest, ServerOnlyErrorsComeAtTheNextSyncNamingTheOp) {
  auto server = StartServer(/*budget=*/1 << 20);
  Client client(server->InProcessChannel());
  Tensor small = client.ones({4});
  Tensor big = client.zeros({1 << 20});  // 4 MiB past the 1 MiB budget
  Tensor after = big + 1;                // planned, refused by the server
  Tensor also = small * 2;               // refused too: after the failure
  Error e = ErrorOf([&] { (void)also.fetch<float>(); });
  EXPECT_EQ(e.code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(e.message(), HasSubstr("(create, result " +
                                     std::to_string(big.handle()) + ")"));
  // Reported once: the session goes on.
  EXPECT_EQ((small * 3).fetch<float>(), (std::vector<float>(4, 3)));
  // The tensors that were never made say why, at once.
  Error dead = ErrorOf([&] { (void)(after + 1); });
  EXPECT_EQ(dead.code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(dead.message(), HasSubstr("was never made"));
  EXPECT_EQ(ErrorOf([&] { (void)also.fetch<float>(); }).code(),
            StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(client.tensors().size(), 1u);  // small: the rest were never made
}

TEST(StreamClientTest, MovesAndInPlaceOpsKeepPyTorchsIdentity) {
  auto server = StartServer(64 << 20, 2);
  Client client(server->InProcessChannel());
  Tensor x = client.tensor<float>({1, 2});
  EXPECT_TRUE(x.to("cpu:0").is(x));  // already there: x itself
  Tensor y = x.to("cpu:1");
  EXPECT_EQ(y.device(), Device("cpu:1"));
  y.add_(1);
  y.mul_(2);
  EXPECT_EQ(y.fetch<float>(), (std::vector<float>{4, 6}));
  EXPECT_EQ(x.fetch<float>(), (std::vector<float>{1, 2}));
  // An unknown device is the server's to judge, at the call.
  EXPECT_EQ(ErrorOf([&] { (void)x.to("cuda:3"); }).code(),
            StatusCode::NOT_FOUND);
}

TEST(StreamClientTest, ShutdownDoesNotWaitForAnIdleStream) {
  auto server = StartServer();
  // Over TCP: an in-process channel must not outlive its server's shutdown.
  Client client(grpc::CreateChannel(server->address(),
                                    grpc::InsecureChannelCredentials()));
  Tensor x = client.ones({4});
  EXPECT_EQ(x.sum().item<float>(), 4);  // the stream is open, and idle
  const auto t0 = std::chrono::steady_clock::now();
  server->Shutdown(milliseconds(10000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(3000));
}

// The window of commands without an answer: a Send that finds it full
// waits, and fails with RESOURCE_EXHAUSTED naming the bound when it stays
// full past the deadline (here: a window of one, behind a long matmul).
TEST(StreamClientTest, AWindowThatStaysFullIsResourceExhausted) {
  auto server = StartServer(256 << 20);
  auto channel = server->InProcessChannel();
  auto stub = v1::TensorService::NewStub(channel);
  grpc::ClientContext open_ctx;
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(stub->OpenSession(&open_ctx, {}, &opened).ok());
  uint64_t operand = 0;
  {
    grpc::ClientContext ctx;
    v1::CreateRequest create;
    create.set_session(opened.session());
    create.set_dtype(v1::FLOAT32);
    create.add_shape(3072);
    create.add_shape(3072);
    create.mutable_fill()->set_kind(v1::Fill::RAND);
    v1::TensorResponse made;
    ASSERT_TRUE(stub->Create(&ctx, create, &made).ok());
    operand = made.tensor().handle();
  }
  client::internal::CommandStream::Options options;
  options.max_in_flight = 1;
  options.full_wait = milliseconds(20);
  client::internal::CommandStream stream(channel, opened.session(), "",
                                         options);
  v1::Command matmul;  // 58 GFLOP: far longer than 20 ms
  v1::MatMulArgs* mm = matmul.mutable_run()->mutable_op()->mutable_matmul();
  mm->mutable_lhs()->set_handle(operand);
  mm->mutable_rhs()->set_handle(operand);
  stream.Send(matmul);
  v1::Command sync;
  sync.mutable_sync();
  Error full = ErrorOf([&] { stream.Send(sync); });
  EXPECT_EQ(full.code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(full.message(), HasSubstr("the most a client keeps in flight "
                                        "on its command stream is 1"));
  stream.Drain();  // the matmul ends; the window opens again
  EXPECT_NO_THROW(stream.Wait(stream.Send(sync, /*want_reply=*/true)));
}

// A scripted sequence with the connection cut after its k-th line, for
// every k: the results are right, and every create ran exactly once (a
// rerun would have failed on its handle, or left a second tensor).
TEST(StreamClientTest, ACutConnectionAnywhereLosesNothingAndRunsNothingTwice) {
  auto server = StartServer();
  CuttableProxy proxy(server->port());
  constexpr int kLines = 8;
  for (int cut = 0; cut <= kLines; ++cut) {
    SCOPED_TRACE("cut after line " + std::to_string(cut));
    std::map<std::string, int> calls;
    std::mutex mu;
    Client client(DialCounting(proxy.address(), &calls, &mu));
    std::vector<Tensor> keep;
    int line = 0;
    auto step = [&](Tensor t) {
      keep.push_back(std::move(t));
      if (++line == cut) proxy.Cut();
    };
    step(client.tensor<float>({1, 2, 3}));
    step(client.tensor<float>({10, 20, 30}));
    step(keep[0] + keep[1]);
    step(keep[2] * 2);
    step(keep[3].sum());
    step(client.ones({3}));
    step(keep[5] - keep[0]);
    step(keep[6].to(DType::kInt64));
    EXPECT_EQ(keep[3].fetch<float>(), (std::vector<float>{22, 44, 66}));
    EXPECT_EQ(keep[4].item<float>(), 132);
    EXPECT_EQ(keep[7].fetch<int64_t>(), (std::vector<int64_t>{0, -1, -2}));
    EXPECT_EQ(client.tensors().size(), static_cast<size_t>(kLines));
    // The cut was real: the stream reconnected.
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(calls["/tensord.v1.TensorService/Stream"] > 1, cut > 0);
  }
}

}  // namespace
}  // namespace tensord
