// Command-line handling shared by the examples: `--address HOST:PORT` (or
// `--address=HOST:PORT`); without it the client uses $TENSORD_ADDRESS, else
// 127.0.0.1:50051.
#ifndef TENSORD_EXAMPLES_EXAMPLE_FLAGS_H_
#define TENSORD_EXAMPLES_EXAMPLE_FLAGS_H_

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <string>
#include <string_view>

#include "tensord/client.h"

namespace tensord::examples {

// The server address the example should dial (never ""). Prints usage and
// exits with status 2 on any other argument.
inline std::string AddressFromArgs(int argc, char** argv) {
  std::string address;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--address" && i + 1 < argc) {
      address = argv[++i];
    } else if (arg.starts_with("--address=")) {
      address = arg.substr(std::string_view("--address=").size());
    } else {
      std::cerr << "usage: " << argv[0] << " [--address HOST:PORT]\n"
                << "The address defaults to $TENSORD_ADDRESS, else "
                   "127.0.0.1:50051.\n";
      std::exit(2);
    }
  }
  return client::ResolveAddress(address);
}

// A numeric flag an example accepts besides --address: `--name N` or
// `--name=N`.
struct IntFlag {
  std::string_view name;  // "--steps"
  int64_t* value;
  std::string_view help;
};

// A text flag: `--name VALUE` or `--name=VALUE`.
struct StringFlag {
  std::string_view name;  // "--data"
  std::string* value;
  std::string_view help;
};

// AddressFromArgs() for examples that also take numeric and text flags.
// Prints usage and exits with status 2 on an unknown argument or a
// malformed number.
inline std::string ParseArgs(int argc, char** argv,
                             std::initializer_list<IntFlag> flags,
                             std::initializer_list<StringFlag> texts = {}) {
  std::string address;
  auto usage = [&] {
    std::cerr << "usage: " << argv[0] << " [--address HOST:PORT]";
    for (const IntFlag& f : flags) std::cerr << " [" << f.name << " N]";
    for (const StringFlag& f : texts) std::cerr << " [" << f.name << " TEXT]";
    std::cerr << "\n";
    for (const IntFlag& f : flags) {
      std::cerr << "  " << f.name << "  " << f.help << " (default "
                << *f.value << ")\n";
    }
    for (const StringFlag& f : texts) {
      std::cerr << "  " << f.name << "  " << f.help << " (default '"
                << *f.value << "')\n";
    }
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    const size_t eq = arg.find('=');
    if (eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[i + 1];
    } else {
      usage();
    }
    if (eq == std::string_view::npos) ++i;
    if (arg == "--address") {
      address = std::string(value);
      continue;
    }
    bool known = false;
    for (const StringFlag& f : texts) {
      if (arg != f.name) continue;
      known = true;
      *f.value = std::string(value);
    }
    for (const IntFlag& f : flags) {
      if (arg != f.name) continue;
      known = true;
      char* end = nullptr;
      const std::string text(value);
      *f.value = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0') usage();
    }
    if (!known) usage();
  }
  return client::ResolveAddress(address);
}

}  // namespace tensord::examples

#endif  // TENSORD_EXAMPLES_EXAMPLE_FLAGS_H_
