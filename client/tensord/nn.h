// torch.nn from C++: modules whose parameters are tensors on the server
// that require grad, so the seed's network reads as it does in PyTorch:
//
//   class Net : public tensord::nn::Module {
//    public:
//     explicit Net(tensord::Client& c) {
//       conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(c, 3, 6,
//       5));
//       ...
//     }
//     tensord::Tensor forward(const tensord::Tensor& x) override { ... }
//   };
//   Net net(client);
//   net.to(device);
//   tensord::optim::SGD optimizer(net.parameters(), {.lr = 0.001, .momentum =
//   0.9});
//
// Parameters are named as PyTorch names them ("conv1.weight", "fc3.bias";
// Sequential's children "0", "1", ...), so a state_dict saved here as
// safetensors (save/load) loads into PyTorch's module and back. Parameters
// are initialised as PyTorch's default (uniform in +-1/sqrt(fan_in)) from
// seeded draws: nn::manual_seed makes a network reproducible.
//
// Thread-safety: a module is used from one thread at a time.
#ifndef TENSORD_CLIENT_TENSORD_NN_H_
#define TENSORD_CLIENT_TENSORD_NN_H_

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensord/tensor.h"

namespace tensord::client {
class Client;
}  // namespace tensord::client

namespace tensord::client {
namespace internal {
// The first of `n` consecutive seeds of this thread's nn sequence (the one
// nn::manual_seed sets), taken: a compiled step's dropouts take the seeds
// their eager step would have (tensord/program.h).
uint64_t TakeSeeds(uint64_t n);
}  // namespace internal
}  // namespace tensord::client

namespace tensord::client::nn {

// Seeds the draws that initialise the parameters of modules made after it
// on this thread (each module draws the next seeds).
void manual_seed(uint64_t seed);

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;  // parameters are registered by address
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Every parameter with its dotted name, this module's first, then each
  // child's in registration order.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // module.to(device): each parameter moved there, a leaf that requires
  // grad (as PyTorch's module.to keeps parameters leaves), and each buffer.
  Module& to(const Device& device);
  // train(true) / eval(): the mode of this module and every child (dropout
  // drops only in training).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // The state_dict (parameters and buffers) as a safetensors file
  // (little-endian, PyTorch's key names), and back: load replaces each
  // parameter and buffer by the file's tensor of its name, on the parameter's
  // device. INVALID_ARGUMENT naming the key for a missing tensor or one of
  // another shape or dtype; UNKNOWN for I/O failures or a file that is not
  // safetensors.
  void save(const std::filesystem::path& path) const;
  void load(const std::filesystem::path& path);

 protected:
  // Registers `*t` (a member of the derived module) as parameter `name`
  // and makes it require grad.
  void register_parameter(std::string name, Tensor* t);
  // Registers `*t` as buffer `name`: state the module keeps that is not
  // trained (BatchNorm2d's running statistics), saved, loaded and moved.
  void register_buffer(std::string name, Tensor* t);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    children_.emplace_back(std::move(name), m);
    return m;
  }
  // Named children, for Sequential.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children()
      const {
    return children_;
  }

 private:
  struct State {
    std::string name;
    Tensor* tensor;
    bool parameter;  // else a buffer
  };
  // PyTorch's state_dict order: each module's parameters, its buffers, then
  // its children's.
  void CollectInto(const std::string& prefix, std::vector<State>* out) const;
  std::vector<State> state_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// y = x W^T + b; weight [out, in], bias [out].
class Linear : public Module {
 public:
  Linear(const Client& client, int64_t in_features, int64_t out_features,
         bool bias = true, const Device& device = "cpu");
  Tensor forward(const Tensor& x) override;
  Tensor weight;
  std::optional<Tensor> bias;
};

