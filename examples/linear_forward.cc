// nn.Linear's forward pass on a remote device (seed 003, d2l "Builders'
// Guide"): net = nn.Linear(20, 256) applied to X = torch.rand(2, 20) on
// try_gpu(), checked against the same product computed on the host.
//
//   linear_forward [--address HOST:PORT] [--in 20] [--out 256] [--batch 2]
#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

#include "example_flags.h"
#include "tensord/client.h"

int main(int argc, char** argv) {
  int64_t in = 20, out = 256, batch = 2;
  const std::string address =
      tensord::examples::ParseArgs(argc, argv,
                                   {{"--in", &in, "in_features"},
                                    {"--out", &out, "out_features"},
                                    {"--batch", &batch, "rows of X"}});
  try {
    tensord::Client client(address);
    const tensord::Device dev = client.try_gpu();
    // nn.Linear's parameters live on the device, like net.to(try_gpu()).
    auto weight = client.randn({out, in}, dev, 7);
    auto bias = client.randn({out}, dev, 8);
    auto x = client.rand({batch, in}, dev, 9);
    auto y = tensord::linear(x, weight, bias);
    std::cout << "net = Linear(in_features=" << in << ", out_features=" << out
              << ") on " << dev << "\n";
    std::cout << "X: [" << batch << ", " << in << "] -> net(X): ["
              << y.shape()[0] << ", " << y.shape()[1] << "] on " << y.device()
              << "\n";
    // The host reference: y = x W^T + b.
    const std::vector<float> w = weight.fetch<float>();
    const std::vector<float> b = bias.fetch<float>();
    const std::vector<float> xs = x.fetch<float>();
    const std::vector<float> ys = y.fetch<float>();
    double max_err = 0;
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t j = 0; j < out; ++j) {
        double ref = b[j];
        for (int64_t k = 0; k < in; ++k) ref += xs[i * in + k] * w[j * in + k];
        max_err = std::max(max_err, std::abs(ref - ys[i * out + j]));
      }
    }
    std::cout << "net(X)[0, :4] = " << y.narrow(0, 0, 1).narrow(1, 0, 4)
              << "\n";
    std::cout << "max |net(X) - host X W^T + b| = " << max_err << "\n";
    const bool ok = max_err < 1e-4;
    std::cout << (ok ? "forward pass matches the host computation\n"
                     : "MISMATCH against the host computation\n");
    return ok ? 0 : 1;
  } catch (const tensord::Error& e) {
    std::cerr << "linear_forward: " << e.what() << "\n";
    return 1;
  }
}
