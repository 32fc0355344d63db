// Two matmuls on two devices, concurrently (one client thread per device)
// versus one after the other. Without GPUs, run the server with
// `--host-devices 2`: the devices are cpu:0 and cpu:1.
//
//   two_devices [--address HOST:PORT] [--size 1024]
#include <chrono>
#include <cstdint>
#include <iostream>
#include <thread>
#include <vector>

#include "example_flags.h"
#include "tensord/client.h"

int main(int argc, char** argv) {
  int64_t size = 1024;
  const std::string address = tensord::examples::ParseArgs(
      argc, argv, {{"--size", &size, "matrix size"}});
  try {
    tensord::Client client(address);
    std::vector<tensord::Device> devices = client.try_all_gpus();
    if (devices.size() < 2) {
      devices.clear();
      for (const tensord::DeviceInfo& d : client.devices()) {
        if (d.kind == "cpu") devices.emplace_back(d.name);
      }
    }
    if (devices.size() < 2) {
      std::cerr << "two_devices: the server has one device; start it with "
                   "--host-devices 2\n";
      return 1;
    }
    devices.erase(devices.begin() + 2, devices.end());
    std::vector<tensord::Tensor> a, b;
    for (const tensord::Device& d : devices) {
      a.push_back(client.randn({size, size}, d, 1));
      b.push_back(client.randn({size, size}, d, 2));
    }
    auto work = [&](size_t i) { (void)a[i].matmul(b[i]).norm().item<float>(); };
    work(0);  // warm-up
    work(1);
    auto t0 = std::chrono::steady_clock::now();
    work(0);
    work(1);
    const double sequential =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    t0 = std::chrono::steady_clock::now();
    std::thread other([&] { work(1); });
    work(0);
    other.join();
    const double concurrent =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    std::cout << "two matmuls of " << size << "x" << size << " on "
              << devices[0] << " and " << devices[1] << "\n";
    std::cout << "in sequence:  " << sequential * 1e3 << " ms\n";
    std::cout << "concurrently: " << concurrent * 1e3 << " ms\n";
    std::cout << "speedup: " << sequential / concurrent << "x\n";
    if (!devices[0].is_cuda()) {
      std::cout << "(host devices share this machine's cores, and BLAS "
                   "already uses all of them for one product, so expect "
                   "little gain without GPUs)\n";
    }
    return 0;
  } catch (const tensord::Error& e) {
    std::cerr << "two_devices: " << e.what() << "\n";
    return 1;
  }
}
