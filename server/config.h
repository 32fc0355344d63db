// Layered daemon configuration: defaults < TOML config file < TENSORD_*
// environment variables < command-line flags.
//
// The daemon's settings are absl flags; this module sets them from the
// config file and the environment before absl::ParseCommandLine() applies
// the command line on top. Keys are the flag names (`listen`,
// `host_devices`, ...); env names are TENSORD_ + the key in upper case.
// Errors name the file, line and key. Thread-safety: call from main only.
#ifndef TENSORD_SERVER_CONFIG_H_
#define TENSORD_SERVER_CONFIG_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tensord::server {

// The flags that may come from the config file or the environment.
const std::vector<std::string>& ConfigurableFlags();

// Reads a TOML file into key -> value text. INVALID_ARGUMENT with
// "path:line:column: ..." for syntax errors, unknown keys, or values that
// are not strings, integers, floats or booleans.
absl::StatusOr<std::map<std::string, std::string>> ReadConfigFile(
    const std::string& path);

// Sets each (flag, value) through the flag's own parser. INVALID_ARGUMENT
// naming `source` (a file or "environment") and the flag on a bad value.
absl::Status ApplyToFlags(const std::map<std::string, std::string>& values,
                          std::string_view source);

// TENSORD_<FLAG> variables that are set.
std::map<std::string, std::string> ReadEnvironment();

// Returns argv with dashes in flag names turned into underscores
// ("--host-devices=2" -> "--host_devices=2"), so both spellings work; values
// and positional arguments are left alone.
std::vector<std::string> NormalizeFlagSpelling(int argc, char** argv);

// Finds the config path: --config=PATH / --config PATH in argv, else
// $TENSORD_CONFIG, else `default_path` if that file exists, else "".
std::string FindConfigPath(int argc, char** argv,
                           const std::string& default_path);

}  // namespace tensord::server

#endif  // TENSORD_SERVER_CONFIG_H_
