// tensorctl: inspect and check a running tensord from the command line.
//
//   tensorctl [connection flags] [--json] <command>
//
// Commands: devices, sessions, tensors, stats, health, version (see kUsage).
// Exit status: 0 on success, 1 when the server call fails (or health is not
// SERVING), 2 on bad usage.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tensord/channel.h"
#include "tensord/client.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace {

constexpr std::string_view kUsage =
    R"(usage: tensorctl [--address HOST:PORT] [--token-file F] [--tls-ca F]
                 [--tls-cert F --tls-key F] [--json] <command>

commands:
  devices            the server's devices: memory held by tensord and its
                     budget, free and total memory, live tensors, and compute
                     capability and multiprocessors for GPUs (like nvidia-smi)
  sessions           open sessions: id prefix, client, tensors, bytes, age
  tensors            every live tensor of every session (find leaks)
  stats              server-wide totals: sessions, tensors, bytes, uptime
  health [--service NAME]
                     gRPC health check; exit 0 only when SERVING
  version            the versions of tensorctl and of the server
  help               this text

--json prints machine-readable output. The connection comes from the flags,
else TENSORD_ADDRESS, TENSORD_TOKEN_FILE, TENSORD_TLS_CA, TENSORD_CLIENT_CERT,
TENSORD_CLIENT_KEY; the default address is 127.0.0.1:50051.
)";

struct Args {
  tensord::ConnectOptions connect = tensord::ConnectOptions::FromEnv();
  std::string command;
  std::string service;  // health
  bool json = false;
};

// Returns false (after printing why) when the command line is malformed.
bool ParseArgs(int argc, char** argv, Args& args) {
  const std::map<std::string_view, std::string*> valued = {
      {"--address", &args.connect.address},
      {"--token-file", &args.connect.token_file},
      {"--tls-ca", &args.connect.tls_ca_file},
      {"--tls-cert", &args.connect.tls_cert_file},
      {"--tls-key", &args.connect.tls_key_file},
      {"--tls-server-name", &args.connect.tls_server_name},
      {"--service", &args.service}};
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); arg.starts_with("--") && eq != arg.npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    if (arg == "-a") arg = "--address";
    if (auto it = valued.find(arg); it != valued.end()) {
      if (!has_value) {
        if (i + 1 == argc) {
          std::cerr << "tensorctl: " << arg << " needs a value\n";
          return false;
        }
        value = argv[++i];
      }
      *it->second = std::string(value);
    } else if (arg == "--json") {
      args.json = true;
    } else if (arg == "--tls") {
      args.connect.tls = true;
    } else if (arg == "-h" || arg == "--help") {
      args.command = "help";
    } else if (args.command.empty() && !arg.starts_with("-")) {
      args.command = std::string(arg);
    } else {
      std::cerr << "tensorctl: unexpected argument '" << argv[i] << "'\n";
      return false;
    }
  }
  if (args.command.empty()) {
    std::cerr << "tensorctl: no command given\n";
    return false;
  }
  return true;
}

// "0 B", "512 B", "1.5 KiB", "79.6 GiB".
std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B",   "KiB", "MiB",
                                           "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    value /= 1024;
    ++unit;
  }
  char buffer[32];
  if (unit == 0) {
    std::snprintf(buffer, sizeof(buffer), "%llu B",
                  static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.1f %s", value, kUnits[unit]);
  }
  return buffer;
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void PrintDevicesJson(const std::string& address, const std::string& version,
                      const std::vector<tensord::DeviceInfo>& devices) {
  std::ostringstream os;
  os << "{\n  \"address\": " << JsonString(address)
     << ",\n  \"server_version\": " << JsonString(version)
     << ",\n  \"devices\": [";
  for (size_t i = 0; i < devices.size(); ++i) {
    const tensord::DeviceInfo& d = devices[i];
    os << (i ? "," : "") << "\n    {\"name\": " << JsonString(d.name)
       << ", \"kind\": " << JsonString(d.kind)
       << ", \"model\": " << JsonString(d.model)
       << ", \"total_memory\": " << d.total_memory
       << ", \"free_memory\": " << d.free_memory
       << ", \"held_memory\": " << d.held_memory
       << ", \"memory_budget\": " << d.memory_budget
       << ", \"live_tensors\": " << d.live_tensors;
    if (d.kind == "cuda") {
      os << ", \"compute_capability\": \"" << d.compute_capability_major << "."
         << d.compute_capability_minor
         << "\", \"multiprocessor_count\": " << d.multiprocessor_count;
    }
    os << "}";
  }
  os << (devices.empty() ? "" : "\n  ") << "]\n}\n";
  std::cout << os.str();
}

// Prints `rows` (the first is the header) as a box table; columns from
// `first_numeric` on are right-aligned.
void PrintTable(const std::vector<std::vector<std::string>>& rows,
                size_t first_numeric) {
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  std::string rule = "+";
  for (size_t w : widths) rule += std::string(w + 2, '-') + "+";
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line = "|";
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(widths[c] - row[c].size(), ' ');
      // Appended piece by piece: GCC 12 warns (-Wrestrict, a false
      // positive) on "literal" + std::string&&.
      line += ' ';
      line += c >= first_numeric ? pad + row[c] : row[c] + pad;
      line += " |";
    }
    std::cout << line << "\n";
  };
  std::cout << rule << "\n";
  print_row(rows[0]);
  std::cout << std::string(rule.size(), '=') << "\n";
  for (size_t r = 1; r < rows.size(); ++r) print_row(rows[r]);
  std::cout << rule << "\n";
}

