// tensord: the daemon. Owns this machine's devices and serves TensorService.
//
//   tensord [--listen 127.0.0.1:50051] [--host-devices N]
//           [--memory-limit 8GiB] [--log-level info] [--port-file PATH]
//
// SIGINT/SIGTERM shut it down cleanly: new RPCs are refused, in-flight ones
// get a grace period, then every tensor is freed.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "core/device_registry.h"
#include "server/byte_size.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "address to serve on, host:port (port 0 picks a free port)");
ABSL_FLAG(int, host_devices, 1,
          "number of host (CPU) devices: 1 gives 'cpu', N > 1 gives "
          "'cpu:0'..'cpu:N-1', each with its own memory budget");
ABSL_FLAG(std::string, memory_limit, "",
          "memory budget of each host device, e.g. 8GiB (default: 80% of RAM "
          "shared among the host devices)");
ABSL_FLAG(std::string, gpu_memory_limit, "",
          "memory budget of each GPU (default: its memory less a 5% reserve)");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound port to this file once serving");
ABSL_FLAG(int, shutdown_grace_ms, 5000,
          "how long in-flight RPCs may run after SIGINT/SIGTERM");

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "tensord: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tensord: serves tensors on this machine's devices over gRPC.\n"
      "Usage: tensord [--listen HOST:PORT] [--host-devices N] "
      "[--memory-limit SIZE] [--log-level LEVEL]");
  absl::ParseCommandLine(argc, argv);

  const std::string level_name = absl::GetFlag(FLAGS_log_level);
  const spdlog::level::level_enum level = spdlog::level::from_str(level_name);
  if (level == spdlog::level::off && level_name != "off") {
    return Fail("invalid --log-level '" + level_name +
                "': expected trace, debug, info, warn, error or off");
  }
  spdlog::set_level(level);

  tensord::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.runtime.host_devices = absl::GetFlag(FLAGS_host_devices);
  for (auto [flag, target] :
       {std::pair{absl::GetFlag(FLAGS_memory_limit),
                  &options.runtime.host_memory_budget},
        std::pair{absl::GetFlag(FLAGS_gpu_memory_limit),
                  &options.runtime.accelerator_memory_budget}}) {
    if (flag.empty()) continue;
    absl::StatusOr<uint64_t> bytes = tensord::server::ParseByteSize(flag);
    if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
    *target = *bytes;
  }

  tensord::core::AcceleratorDiscovery accelerators =
      tensord::core::DiscoverAccelerators();
  spdlog::info("{}", accelerators.summary);
  options.runtime.extra_devices = std::move(accelerators.devices);

  // Block the shutdown signals before gRPC starts its threads, so that only
  // the sigwait() below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = tensord::server::Server::Start(std::move(options));
  if (!server.ok()) return Fail(std::string(server.status().message()));

  std::vector<std::string> names;
  for (const auto& d : (*server)->runtime().ListDevices()) {
    names.push_back(d.name + " (" + d.properties.model + ")");
  }
  spdlog::info("tensord {} serving on {} with devices: {}", TENSORD_VERSION,
               (*server)->address(), absl::StrJoin(names, ", "));
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    std::ofstream(port_file) << (*server)->port() << "\n";
  }

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("received {}, shutting down (grace {} ms)",
               signal_number == SIGINT ? "SIGINT" : "SIGTERM",
               absl::GetFlag(FLAGS_shutdown_grace_ms));
  (*server)->Shutdown(
      std::chrono::milliseconds(absl::GetFlag(FLAGS_shutdown_grace_ms)));
  (*server)->Wait();
  server->reset();
  spdlog::info("tensord stopped");
  return 0;
}