// nn.Conv2d: weight [out, in / groups, kh, kw], bias [out].
class Conv2d : public Module {
 public:
  Conv2d(const Client& client, int64_t in_channels, int64_t out_channels,
         std::vector<int64_t> kernel_size, Conv2dOptions options = {},
         bool bias = true, const Device& device = "cpu");
  Conv2d(const Client& client, int64_t in_channels, int64_t out_channels,
         int64_t kernel_size)
      : Conv2d(client, in_channels, out_channels,
               std::vector<int64_t>{kernel_size}, Conv2dOptions{}) {}
  Tensor forward(const Tensor& x) override;
  Tensor weight;
  std::optional<Tensor> bias;

 private:
  Conv2dOptions options_;
};

class MaxPool2d : public Module {
 public:
  MaxPool2d(std::vector<int64_t> kernel_size, Pool2dOptions options = {});
  MaxPool2d(int64_t kernel_size, int64_t stride)
      : MaxPool2d({kernel_size}, Pool2dOptions{{stride}, {}, {}, true}) {}
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<int64_t> kernel_size_;
  Pool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  AvgPool2d(std::vector<int64_t> kernel_size, Pool2dOptions options = {});
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<int64_t> kernel_size_;
  Pool2dOptions options_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x.relu(); }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x.sigmoid(); }
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x.tanh(); }
};
// torch.nn.LeakyReLU, ELU and Hardtanh, with torch's defaults.
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01)
      : negative_slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override {
    return x.leaky_relu(negative_slope_);
  }

 private:
  double negative_slope_;
};
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha_(alpha) {}
  Tensor forward(const Tensor& x) override { return x.elu(alpha_); }

 private:
  double alpha_;
};
class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0)
      : min_val_(min_val), max_val_(max_val) {}
  Tensor forward(const Tensor& x) override {
    return x.hardtanh(min_val_, max_val_);
  }

 private:
  double min_val_, max_val_;
};

// torch.flatten(x, start_dim) for start_dim 0 or 1 (the batch kept).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1) : start_dim_(start_dim) {}
  Tensor forward(const Tensor& x) override;

 private:
  int64_t start_dim_;
};

// Zeroes each element with probability p in training (a seed per call,
// drawn as the parameters' are); the identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5) : p_(p) {}
  Tensor forward(const Tensor& x) override;

 private:
  double p_;
};

// nn.BatchNorm2d over x [N, C, H, W]: weight (ones) and bias (zeros) [C]
// when affine; running_mean (zeros), running_var (ones) and
// num_batches_tracked (int64 0) when tracking, which training updates
// (batch_norm's rule) and eval uses. INVALID_ARGUMENT (ValueError)
// "expected 4D input (got 3D input)" for another rank.
class BatchNorm2d : public Module {
 public:
  BatchNorm2d(const Client& client, int64_t num_features, double eps = 1e-5,
              double momentum = 0.1, bool affine = true,
              bool track_running_stats = true, const Device& device = "cpu");
  Tensor forward(const Tensor& x) override;
  std::optional<Tensor> weight, bias;
  std::optional<Tensor> running_mean, running_var, num_batches_tracked;

 private:
  double eps_, momentum_;
};

// nn.LayerNorm over x's last dims (normalized_shape): weight (ones) and
// bias (zeros) of that shape when elementwise_affine.
class LayerNorm : public Module {
 public:
  LayerNorm(const Client& client, std::vector<int64_t> normalized_shape,
            double eps = 1e-5, bool elementwise_affine = true,
            const Device& device = "cpu");
  Tensor forward(const Tensor& x) override;
  std::optional<Tensor> weight, bias;

 private:
  std::vector<int64_t> normalized_shape_;
  double eps_;
};

// The modules in order; net[0] is the first. Children are named "0", "1".
class Sequential : public Module {
 public:
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  Tensor forward(const Tensor& x) override;
  Module& operator[](size_t i) const { return *children().at(i).second; }
  size_t size() const { return children().size(); }
};

}  // namespace tensord::client::nn

namespace tensord {
namespace nn = client::nn;
}  // namespace tensord

#endif  // TENSORD_CLIENT_TENSORD_NN_H_
