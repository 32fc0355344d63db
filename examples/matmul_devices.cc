// The seeds' matmul exercise: a large matrix product on `cpu` and on
// try_gpu() (cuda:0 when the server has a GPU, else cpu again: said so),
// timed end to end including a fetch of one element to wait for the result.
//
//   matmul_devices [--address HOST:PORT] [--size 2048] [--repeats 3]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>

#include "example_flags.h"
#include "tensord/client.h"

namespace {

// Best time of `repeats` products, in seconds. The norm's fetch waits for
// the device to finish.
double TimeMatMul(const tensord::Client& client, const tensord::Device& dev,
                  int64_t size, int64_t repeats, float* norm) {
  auto a = client.randn({size, size}, dev, 1);
  auto b = client.randn({size, size}, dev, 2);
  double best = 1e30;
  for (int64_t r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto c = a.matmul(b);
    *norm = c.norm().item<float>();
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - t0)
                              .count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t size = 2048, repeats = 3;
  const std::string address = tensord::examples::ParseArgs(
      argc, argv,
      {{"--size", &size, "matrix size"},
       {"--repeats", &repeats, "products per device (best counts)"}});
  try {
    tensord::Client client(address);
    const tensord::Device gpu = client.try_gpu();
    if (!gpu.is_cuda()) {
      std::cout << "no GPU on this server: try_gpu() is cpu, so both runs "
                   "use the CPU\n";
    }
    const double flops = 2.0 * size * size * size;
    float cpu_norm = 0, gpu_norm = 0;
    const double cpu_s = TimeMatMul(client, "cpu", size, repeats, &cpu_norm);
    const double gpu_s = TimeMatMul(client, gpu, size, repeats, &gpu_norm);
    std::cout << "matmul " << size << "x" << size
              << " float32 on cpu: " << cpu_s * 1e3 << " ms ("
              << flops / cpu_s / 1e9 << " GFLOP/s), norm " << cpu_norm << "\n";
    std::cout << "matmul " << size << "x" << size << " float32 on " << gpu
              << ": " << gpu_s * 1e3 << " ms (" << flops / gpu_s / 1e9
              << " GFLOP/s), norm " << gpu_norm << "\n";
    std::cout << "speedup of " << gpu << " over cpu: " << cpu_s / gpu_s
              << "x\n";
    return 0;
  } catch (const tensord::Error& e) {
    std::cerr << "matmul_devices: " << e.what() << "\n";
    return 1;
  }
}
