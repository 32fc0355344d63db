// What the benchmarks share: the tensord they measure. With `address`
// empty, a server started in this process on a loopback TCP port (held in
// `*server`); otherwise that address. Prints "<program>: <why>" and returns
// "" when the server does not start.
#ifndef TENSORD_BENCH_BENCH_SERVER_H_
#define TENSORD_BENCH_BENCH_SERVER_H_

#include <cstdio>
#include <memory>
#include <string>

#include "server/server.h"

namespace tensord::bench {

inline std::string BenchAddress(const char* program, std::string address,
                                std::unique_ptr<server::Server>* server) {
  if (!address.empty()) return address;
  server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  auto started = server::Server::Start(std::move(options));
  if (!started.ok()) {
    std::fprintf(stderr, "%s: %s\n", program,
                 std::string(started.status().message()).c_str());
    return "";
  }
  *server = std::move(*started);
  return (*server)->address();
}

}  // namespace tensord::bench

#endif  // TENSORD_BENCH_BENCH_SERVER_H_
