#include "server/config.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <toml++/toml.h>

#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensord::server {

const std::vector<std::string>& ConfigurableFlags() {
  static const std::vector<std::string> kFlags = {
      "listen",       "host_devices",      "memory_limit",
      "gpu_memory_limit", "allow_tf32", "log_level",     "metrics_listen",
      "shutdown_grace_ms", "port_file",    "auth_token_file",
      "tls_cert",         "tls_key",       "tls_client_ca",
      "insecure",         "session_ttl",   "max_sessions",
      "session_max_bytes", "session_max_tensors", "max_message_bytes",
      "max_inline_bytes", "max_tensor_bytes", "blas_threads", "kernel_libraries",
      "node_name", "node_token_file", "peers", "peer_address_pattern",
      "collective_timeout", "session_max_groups"};
  return kFlags;
}

namespace {

bool IsConfigurable(const std::string& key) {
  for (const std::string& f : ConfigurableFlags()) {
    if (f == key) return true;
  }
  return false;
}

std::string Where(const std::string& path, const toml::source_region& at) {
  return absl::StrCat(path, ":", at.begin.line, ":", at.begin.column);
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ReadConfigFile(
    const std::string& path) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(path, e.source()), ": ", std::string(e.description())));
  }
  std::map<std::string, std::string> values;
  for (const auto& [key, node] : table) {
    const std::string name(key.str());
    if (!IsConfigurable(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(path, key.source()), ": unknown key '", name,
          "'; known keys: ", absl::StrJoin(ConfigurableFlags(), ", ")));
    }
    std::string text;
    if (auto s = node.value<std::string>(); s && node.is_string()) {
      text = *s;
    } else if (node.is_integer()) {
      text = std::to_string(*node.value<int64_t>());
    } else if (node.is_floating_point()) {
      text = absl::StrCat(*node.value<double>());
    } else if (node.is_boolean()) {
      text = *node.value<bool>() ? "true" : "false";
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(path, node.source()), ": key '", name,
          "' must be a string, integer, float or boolean"));
    }
    values[name] = text;
  }
  return values;
}

absl::Status ApplyToFlags(const std::map<std::string, std::string>& values,
                          std::string_view source) {
  for (const auto& [name, value] : values) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) {
      return absl::InternalError(absl::StrCat("flag '", name, "' is not defined"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(source), ": invalid value '", value,
                       "' for ", name, ": ", error));
    }
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> ReadEnvironment() {
  std::map<std::string, std::string> values;
  for (const std::string& name : ConfigurableFlags()) {
    const std::string env = "TENSORD_" + absl::AsciiStrToUpper(name);
    if (const char* v = std::getenv(env.c_str()); v != nullptr) {
      values[name] = v;
    }
  }
  return values;
}

std::vector<std::string> NormalizeFlagSpelling(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  for (size_t i = 1; i < out.size(); ++i) {
    std::string& arg = out[i];
    if (arg == "--") break;  // everything after is positional
    if (arg.size() < 3 || arg[0] != '-') continue;
    const size_t start = arg[1] == '-' ? 2 : 1;
    const size_t end = std::min(arg.find('='), arg.size());
    for (size_t j = start; j < end; ++j) {
      if (arg[j] == '-') arg[j] = '_';
    }
  }
  return out;
}

std::string FindConfigPath(int argc, char** argv,
                           const std::string& default_path) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    for (const char* prefix : {"--config=", "-config="}) {
      if (arg.rfind(prefix, 0) == 0) return arg.substr(std::string(prefix).size());
    }
    if ((arg == "--config" || arg == "-config") && i + 1 < argc) return argv[i + 1];
  }
  if (const char* env = std::getenv("TENSORD_CONFIG"); env != nullptr && *env) {
    return env;
  }
  std::error_code ec;
  if (!default_path.empty() && std::filesystem::exists(default_path, ec)) {
    return default_path;
  }
  return "";
}

}  // namespace tensord::server
