// The d2l logging exercise (seed 003's GPU chapter), shared by
// examples/logging_exercise and bench/logging_bench: multiply two
// size x size matrices `steps` times and log the Frobenius norm of each
// product, either
//   per step: matmul, norm and a fetch of the norm every step (five RPCs:
//             MatMul, Run(norm), Fetch and the two Releases the RAII
//             handles make), or
//   eager:    the naive loop without a per-step fetch: each step's norm
//             kept as a tensor on the device, the log cat'ed and fetched
//             once at the end (with the pipelined client, one round trip
//             for the whole run, as PyTorch's queued kernels), or
//   batched:  all steps recorded in one Batch whose log of norms stays on
//             the device (cat of the [1, 1] norms) and is fetched once.
#ifndef TENSORD_EXAMPLES_LOGGING_COMMON_H_
#define TENSORD_EXAMPLES_LOGGING_COMMON_H_

#include <chrono>
#include <vector>

#include "tensord/client.h"

namespace tensord::examples {

struct LoggingRun {
  double seconds = 0;
  std::vector<float> norms;
};

inline LoggingRun LogPerStep(const Tensor& a, const Tensor& b, int steps) {
  LoggingRun run;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    Tensor y = a.matmul(b);
    run.norms.push_back(y.norm().item<float>());
  }
  run.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  return run;
}

inline LoggingRun LogEager(const Tensor& a, const Tensor& b, int steps) {
  LoggingRun run;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> log;
  log.reserve(steps);
  for (int i = 0; i < steps; ++i) {
    Tensor y = a.matmul(b);
    log.push_back(y.norm().reshape({1}));
  }
  run.norms = cat(log, 0).fetch<float>();
  run.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  return run;
}

inline LoggingRun LogBatched(const Client& client, const Tensor& a,
                             const Tensor& b, int steps) {
  LoggingRun run;
  const auto t0 = std::chrono::steady_clock::now();
  Batch batch = client.batch();
  std::vector<Batch::Input> log;
  for (int i = 0; i < steps; ++i) {
    Batch::Value y = batch.matmul(a, b);
    log.push_back(batch.reduce(ReduceOp::kNorm, y, std::nullopt,
                               /*keepdim=*/true));
  }
  Batch::Value all = batch.cat(log, 0);
  batch.keep(all);
  BatchResults results = batch.run();
  run.norms = results[all].fetch<float>();
  run.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  return run;
}

}  // namespace tensord::examples

#endif  // TENSORD_EXAMPLES_LOGGING_COMMON_H_
