// Replays the walkthroughs of two PyTorch GPU tutorials against a running
// tensord: a Portuguese notebook ("Usando a GPU": multiply on the CPU, move to
// the GPU, the same-device error, create directly on the GPU) and d2l.ai's
// "GPUs" section (device_count, try_gpu, try_all_gpus, ones/rand on a device,
// copying between devices, `Z.cuda(1) is Z`). Each step prints the
// tutorial's Python line as a heading, then what that line prints here.
//
// Devices. Where the tutorials say "the GPU" this uses cuda:0, or, on a
// server without one but with several host devices (`tensord --host-devices
// 2`), cpu:1, so the cross-device behaviour can be seen without a GPU. For
// d2l's second device, try_gpu(1): cuda:1 with two GPUs; cpu with one (as
// d2l's own try_gpu(1) falls back); cpu:1 with no GPU but several host
// devices.
//
// Exit status: 0 when every step behaved as in the tutorial, 1 when a step
// that should succeed failed or the cross-device step did not fail with
// FAILED_PRECONDITION, 2 on bad usage.
//
//   seed_walkthrough [--address HOST:PORT]
#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "example_flags.h"
#include "tensord/client.h"

namespace {

using tensord::Device;
using tensord::Tensor;

// Runs the steps and counts the ones that did not behave as the tutorial.
class Walkthrough {
 public:
  void Section(std::string_view title) {
    std::cout << "\n== " << title << " ==\n";
  }

  // Prints `python` as a heading, then runs `step`, which prints the step's
  // output. Any exception fails the step.
  void Step(std::string_view python, const std::function<void()>& step) {
    Heading(python);
    try {
      step();
    } catch (const std::exception& e) {
      Fail(std::string("unexpected error: ") + e.what());
    }
  }

  // A step that must throw tensord::Error with `code`; prints the error the
  // way the tutorial shows PyTorch's.
  void ExpectError(std::string_view python, tensord::StatusCode code,
                   const std::function<void()>& step) {
    Heading(python);
    try {
      step();
      Fail("expected " + std::string(tensord::client::StatusCodeName(code)) +
           ", but the step succeeded");
    } catch (const tensord::Error& e) {
      std::cout << e.what() << "\n";
      if (e.code() != code) {
        Fail("expected " + std::string(tensord::client::StatusCodeName(code)));
      }
    } catch (const std::exception& e) {
      Fail(std::string("unexpected error: ") + e.what());
    }
  }

  void Fail(const std::string& why) {
    std::cout << "!! step failed: " << why << "\n";
    ++failures_;
  }

  int failures() const { return failures_; }

 private:
  static void Heading(std::string_view python) {
    std::cout << "\n>>> " << python << "\n";
  }

  int failures_ = 0;
};

template <typename T>
std::string HostVector(const std::vector<T>& values) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
  os << "]";
  return os.str();
}

// What the walkthrough uses for the tutorials' devices (see the top).
struct Devices {
  std::optional<Device> gpu;  // "the GPU" of the first tutorial
  Device second = "cpu";      // d2l's try_gpu(1)
};

Devices PickDevices(const tensord::Client& client) {
  Devices d;
  int host_devices = 0;
  for (const tensord::DeviceInfo& info : client.devices()) {
    host_devices += info.kind == "cpu";
  }
  const int gpus = client.device_count();
  if (gpus >= 1) {
    d.gpu = Device("cuda:0");
  } else if (host_devices >= 2) {
    d.gpu = Device("cpu:1");
  }
  if (gpus >= 2) {
    d.second = client.try_gpu(1);
  } else if (gpus == 0 && host_devices >= 2) {
    d.second = "cpu:1";
  } else {
    d.second = client.try_gpu(1);  // one GPU: falls back to cpu, as in d2l
  }
  return d;
}

