// logging_bench: the d2l logging exercise as a benchmark.
//
// `steps` matmuls of size x size float32 matrices, logging the Frobenius norm
// of each product, four ways: with a unary client, a call per op and a
// fetch per step (unary_fetch_per_step); with the pipelined client, a fetch
// per step (eager_fetch_per_step: one round trip a step) and without one
// (eager_no_per_step_fetch: the naive loop keeping the log on the device,
// one round trip in all); and one Execute (one_execute). Each mode runs
// --repeats times after a warm-up, interleaved; the best time counts, and
// each is shown as a ratio of one_execute. Prints a table and a JSON line.
// By default the server runs in this process on a loopback TCP port;
// --address measures an external tensord.
//
//   logging_bench [--steps 1000] [--size 100] [--repeats 3] [--address A]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/bench_server.h"
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
  const std::string address = tensord::bench::BenchAddress(
      "logging_bench", absl::GetFlag(FLAGS_address), &server);
  if (address.empty()) return 1;
  try {
    // The pipelined client (the default) and one with a unary call per op
    // (the path before issue 17), each with its own copy of the inputs.
    tensord::Client client(address);
    tensord::ClientOptions unary_options;
    unary_options.pipeline = false;
    tensord::Client unary(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()),
        unary_options);
    const tensord::Device dev = client.try_gpu();
    auto a = client.randn({size, size}, dev, 1);
    auto b = client.randn({size, size}, dev, 2);
    auto ua = unary.randn({size, size}, dev, 1);
    auto ub = unary.randn({size, size}, dev, 2);
    using tensord::examples::LoggingRun;
    struct Mode {
      Mode(const char* n, std::function<LoggingRun(int)> r)
          : name(n), run(std::move(r)) {}
      const char* name;
      std::function<LoggingRun(int)> run;
      double best = 1e30;
      LoggingRun last;
    };
    std::vector<Mode> modes = {
        {"unary_fetch_per_step",
         [&](int n) { return tensord::examples::LogPerStep(ua, ub, n); }},
        {"eager_fetch_per_step",
         [&](int n) { return tensord::examples::LogPerStep(a, b, n); }},
        {"eager_no_per_step_fetch",
         [&](int n) { return tensord::examples::LogEager(a, b, n); }},
        {"one_execute",
         [&](int n) { return tensord::examples::LogBatched(client, a, b, n); }},
    };
    for (Mode& m : modes) m.run(std::min(steps, 50));  // warm-up
    // Interleaved: every repeat runs every mode once.
    for (int r = 0; r < repeats; ++r) {
      for (Mode& m : modes) {
        m.last = m.run(steps);
        m.best = std::min(m.best, m.last.seconds);
      }
    }
    float max_diff = 0;
    for (const Mode& m : modes) {
      for (int i = 0; i < steps; ++i) {
        max_diff = std::max(max_diff,
                            std::abs(m.last.norms[i] - modes[3].last.norms[i]));
      }
    }
    const double batched = modes[3].best;
    std::printf("device %s, %d matmuls of %dx%d float32, best of %d\n",
                dev.str().c_str(), steps, size, size, repeats);
    std::printf("%-26s %12s %14s %12s\n", "mode", "total_ms", "us_per_step",
                "/ execute");
    for (const Mode& m : modes) {
      std::printf("%-26s %12.2f %14.1f %12.2f\n", m.name, m.best * 1e3,
                  m.best * 1e6 / steps, m.best / batched);
    }
    std::printf("logs agree within %g\n", max_diff);
    std::printf(
        "{\"benchmark\":\"logging\",\"device\":\"%s\",\"steps\":%d,"
        "\"size\":%d",
        dev.str().c_str(), steps, size);
    for (const Mode& m : modes) {
      std::printf(",\"%s_ms\":%.3f", m.name, m.best * 1e3);
    }
    std::printf("}\n");
    return 0;
  } catch (const tensord::Error& e) {
    std::fprintf(stderr, "logging_bench: %s\n", e.what());
    return 1;
  }
}
