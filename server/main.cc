// tensord: the daemon. Owns this machine's devices and serves TensorService.
//
//   tensord [--config /etc/tensord/tensord.toml] [--listen 127.0.0.1:50051]
//           [--host-devices N] [--memory-limit 8GiB] [--log-level info]
//           [--metrics-listen 127.0.0.1:9100] [--port-file PATH]
//           [--session-ttl 60s] [--max-sessions N] [--session-max-bytes SIZE]
//           [--session-max-tensors N] [--max-message-bytes SIZE]
//           [--max-inline-bytes SIZE] [--max-tensor-bytes SIZE]
//
// `tensord --help` lists every flag with its default.
// Settings: defaults < config file < TENSORD_* env < flags (server/config.h).
// SIGINT/SIGTERM shut it down cleanly: health turns NOT_SERVING, new RPCs
// are refused, in-flight ones get a grace period, then every tensor is
// freed. SIGHUP re-reads log_level from the config file. Under systemd
// (Type=notify) it reports READY=1 once serving and STOPPING=1 on shutdown.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/collectives/host_communicator.h"
#include "core/runtime/device_registry.h"
#include "server/byte_size.h"
#include "server/config.h"
#include "server/program_flags.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

#include <systemd/sd-daemon.h>

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
ABSL_FLAG(bool, allow_tf32, false,
          "float32 matmuls and cuDNN convolutions on GPUs may use TF32 "
          "tensor cores (10-bit mantissa inputs, float32 accumulation), as "
          "PyTorch's torch.backends.cuda.matmul.allow_tf32 and "
          "torch.backends.cudnn.allow_tf32; off: exact float32");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound port to this file once serving");
ABSL_FLAG(int, shutdown_grace_ms, 5000,
          "how long in-flight RPCs may run after SIGINT/SIGTERM");
ABSL_FLAG(std::string, metrics_listen, "",
          "serve Prometheus metrics on http://HOST:PORT/metrics (off if empty)");
ABSL_FLAG(std::string, auth_token_file, "",
          "file of bearer tokens, one per line; every TensorService RPC must "
          "send 'authorization: Bearer <token>'");
ABSL_FLAG(std::string, tls_cert, "", "TLS certificate chain (PEM)");
ABSL_FLAG(std::string, tls_key, "", "TLS private key (PEM)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "CA bundle (PEM): require client certificates it signed (mTLS)");
ABSL_FLAG(bool, insecure, false,
          "allow listening beyond loopback with neither a token nor TLS");
ABSL_FLAG(absl::Duration, session_ttl, absl::Seconds(60),
          "session lease, e.g. 60s or 500ms: a session no call names for this "
          "long is closed and its tensors freed (0 = never); clients may ask "
          "for another within 100ms..24h");
ABSL_FLAG(int64_t, max_sessions, 0,
          "most sessions open at once; OpenSession past it is "
          "RESOURCE_EXHAUSTED (0 = unlimited)");
ABSL_FLAG(std::string, session_max_bytes, "",
          "most bytes one session's tensors may hold, e.g. 4GiB "
          "(empty or 0 = unlimited)");
ABSL_FLAG(int64_t, session_max_tensors, 0,
          "most tensors one session may hold (0 = unlimited)");
ABSL_FLAG(absl::Duration, collective_timeout, absl::Seconds(30),
          "how long one collective waits for every member of its group "
          "before it fails UNAVAILABLE (and breaks the group), e.g. 30s");
ABSL_FLAG(int64_t, session_max_groups, 16,
          "most process groups (CreateGroup) one session may hold at once");
ABSL_FLAG(std::string, max_message_bytes, "64MiB",
          "largest gRPC message received or sent");
ABSL_FLAG(std::string, max_inline_bytes, "4MiB",
          "largest inline data Create accepts; larger tensors must use Upload "
          "(0 = up to the message limit)");
ABSL_FLAG(std::string, max_tensor_bytes, "",
          "largest single tensor, e.g. 16GiB (empty or 0 = no limit beyond "
          "the device budget)");
ABSL_FLAG(bool, kernel_libraries, true,
          "run conv2d and max/avg pooling on the vendor libraries where they "
          "compute them as PyTorch does: oneDNN on the CPU device (float32), "
          "cuDNN on GPUs (when built with them); false: tensord's own "
          "kernels only");
ABSL_FLAG(int, blas_threads, 0,
          "threads of the CPU device's BLAS; 0 = the CPUs this process may "
          "use (its affinity, capped by a container's CPU quota)");
ABSL_FLAG(std::string, node_name, "",
          "this server's name among many (default: the host name; in "
          "Kubernetes the pod name): device names qualified by it "
          "(node/cuda:0) name this server's devices; 1-63 letters, digits, "
          "'-', '_', '.'");
ABSL_FLAG(std::string, node_token_file, "",
          "moves between nodes: a file of \"NODE-NAME TOKEN\" lines, this "
          "node's and its peers' (node-to-node calls authenticate with "
          "them, never with client tokens); empty = moves between nodes off");
ABSL_FLAG(std::string, peers, "",
          "the nodes this one may pull tensors from: NAME=HOST:PORT,...");
ABSL_FLAG(std::string, peer_address_pattern, "",
          "a peer's address from its name, e.g. "
          "\"{node}.tensord-peers:50051\" (a StatefulSet's headless Service)");
ABSL_FLAG(std::string, config, "",
          "TOML config file (default /etc/tensord/tensord.toml if present); "
          "keys are these flags' names, e.g. listen = \"0.0.0.0:50051\"");

constexpr char kDefaultConfigPath[] = "/etc/tensord/tensord.toml";

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "tensord: %s\n", message.c_str());
  return 2;
}

