// d2l's "Neural Networks and GPUs" (seed 003), served remotely: a model's
// parameters on a device, its output computed there, and where
// net[0].weight lives.
//
//   net = nn.Sequential(nn.Linear(3, 1))
//   net = net.to(device=try_gpu())
//   net(X)
//   net[0].weight.data.device
//
//   net_on_gpu [--address HOST:PORT]
#include <iostream>
#include <memory>

#include "example_flags.h"
#include "tensord/client.h"

int main(int argc, char** argv) {
  const std::string address = tensord::examples::AddressFromArgs(argc, argv);
  try {
    tensord::Client client(address);
    const tensord::Device device = client.try_gpu();
    auto X = client.ones({2, 3}, tensord::DType::kFloat32, device);

    tensord::nn::Sequential net(
        {std::make_shared<tensord::nn::Linear>(client, 3, 1)});
    net.to(device);

    // When the input is a tensor on the GPU, the model calculates the
    // result on the same GPU.
    std::cout << "net(X) = " << net(X) << "\n";
    // The model parameters are stored on the same device.
    const auto& first = dynamic_cast<const tensord::nn::Linear&>(net[0]);
    std::cout << "net[0].weight.data.device: " << first.weight.device() << "\n";
    return first.weight.device() == net(X).device() ? 0 : 1;
  } catch (const tensord::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
