// latency_bench: the round-trip cost of a remote tensor op next to the floor.
//
// In one run, on loopback TCP:
//   bare_unary         an empty gRPC unary call (bench/tensord_bench Echo.Ping)
//   create_mul_fetch   client.tensor({1,2,3}), client.tensor({5,8,1}), x * y,
//                      fetch of the 3-element result, and the releases the
//                      RAII handles make — the whole PyTorch-like loop
//   mul                one Binary RPC on existing tensors, plus the Release
//                      of its result when the handle goes out of scope
//   create_3, fetch_3  one Create (+ Release), one Fetch of 3 elements
//   get_tensor_unary   a plain GetTensor unary call through raw stubs
// Each is measured for --iterations round trips after a warm-up; p50/p99 in
// microseconds. By default both servers run in this process (separate ports,
// real sockets); --address measures an external tensord instead.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "server/server.h"
#include "tensord/client.h"
#include "tensord/v1/tensord.grpc.pb.h"
#include "tensord_bench/echo.grpc.pb.h"

ABSL_FLAG(int, iterations, 10000, "round trips per measurement");
ABSL_FLAG(std::string, address, "",
          "measure this tensord instead of an in-process one");

namespace {

class EchoService final : public tensord_bench::Echo::CallbackService {
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* ctx,
                                 const tensord_bench::Empty*,
                                 tensord_bench::Empty*) override {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

struct Result {
  std::string name;
  double p50_us = 0, p99_us = 0, mean_us = 0;
};

Result Measure(const std::string& name, int iterations,
               const std::function<void()>& body) {
  for (int i = 0; i < std::max(100, iterations / 20); ++i) body();  // warm-up
  std::vector<double> us(iterations);
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const auto t1 = std::chrono::steady_clock::now();
    us[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  Result r{name};
  double sum = 0;
  for (double v : us) sum += v;
  r.mean_us = sum / iterations;
  std::sort(us.begin(), us.end());
  r.p50_us = us[iterations / 2];
  r.p99_us = us[std::min(iterations - 1, iterations * 99 / 100)];
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int iterations = std::max(1, absl::GetFlag(FLAGS_iterations));

  // The floor: a bare empty unary call on its own loopback server.
  EchoService echo;
  int echo_port = 0;
  grpc::ServerBuilder echo_builder;
  echo_builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                                &echo_port);
  echo_builder.RegisterService(&echo);
  std::unique_ptr<grpc::Server> echo_server = echo_builder.BuildAndStart();
  auto echo_stub = tensord_bench::Echo::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(echo_port),
      grpc::InsecureChannelCredentials()));

  std::unique_ptr<tensord::server::Server> server;
  std::string address = absl::GetFlag(FLAGS_address);
  if (address.empty()) {
    tensord::server::ServerOptions options;
    options.listen = "127.0.0.1:0";
    auto started = tensord::server::Server::Start(std::move(options));
    if (!started.ok()) {
      std::fprintf(stderr, "latency_bench: %s\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    server = std::move(*started);
    address = server->address();
  }
  tensord::Client client(address);

  std::vector<Result> results;
  results.push_back(Measure("bare_unary", iterations, [&] {
    grpc::ClientContext ctx;
    tensord_bench::Empty req, resp;
    if (!echo_stub->Ping(&ctx, req, &resp).ok()) std::abort();
  }));
  results.push_back(Measure("create_mul_fetch", iterations, [&] {
    auto x = client.tensor<int64_t>({1, 2, 3});
    auto y = client.tensor<int64_t>({5, 8, 1});
    auto z = (x * y).fetch<int64_t>();
    if (z[1] != 16) std::abort();
  }));
  auto x = client.tensor<int64_t>({1, 2, 3});
  auto y = client.tensor<int64_t>({5, 8, 1});
  results.push_back(Measure("mul", iterations, [&] { auto z = x * y; }));
  results.push_back(Measure("create_3", iterations,
                            [&] { auto t = client.tensor<int64_t>({1, 2, 3}); }));
  auto z = x * y;
  results.push_back(Measure("fetch_3", iterations,
                            [&] { auto v = z.fetch<int64_t>(); }));
  // One plain unary RPC to tensord (a handle lookup): the service's own
  // per-call cost next to the bare call.
  auto stub = tensord::v1::TensorService::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  tensord::v1::GetTensorRequest get;
  get.set_session(client.session());
  get.set_handle(z.handle());
  results.push_back(Measure("get_tensor_unary", iterations, [&] {
    grpc::ClientContext ctx;
    tensord::v1::TensorResponse resp;
    if (!stub->GetTensor(&ctx, get, &resp).ok()) std::abort();
  }));

  const double floor = results[0].p50_us;
  std::printf("%-18s %10s %10s %10s %12s\n", "measurement", "p50_us", "p99_us",
              "mean_us", "p50/bare");
  for (const Result& r : results) {
    std::printf("%-18s %10.1f %10.1f %10.1f %12.2f\n", r.name.c_str(), r.p50_us,
                r.p99_us, r.mean_us, r.p50_us / floor);
  }
  std::printf("{\"benchmark\":\"latency\",\"iterations\":%d,\"transport\":\"tcp-loopback\",\"results\":[",
              iterations);
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::printf("%s{\"name\":\"%s\",\"p50_us\":%.1f,\"p99_us\":%.1f,\"mean_us\":%.1f,\"p50_over_bare\":%.3f}",
                i ? "," : "", r.name.c_str(), r.p50_us, r.p99_us, r.mean_us,
                r.p50_us / floor);
  }
  std::printf("]}\n");
  echo_server->Shutdown();
  return 0;
}