// "Usando a GPU" (seeds/000).
void PortugueseNotebook(tensord::Client& client, const Devices& devices,
                        Walkthrough& w) {
  w.Section("Usando a GPU");
  std::optional<Tensor> vector1, vector2, tensor1_gpu, tensor2_gpu;
  w.Step(
      "vector1 = torch.tensor([1,2,3]); vector2 = torch.tensor([5,8,1]); "
      "vector1 * vector2",
      [&] {
        vector1 = client.tensor<int64_t>({1, 2, 3});
        vector2 = client.tensor<int64_t>({5, 8, 1});
        std::cout << *vector1 * *vector2 << "\n";
      });

  if (!devices.gpu) {
    std::cout << "\n(the server has one device only: the cross-device steps "
                 "need a GPU or `tensord --host-devices 2`; skipped)\n";
    return;
  }
  const Device gpu = *devices.gpu;
  if (!gpu.is_cuda()) {
    std::cout << "\n(no GPU on this server: " << gpu
              << " stands in for cuda:0 below)\n";
  }
  w.Step("tensor1_gpu = vector1.cuda(); tensor1_gpu.device", [&] {
    tensor1_gpu = vector1.value().to(gpu);
    std::cout << tensor1_gpu->device() << "\n";
  });
  w.ExpectError("tensor1_gpu * vector2",
                tensord::StatusCode::FAILED_PRECONDITION,
                [&] { (void)(tensor1_gpu.value() * vector2.value()); });
  w.Step("tensor2_gpu = vector2.cuda(); tensor1_gpu * tensor2_gpu", [&] {
    tensor2_gpu = vector2.value().to(gpu);
    std::cout << tensor1_gpu.value() * *tensor2_gpu << "\n";
  });
  w.Step("tensor3_gpu = torch.tensor([1,2,3], device='cuda'); tensor3_gpu",
         [&] {
           std::cout << client.tensor<int64_t>({1, 2, 3}, gpu) << "\n";
         });
  w.Step(
      "device = 'cuda' if torch.cuda.is_available() else 'cpu'; "
      "torch.tensor([1,2,3,5], device=device)",
      [&] {
        const Device device = client.cuda_available() ? "cuda" : "cpu";
        std::cout << client.tensor<int64_t>({1, 2, 3, 5}, device) << "\n";
      });
}

// d2l.ai "GPUs" (seeds/003).
void D2lGpus(tensord::Client& client, const Devices& devices, Walkthrough& w) {
  w.Section("d2l: GPUs");
  w.Step("!nvidia-smi   (here: the server's devices; see `tensorctl devices`)",
         [&] {
           for (const tensord::DeviceInfo& d : client.devices()) {
             std::cout << d.name << "  " << d.kind << "  " << d.model << "\n";
           }
         });
  w.Step("torch.cuda.device_count()",
         [&] { std::cout << client.device_count() << "\n"; });
  w.Step("try_gpu(), try_gpu(10), try_all_gpus()", [&] {
    std::cout << "(" << client.try_gpu() << ", " << client.try_gpu(10) << ", "
              << HostVector(client.try_all_gpus()) << ")\n";
  });
  w.Step("x = torch.tensor([1, 2, 3]); x.device", [&] {
    std::cout << client.tensor<int64_t>({1, 2, 3}).device() << "\n";
  });

  std::optional<Tensor> X, Y, Z;
  w.Step("X = torch.ones(2, 3, device=try_gpu()); X", [&] {
    X = client.ones({2, 3}, tensord::DType::kFloat32, client.try_gpu());
    std::cout << *X << "\n";
  });
  if (!devices.second.is_cuda() && devices.second.str() != "cpu") {
    std::cout << "\n(try_gpu(1) is cpu on this server; " << devices.second
              << " stands in for the second GPU below)\n";
  }
  w.Step("Y = torch.rand(2, 3, device=try_gpu(1)); Y", [&] {
    Y = client.rand({2, 3}, devices.second);
    std::cout << *Y << "\n";
  });
  if (!(X.value().device() == Y.value().device())) {
    // d2l: "do not simply add X and Y, since this will likely result in an
    // exception" -- X lives on try_gpu(), Y on try_gpu(1).
    w.ExpectError("X + Y", tensord::StatusCode::FAILED_PRECONDITION,
                  [&] { (void)(X.value() + Y.value()); });
  }
  w.Step("Z = X.cuda(1); print(X); print(Z)", [&] {
    Z = X.value().to(devices.second);
    std::cout << *X << "\n" << *Z << "\n";
  });
  w.Step("Y + Z", [&] { std::cout << Y.value() + Z.value() << "\n"; });
  w.Step("Z.cuda(1) is Z", [&] {
    const bool same = Z.value().to(devices.second).is(*Z);
    std::cout << (same ? "True" : "False") << "\n";
    if (!same)
      w.Fail("moving to the device it is on must return the same tensor");
  });
  w.Step("(Y + Z).tolist()   (fetch: the one copy back to host memory)", [&] {
    std::cout << HostVector((Y.value() + Z.value()).fetch<float>()) << "\n";
  });
}

}  // namespace

int main(int argc, char** argv) {
  const std::string address = tensord::examples::AddressFromArgs(argc, argv);
  try {
    tensord::Client client(address);
    const Devices devices = PickDevices(client);
    Walkthrough w;
    PortugueseNotebook(client, devices, w);
    D2lGpus(client, devices, w);
    if (w.failures() > 0) {
      std::cout << "\n"
                << w.failures() << " step(s) did not behave as in "
                << "the tutorials\n";
      return 1;
    }
    std::cout << "\nall steps behaved as in the tutorials\n";
    return 0;
  } catch (const tensord::Error& e) {
    std::cerr << "seed_walkthrough: " << e.what() << " (server " << address
              << ")\n";
    return 1;
  }
}
