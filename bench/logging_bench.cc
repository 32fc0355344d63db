// logging_bench: the d2l logging exercise as a benchmark.
//
// `steps` matmuls of size x size float32 matrices, logging the Frobenius norm
// of each product: one round trip per step (matmul, norm, fetch of the norm,
// plus the releases of the temporaries) against one Execute that keeps the
// log on the device and fetches it once. Each mode runs --repeats times
// after a warm-up; the best time counts. Prints a table and one JSON line.
// By default the server runs in this process on a loopback TCP port;
// --address measures an external tensord.
//
//   logging_bench [--steps 1000] [--size 100] [--repeats 3] [--address A]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "examples/logging_common.h"
#include "server/program_flags.h"
#include "server/server.h"
#include "tensord/client.h"

ABSL_FLAG(int, steps, 1000, "matmuls per run");
ABSL_FLAG(int, size, 100, "matrix size");
ABSL_FLAG(int, repeats, 3, "runs per mode (the best counts)");
ABSL_FLAG(std::string, address, "",
          "measure this tensord instead of an in-process one");

int main(int argc, char** argv) {
  tensord::server::ParseProgramFlags(
      argc, argv,
      {.name = "logging_bench",
       .summary =
           "the d2l logging exercise as a benchmark: --steps matmuls, "
           "logging the norm of each product, one round trip per step "
           "against one Execute that keeps the log on the device. Runs an "
           "in-process tensord unless --address names one. Prints a table "
           "and one JSON line.",
       .example = "logging_bench --steps 1000 --size 100 --repeats 3",
       .flag_files = {__FILE__}});
  const int steps = std::max(1, absl::GetFlag(FLAGS_steps));
  const int size = std::max(1, absl::GetFlag(FLAGS_size));
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));

  std::unique_ptr<tensord::server::Server> server;
  std::string address = absl::GetFlag(FLAGS_address);
  if (address.empty()) {
    tensord::server::ServerOptions options;
    options.listen = "127.0.0.1:0";
    auto started = tensord::server::Server::Start(std::move(options));
    if (!started.ok()) {
      std::fprintf(stderr, "logging_bench: %s\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    server = std::move(*started);
    address = server->address();
  }
  try {
    tensord::Client client(address);
    const tensord::Device dev = client.try_gpu();
    auto a = client.randn({size, size}, dev, 1);
    auto b = client.randn({size, size}, dev, 2);
    tensord::examples::LogPerStep(a, b, std::min(steps, 50));  // warm-up
    tensord::examples::LogBatched(client, a, b, std::min(steps, 50));
    double per_step = 1e30, batched = 1e30;
    float max_diff = 0;
    for (int r = 0; r < repeats; ++r) {
      auto p = tensord::examples::LogPerStep(a, b, steps);
      auto q = tensord::examples::LogBatched(client, a, b, steps);
      per_step = std::min(per_step, p.seconds);
      batched = std::min(batched, q.seconds);
      for (int i = 0; i < steps; ++i) {
        max_diff = std::max(max_diff, std::abs(p.norms[i] - q.norms[i]));
      }
    }
    const double ratio = per_step / batched;
    std::printf("device %s, %d matmuls of %dx%d float32, best of %d\n",
                dev.str().c_str(), steps, size, size, repeats);
    std::printf("%-22s %12s %14s\n", "mode", "total_ms", "us_per_step");
    std::printf("%-22s %12.2f %14.1f\n", "one_rpc_per_step", per_step * 1e3,
                per_step * 1e6 / steps);
    std::printf("%-22s %12.2f %14.1f\n", "one_execute", batched * 1e3,
                batched * 1e6 / steps);
    std::printf("batched speedup: %.1fx (logs agree within %g)\n", ratio,
                max_diff);
    std::printf(
        "{\"benchmark\":\"logging\",\"device\":\"%s\",\"steps\":%d,"
        "\"size\":%d,\"per_step_ms\":%.3f,\"batched_ms\":%.3f,"
        "\"speedup\":%.2f}\n",
        dev.str().c_str(), steps, size, per_step * 1e3, batched * 1e3, ratio);
    return 0;
  } catch (const tensord::Error& e) {
    std::fprintf(stderr, "logging_bench: %s\n", e.what());
    return 1;
  }
}