// An nvidia-smi-like box table, one row per device.
void PrintDevicesTable(const std::string& address, const std::string& version,
                       const std::vector<tensord::DeviceInfo>& devices) {
  std::vector<std::vector<std::string>> rows = {
      {"Device", "Kind", "Model", "Held / Budget", "Free / Total", "Tensors",
       "CC", "SMs"}};
  for (const tensord::DeviceInfo& d : devices) {
    const bool gpu = d.kind == "cuda";
    rows.push_back(
        {d.name, d.kind, d.model,
         HumanBytes(d.held_memory) + " / " + HumanBytes(d.memory_budget),
         HumanBytes(d.free_memory) + " / " + HumanBytes(d.total_memory),
         std::to_string(d.live_tensors),
         gpu ? std::to_string(d.compute_capability_major) + "." +
                   std::to_string(d.compute_capability_minor)
             : "-",
         gpu ? std::to_string(d.multiprocessor_count) : "-"});
  }
  std::cout << "tensord " << version << " at " << address << ", "
            << devices.size() << (devices.size() == 1 ? " device" : " devices")
            << "\n";
  PrintTable(rows, 5);
}

// Throws tensord::Error for a failed call, like the client library.
void Check(const grpc::Status& status) {
  if (!status.ok()) {
    throw tensord::Error(status.error_code(), status.error_message());
  }
}

