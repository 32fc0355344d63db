// Command-line handling shared by the examples: `--address HOST:PORT` (or
// `--address=HOST:PORT`); without it the client uses $TENSORD_ADDRESS, else
// 127.0.0.1:50051.
#ifndef TENSORD_EXAMPLES_EXAMPLE_FLAGS_H_
#define TENSORD_EXAMPLES_EXAMPLE_FLAGS_H_

#include <cstdlib>
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

}  // namespace tensord::examples

#endif  // TENSORD_EXAMPLES_EXAMPLE_FLAGS_H_
