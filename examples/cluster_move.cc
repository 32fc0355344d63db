// Many servers as one (docs/many-nodes.md): lists every node's devices,
// makes a tensor on the first node, moves it to the last node server to
// server, checks every value arrived, computes there, and shows PyTorch's
// same-device error for an op across nodes. The nodes need --node-name,
// --node-token-file and their peers' addresses.
//
//   cluster_move [--token-file FILE] [--size N] ADDRESS ADDRESS...
#include <cstdint>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "tensord/cluster.h"

int main(int argc, char** argv) {
  tensord::ClusterOptions options;
  std::vector<std::string> addresses;
  int64_t size = 1 << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--token-file" && i + 1 < argc) {
      options.connect.token_file = argv[++i];
    } else if (arg == "--size" && i + 1 < argc) {
      size = std::stoll(argv[++i]);
    } else if (!arg.starts_with("--")) {
      addresses.emplace_back(arg);
    } else {
      std::cerr << "usage: cluster_move [--token-file FILE] [--size N] "
                   "ADDRESS ADDRESS...\n";
      return 2;
    }
  }
  try {
    tensord::Cluster cluster(addresses, options);
    const std::vector<std::string> nodes = cluster.nodes();
    if (nodes.size() < 2) {
      std::cerr << "cluster_move: one node answered; a move needs two\n";
      return 1;
    }
    for (const tensord::DeviceInfo& d : cluster.devices()) {
      std::cout << "device " << d.name << "\n";
    }
    const std::string from = nodes.front() + "/cpu";
    const std::string to = nodes.back() + "/cpu";
    std::vector<float> values(size);
    for (int64_t i = 0; i < size; ++i) values[i] = 0.25f * static_cast<float>(i);
    tensord::Tensor x = cluster.tensor(values, {size}, from);
    tensord::Tensor y = x.to(to);
    const bool same = y.fetch<float>() == values;
    std::cout << "moved " << x.nbytes() << " bytes from " << x.device()
              << " to " << y.device() << ": "
              << (same ? "every value arrived" : "VALUES DIFFER") << "\n";
    tensord::Tensor z = y * 2.0;
    std::cout << "y * 2 ran on " << z.device() << "\n";
    try {
      (void)(x + y);
      std::cout << "x + y: no error\n";
      return 1;
    } catch (const tensord::Error& e) {
      std::cout << "x + y: " << e.message() << "\n";
    }
    return same ? 0 : 1;
  } catch (const tensord::Error& e) {
    std::cerr << "cluster_move: " << e.what() << "\n";
    return 1;
  }
}