std::string Age(int64_t ms) {
  char buffer[32];
  if (ms < 60'000) {
    std::snprintf(buffer, sizeof buffer, "%.1fs", ms / 1000.0);
  } else if (ms < 3'600'000) {
    std::snprintf(buffer, sizeof buffer, "%.1fm", ms / 60'000.0);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.1fh", ms / 3'600'000.0);
  }
  return buffer;
}

// Every page of a paginated list RPC, merged into one reply (repeated
// fields concatenate; next_page_token ends empty).
template <typename Request, typename Response>
Response AllPages(tensord::v1::TensorService::Stub& stub,
                  grpc::Status (tensord::v1::TensorService::Stub::*rpc)(
                      grpc::ClientContext*, const Request&, Response*)) {
  Response all;
  Request request;
  do {
    grpc::ClientContext ctx;
    Response page;
    Check((stub.*rpc)(&ctx, request, &page));
    request.set_page_token(page.next_page_token());
    all.MergeFrom(page);
  } while (!request.page_token().empty());
  return all;
}

int Sessions(tensord::v1::TensorService::Stub& stub, bool json) {
  const auto resp =
      AllPages(stub, &tensord::v1::TensorService::Stub::ListSessions);
  if (json) {
    std::cout << "{\"sessions\": [";
    for (int i = 0; i < resp.sessions_size(); ++i) {
      const auto& s = resp.sessions(i);
      std::cout << (i ? ", " : "") << "{\"id_prefix\": " << JsonString(s.id_prefix())
                << ", \"client_name\": " << JsonString(s.client_name())
                << ", \"tensors\": " << s.tensors() << ", \"bytes\": " << s.bytes()
                << ", \"age_ms\": " << s.age_ms() << "}";
    }
    std::cout << "]}\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"Session", "Client", "Tensors", "Bytes", "Age"}};
  for (const auto& s : resp.sessions()) {
    rows.push_back({s.id_prefix() + "...", s.client_name(),
                    std::to_string(s.tensors()), HumanBytes(s.bytes()),
                    Age(s.age_ms())});
  }
  std::cout << resp.sessions_size() << " open session(s)\n";
  PrintTable(rows, 2);
  return 0;
}

std::string ShapeText(const tensord::v1::TensorInfo& t) {
  std::string out = "[";
  for (int i = 0; i < t.shape_size(); ++i) {
    out += (i ? ", " : "") + std::to_string(t.shape(i));
  }
  return out + "]";
}

int Tensors(tensord::v1::TensorService::Stub& stub, bool json) {
  const auto resp =
      AllPages(stub, &tensord::v1::TensorService::Stub::ListAllTensors);
  if (json) {
    std::cout << "{\"tensors\": [";
    for (int i = 0; i < resp.tensors_size(); ++i) {
      const auto& e = resp.tensors(i);
      const auto& t = e.tensor();
      std::cout << (i ? ", " : "") << "{\"session_id_prefix\": "
                << JsonString(e.session_id_prefix()) << ", \"handle\": " << t.handle()
                << ", \"device\": " << JsonString(t.device()) << ", \"dtype\": "
                << JsonString(tensord::v1::DType_Name(t.dtype()))
                << ", \"shape\": " << ShapeText(t) << ", \"nbytes\": " << t.nbytes()
                << ", \"tag\": " << JsonString(t.tag()) << ", \"age_ms\": " << t.age_ms()
                << ", \"idle_ms\": " << t.idle_ms() << "}";
    }
    std::cout << "]}\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"Session", "Handle", "Device", "DType", "Shape", "Tag", "Bytes", "Age", "Idle"}};
  for (const auto& e : resp.tensors()) {
    const auto& t = e.tensor();
    rows.push_back({e.session_id_prefix() + "...", std::to_string(t.handle()),
                    t.device(), tensord::v1::DType_Name(t.dtype()), ShapeText(t),
                    t.tag(), HumanBytes(t.nbytes()), Age(t.age_ms()),
                    Age(t.idle_ms())});
  }
  std::cout << resp.tensors_size() << " live tensor(s)\n";
  PrintTable(rows, 6);
  return 0;
}

int Stats(tensord::v1::TensorService::Stub& stub, bool json) {
  grpc::ClientContext ctx;
  tensord::v1::GetStatsResponse resp;
  Check(stub.GetStats(&ctx, {}, &resp));
  if (json) {
    std::cout << "{\"server_version\": " << JsonString(resp.server_version())
              << ", \"uptime_ms\": " << resp.uptime_ms()
              << ", \"sessions\": " << resp.sessions()
              << ", \"tensors\": " << resp.tensors()
              << ", \"held_bytes\": " << resp.held_bytes() << ", \"devices\": [";
    for (int i = 0; i < resp.devices_size(); ++i) {
      const auto& d = resp.devices(i);
      std::cout << (i ? ", " : "") << "{\"name\": " << JsonString(d.name())
                << ", \"live_tensors\": " << d.live_tensors()
                << ", \"held_memory\": " << d.held_memory()
                << ", \"memory_budget\": " << d.memory_budget() << "}";
    }
    std::cout << "]}\n";
    return 0;
  }
  std::cout << "tensord " << resp.server_version() << ", up "
            << Age(resp.uptime_ms()) << "\n"
            << "sessions: " << resp.sessions() << "\n"
            << "tensors:  " << resp.tensors() << " holding "
            << HumanBytes(resp.held_bytes()) << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"Device", "Tensors", "Held", "Budget"}};
  for (const auto& d : resp.devices()) {
    rows.push_back({d.name(), std::to_string(d.live_tensors()),
                    HumanBytes(d.held_memory()), HumanBytes(d.memory_budget())});
  }
  PrintTable(rows, 1);
  return 0;
}

int Health(const std::shared_ptr<grpc::Channel>& channel,
           const std::string& service, bool json) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  Check(stub->Check(&ctx, req, &resp));
  const std::string status =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
  if (json) {
    std::cout << "{\"service\": " << JsonString(service)
              << ", \"status\": " << JsonString(status) << "}\n";
  } else {
    std::cout << status << "\n";
  }
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

int Run(const Args& args) {
  static const std::vector<std::string> kCommands = {
      "devices", "sessions", "tensors", "stats", "health", "version"};
  if (args.command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (std::find(kCommands.begin(), kCommands.end(), args.command) ==
      kCommands.end()) {
    std::cerr << "tensorctl: unknown command '" << args.command << "'\n\n"
              << kUsage;
    return 2;
  }
  const std::string address =
      tensord::client::ResolveAddress(args.connect.address);
  if (args.command == "version") {
    std::cout << "tensorctl " << tensord::client::Version() << std::endl;
  }
  try {
    std::shared_ptr<grpc::Channel> channel = tensord::MakeChannel(args.connect);
    if (args.command == "health") return Health(channel, args.service, args.json);
    auto stub = tensord::v1::TensorService::NewStub(channel);
    if (args.command == "sessions") return Sessions(*stub, args.json);
    if (args.command == "tensors") return Tensors(*stub, args.json);
    if (args.command == "stats") return Stats(*stub, args.json);
    tensord::Client client(channel);
    const std::string version = client.server_version();
    if (args.command == "version") {
      std::cout << "tensord   " << version << " at " << address << "\n";
      return 0;
    }
    const std::vector<tensord::DeviceInfo> devices = client.devices();
    if (args.json) {
      PrintDevicesJson(address, version, devices);
    } else {
      PrintDevicesTable(address, version, devices);
    }
    return 0;
  } catch (const tensord::Error& e) {
    if (e.code() == tensord::StatusCode::UNAVAILABLE) {
      std::cerr << "tensorctl: cannot reach tensord at " << address << ": "
                << e.message() << "\n";
    } else {
      std::cerr << "tensorctl: " << e.what() << "\n";
    }
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, args)) {
    std::cerr << "\n" << kUsage;
    return 2;
  }
  return Run(args);
}
