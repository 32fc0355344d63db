// The seeds' logging exercise: 1000 matmuls of 100x100 matrices, logging
// the Frobenius norm of each product one result at a time (a fetch per
// step) versus keeping the log on the device (one Execute) and fetching it
// once. Prints both times and their ratio.
//
//   logging_exercise [--address HOST:PORT] [--steps 1000] [--size 100]
#include <cmath>
#include <cstdint>
#include <iostream>

#include "example_flags.h"
#include "logging_common.h"
#include "tensord/client.h"

int main(int argc, char** argv) {
  int64_t steps = 1000, size = 100;
  const std::string address = tensord::examples::ParseArgs(
      argc, argv,
      {{"--steps", &steps, "matmuls"}, {"--size", &size, "matrix size"}});
  try {
    tensord::Client client(address);
    const tensord::Device dev = client.try_gpu();
    auto a = client.randn({size, size}, dev, 1);
    auto b = client.randn({size, size}, dev, 2);
    const int n = static_cast<int>(steps);
    auto per_step = tensord::examples::LogPerStep(a, b, n);
    auto batched = tensord::examples::LogBatched(client, a, b, n);
    bool agree = per_step.norms.size() == batched.norms.size();
    for (size_t i = 0; agree && i < per_step.norms.size(); ++i) {
      agree = std::abs(per_step.norms[i] - batched.norms[i]) <=
              1e-5f * std::abs(per_step.norms[i]);
    }
    std::cout << steps << " matmuls of " << size << "x" << size << " on " << dev
              << ", Frobenius norm logged each step\n";
    std::cout << "one result at a time (fetch per step): "
              << per_step.seconds * 1e3 << " ms\n";
    std::cout << "log kept on the device, fetched once:  "
              << batched.seconds * 1e3 << " ms\n";
    std::cout << "ratio: " << per_step.seconds / batched.seconds << "x\n";
    std::cout << "logs agree: " << (agree ? "yes" : "NO") << "\n";
    return agree ? 0 : 1;
  } catch (const tensord::Error& e) {
    std::cerr << "logging_exercise: " << e.what() << "\n";
    return 1;
  }
}
