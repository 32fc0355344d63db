// tensorctl: inspect a running tensord from the command line.
//
//   tensorctl [--address HOST:PORT] devices [--json]
//   tensorctl [--address HOST:PORT] version
//
// Exit status: 0 on success, 1 when the server call fails, 2 on bad usage.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tensord/client.h"

namespace {

constexpr std::string_view kUsage =
    R"(usage: tensorctl [--address HOST:PORT] <command> [options]

commands:
  devices [--json]   the server's devices: memory held by tensord and its
                     budget, free and total memory, live tensors, and compute
                     capability and multiprocessors for GPUs (like nvidia-smi)
  version            the versions of tensorctl and of the server
  help               this text

The server address is --address, else $TENSORD_ADDRESS, else 127.0.0.1:50051.
)";

struct Args {
  std::string address;  // "" = tensord::client::ResolveAddress()
  std::string command;
  bool json = false;
};

// Returns false (after printing why) when the command line is malformed.
bool ParseArgs(int argc, char** argv, Args& args) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--address" || arg == "-a") {
      if (i + 1 == argc) {
        std::cerr << "tensorctl: " << arg << " needs a value\n";
        return false;
      }
      args.address = argv[++i];
    } else if (arg.starts_with("--address=")) {
      args.address = arg.substr(std::string_view("--address=").size());
    } else if (arg == "--json" && args.command == "devices") {
      args.json = true;
    } else if (arg == "-h" || arg == "--help") {
      args.command = "help";
    } else if (args.command.empty() && !arg.starts_with("-")) {
      args.command = arg;
    } else {
      std::cerr << "tensorctl: unexpected argument '" << arg << "'\n";
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
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  // Numbers right-aligned, text left-aligned.
  auto right_aligned = [](size_t c) { return c >= 5; };
  std::string rule = "+";
  for (size_t w : widths) rule += std::string(w + 2, '-') + "+";
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line = "|";
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(widths[c] - row[c].size(), ' ');
      line += " " + (right_aligned(c) ? pad + row[c] : row[c] + pad) + " |";
    }
    std::cout << line << "\n";
  };
  std::cout << "tensord " << version << " at " << address << ", "
            << devices.size() << (devices.size() == 1 ? " device" : " devices")
            << "\n"
            << rule << "\n";
  print_row(rows[0]);
  std::cout << std::string(rule.size(), '=') << "\n";
  for (size_t r = 1; r < rows.size(); ++r) print_row(rows[r]);
  std::cout << rule << "\n";
}

int Run(const Args& args) {
  if (args.command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (args.command != "devices" && args.command != "version") {
    std::cerr << "tensorctl: unknown command '" << args.command << "'\n\n"
              << kUsage;
    return 2;
  }
  const std::string address = tensord::client::ResolveAddress(args.address);
  if (args.command == "version") {
    std::cout << "tensorctl " << tensord::client::Version() << std::endl;
  }
  try {
    tensord::Client client(address);
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
