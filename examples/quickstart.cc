// DESIGN.md's client example, compiled and run as written, with one change:
// DESIGN.md creates `y` on "cuda:0", which a server without a GPU answers
// with NOT_FOUND. Creating it on `dev` (cuda:0 when the server has a GPU,
// cpu otherwise) keeps the example's shape and runs on every server.
//
//   quickstart [--address HOST:PORT]
#include <cstdint>
#include <iostream>
#include <vector>

#include "example_flags.h"
#include "tensord/client.h"

int main(int argc, char** argv) {
  const std::string address = tensord::examples::AddressFromArgs(argc, argv);
  try {
    tensord::Client client(address);             // or TENSORD_ADDRESS
    auto dev = client.try_gpu(0);                // cuda:0 if present, else cpu
    auto x = client.tensor<int64_t>({1, 2, 3});  // on cpu, like torch.tensor
    auto y = client.tensor<int64_t>({5, 8, 1}, dev);  // created directly on dev
    auto z = x.to(dev) * y;  // runs on the server, result stays there
    std::cout << z << "\n";  // tensor([ 5, 16,  3], device='cuda:0') on a GPU
    std::vector<int64_t> host = z.fetch<int64_t>();  // the one host copy

    std::cout << "fetched to host:";
    for (int64_t v : host) std::cout << " " << v;
    std::cout << "\n";
    return 0;
  } catch (const tensord::Error& e) {
    std::cerr << "quickstart: " << e.what() << " (server " << address << ")\n";
    return 1;
  }
}