// Applies a log level name; false if it is not one.
// The host part of a host:port address.
std::string MetricsHost(const std::string& listen) {
  return listen.substr(0, listen.rfind(':'));
}

bool SetLogLevel(const std::string& name) {
  const spdlog::level::level_enum level = spdlog::level::from_str(name);
  if (level == spdlog::level::off && name != "off") return false;
  spdlog::set_level(level);
  return true;
}

// SIGHUP: re-read the config file and apply its log level.
void Reload(const std::string& config_path) {
  if (config_path.empty()) {
    spdlog::info("SIGHUP: no config file to re-read");
    return;
  }
  auto values = tensord::server::ReadConfigFile(config_path);
  if (!values.ok()) {
    spdlog::error("SIGHUP: {}", std::string(values.status().message()));
    return;
  }
  auto it = values->find("log_level");
  const std::string level = it == values->end() ? "info" : it->second;
  if (!SetLogLevel(level)) {
    spdlog::error("SIGHUP: invalid log_level '{}' in {}", level, config_path);
    return;
  }
  spdlog::info("SIGHUP: log level is now {}", level);
}

}  // namespace

int main(int argc, char** argv) {
  // First: it may start the program over with a better BLAS kernel.
  tensord::core::PrepareHostCompute(argv);
  // absl::Mutex's lock-order graph (on in Debian's build) costs every lock
  // a hash-table update; it is a debugging aid, kept on in the tests.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Layers below the command line: the config file, then the environment.
  // A failure is reported after the command line is parsed, so that --help
  // works even with a broken config file.
  const std::string config_path =
      tensord::server::FindConfigPath(argc, argv, kDefaultConfigPath);
  absl::Status layered = absl::OkStatus();
  if (!config_path.empty()) {
    absl::StatusOr<std::map<std::string, std::string>> values =
        tensord::server::ReadConfigFile(config_path);
    layered = values.ok() ? tensord::server::ApplyToFlags(*values, config_path)
                          : values.status();
  }
  if (layered.ok()) {
    layered = tensord::server::ApplyToFlags(tensord::server::ReadEnvironment(),
                                            "environment");
  }
  tensord::server::ParseProgramFlags(
      argc, argv,
      {.name = "tensord",
       .summary =
           "the tensor daemon. It owns this machine's devices (the CPU, and "
           "its GPUs in a CUDA build) and serves tensors on them to clients "
           "over gRPC: they create, compute on and fetch tensors by handle, "
           "through the C++ client library or tensorctl. Settings come from "
           "the defaults below < a TOML config file (--config, else "
           "/etc/tensord/tensord.toml if present) < TENSORD_<FLAG> "
           "environment variables < these flags; config keys and variables "
           "spell names with _ (host_devices, TENSORD_HOST_DEVICES).",
       .example = "tensord --listen 127.0.0.1:50051 --host-devices 2 "
                  "--memory-limit 8GiB --session-ttl 5m",
       .flag_files = {__FILE__}});
  if (!layered.ok()) return Fail(std::string(layered.message()));

  const std::string level_name = absl::GetFlag(FLAGS_log_level);
  if (!SetLogLevel(level_name)) {
    return Fail("invalid --log-level '" + level_name +
                "': expected trace, debug, info, warn, error or off");
  }
  if (!config_path.empty()) spdlog::info("config file: {}", config_path);
  spdlog::info("{}", tensord::core::ConfigureHostCompute(
                        absl::GetFlag(FLAGS_blas_threads)));

  tensord::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.runtime.host_devices = absl::GetFlag(FLAGS_host_devices);
  options.runtime.kernel_libraries = absl::GetFlag(FLAGS_kernel_libraries);
  options.runtime.node_name = absl::GetFlag(FLAGS_node_name);
  options.node_token_file = absl::GetFlag(FLAGS_node_token_file);
  options.peers = absl::GetFlag(FLAGS_peers);
  options.peer_address_pattern = absl::GetFlag(FLAGS_peer_address_pattern);
  if (options.runtime.node_name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0 &&
        tensord::core::CheckNodeName(host).ok()) {
      options.runtime.node_name = host;
    }
  }
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.insecure = absl::GetFlag(FLAGS_insecure);
  const absl::Duration ttl = absl::GetFlag(FLAGS_session_ttl);
  if (ttl < absl::ZeroDuration()) {
    return Fail("--session-ttl must be >= 0");
  }
  options.runtime.session_ttl = absl::ToChronoMilliseconds(ttl);
  if (absl::GetFlag(FLAGS_max_sessions) < 0 ||
      absl::GetFlag(FLAGS_session_max_tensors) < 0) {
    return Fail("--max-sessions and --session-max-tensors must be >= 0");
  }
  options.runtime.max_sessions =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_sessions));
  const absl::Duration collective_timeout =
      absl::GetFlag(FLAGS_collective_timeout);
  if (collective_timeout <= absl::ZeroDuration()) {
    return Fail("--collective-timeout must be > 0");
  }
  options.runtime.collective_timeout =
      absl::ToChronoMilliseconds(collective_timeout);
  if (absl::GetFlag(FLAGS_session_max_groups) < 1) {
    return Fail("--session-max-groups must be >= 1");
  }
  options.runtime.session_max_groups =
      static_cast<size_t>(absl::GetFlag(FLAGS_session_max_groups));
  options.runtime.session_max_tensors =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_session_max_tensors));
  uint64_t max_message_bytes = 0;
  for (auto [name, flag, target] :
       {std::tuple{"--session-max-bytes", absl::GetFlag(FLAGS_session_max_bytes),
                   &options.runtime.session_max_bytes},
        std::tuple{"--max-message-bytes", absl::GetFlag(FLAGS_max_message_bytes),
                   &max_message_bytes},
        std::tuple{"--max-inline-bytes", absl::GetFlag(FLAGS_max_inline_bytes),
                   &options.max_inline_bytes},
        std::tuple{"--max-tensor-bytes", absl::GetFlag(FLAGS_max_tensor_bytes),
                   &options.runtime.max_tensor_bytes}}) {
    if (flag.empty()) continue;
    absl::StatusOr<uint64_t> bytes = tensord::server::ParseByteSize(flag);
    if (!bytes.ok()) {
      return Fail(std::string(name) + ": " +
                  std::string(bytes.status().message()));
    }
    *target = *bytes;
  }
  if (max_message_bytes == 0 || max_message_bytes > (uint64_t{1} << 31) - 1) {
    return Fail("--max-message-bytes must be between 1 byte and 2GiB - 1");
  }
  options.max_message_bytes = static_cast<int>(max_message_bytes);
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
      tensord::core::DiscoverAccelerators(
          {.allow_tf32 = absl::GetFlag(FLAGS_allow_tf32),
           .kernel_libraries = absl::GetFlag(FLAGS_kernel_libraries)});
  spdlog::info("{}", accelerators.summary);
  options.runtime.extra_devices = std::move(accelerators.devices);

  // Block the shutdown signals before gRPC starts its threads, so that only
  // the sigwait() below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = tensord::server::Server::Start(std::move(options));
  if (!server.ok()) return Fail(std::string(server.status().message()));

  std::vector<std::string> names;
  for (const auto& d : (*server)->runtime().ListDevices()) {
    const std::string& library = d.properties.kernel_library;
    names.push_back(d.name + " (" + d.properties.model +
                    (library.empty() ? "" : "; " + library) + ")");
  }
  spdlog::info("collectives: {}",
               tensord::core::HostCollectivesBuilt()
                   ? "host devices on " + tensord::core::HostCollectivesEngine()
                   : std::string("off (built without Gloo)"));
  spdlog::info("security: bearer tokens {}, TLS {}",
               absl::GetFlag(FLAGS_auth_token_file).empty() ? "off" : "required",
               absl::GetFlag(FLAGS_tls_cert).empty()
                   ? "off"
                   : (absl::GetFlag(FLAGS_tls_client_ca).empty()
                          ? "on"
                          : "on, client certificates required"));
  spdlog::info("tensord {} (node {}) serving on {} with devices: {}",
               TENSORD_VERSION,
               (*server)->runtime().node_name().empty()
                   ? "unnamed"
                   : (*server)->runtime().node_name(),
               (*server)->address(), absl::StrJoin(names, ", "));
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if ((*server)->metrics_port() != 0) {
    spdlog::info("metrics on http://{}:{}/metrics",
                 MetricsHost(absl::GetFlag(FLAGS_metrics_listen)),
                 (*server)->metrics_port());
  }
  if (!port_file.empty()) {
    std::ofstream(port_file) << (*server)->port() << "\n";
  }
  sd_notify(0, "READY=1");

  int signal_number = 0;
  while (true) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) break;
    Reload(config_path);
  }
  sd_notify(0, "STOPPING=1");
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
