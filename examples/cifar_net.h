// Seed 001's network ("Training a Classifier", PyTorch's CIFAR-10
// tutorial) as a tensord::nn module, line for line: the example
// train_cifar_net trains it, bench/train_bench times its training step.
#ifndef TENSORD_EXAMPLES_CIFAR_NET_H_
#define TENSORD_EXAMPLES_CIFAR_NET_H_

#include <memory>
#include <vector>

#include "tensord/client.h"

namespace tensord::examples {

class Net : public nn::Module {
 public:
  explicit Net(const Client& c) {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(c, 3, 6, 5));
    pool = register_module("pool", std::make_shared<nn::MaxPool2d>(2, 2));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(c, 6, 16, 5));
    fc1 = register_module("fc1",
                          std::make_shared<nn::Linear>(c, 16 * 5 * 5, 120));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(c, 120, 84));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(c, 84, 10));
  }

  Tensor forward(const Tensor& input) override {
    auto x = (*pool)((*conv1)(input).relu());
    x = (*pool)((*conv2)(x).relu());
    x = flatten(x, 1);  // flatten all dimensions except batch
    x = (*fc1)(x).relu();
    x = (*fc2)(x).relu();
    return (*fc3)(x);
  }

  // forward()'s ops recorded into `b` on the same parameters (a step the
  // server plans once when the batch compiles: train_bench's compiled
  // row, train_cifar_net --compile).
  Batch::Value forward(Batch& b, Batch::Input input) {
    const std::vector<Tensor> p = parameters();  // registration order
    auto x = b.max_pool2d(b.relu(b.conv2d(input, p[0], p[1])), {2, 2});
    x = b.max_pool2d(b.relu(b.conv2d(x, p[2], p[3])), {2, 2});
    x = b.reshape(x, {-1, 16 * 5 * 5});  // flatten all dimensions but batch
    x = b.relu(b.linear(x, p[4], p[5]));
    x = b.relu(b.linear(x, p[6], p[7]));
    return b.linear(x, p[8], p[9]);
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::MaxPool2d> pool;
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

}  // namespace tensord::examples

#endif  // TENSORD_EXAMPLES_CIFAR_NET_H_
