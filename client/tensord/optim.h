// torch.optim from C++: SGD, Adam and AdamW whose update runs in the server
// (tensord.proto's OptimizerStepArgs), fused over all parameters, with the
// state (momentum buffers, Adam's moments) kept in tensors of the session
// beside the parameters. Reads like the seed:
//
//   tensord::optim::SGD optimizer(net.parameters(),
//                                 {.lr = 0.001, .momentum = 0.9});
//   optimizer.zero_grad();
//   loss.backward();
//   optimizer.step();
//
// step() and zero_grad() are one request each (on the command stream when
// the session pipelines); step(batch) and zero_grad(batch) record them into
// a Batch, so a whole training step is one Execute. The state is made on
// the first step, as zeros beside each parameter.
//
// Thread-safety: one optimizer per thread (as torch.optim's).
#ifndef TENSORD_CLIENT_TENSORD_OPTIM_H_
#define TENSORD_CLIENT_TENSORD_OPTIM_H_

#include <cstdint>
#include <vector>

#include "tensord/batch.h"
#include "tensord/tensor.h"

namespace tensord::client::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // AdamW's default is 1e-2
  bool maximize = false;
};

// What SGD, Adam and AdamW share: the parameters, their state, the steps.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // optimizer.step(): each parameter updated from its grad (skipped while
  // None). Throws the server's error (INVALID_ARGUMENT with PyTorch's
  // message for a bad learning rate, betas, ...).
  void step();
  void step(Batch& batch);
  // optimizer.zero_grad(): every parameter's grad set to None.
  void zero_grad();
  void zero_grad(Batch& batch);
  const std::vector<Tensor>& parameters() const { return params_; }
  int64_t steps() const { return steps_; }
  // The learning rate its next step uses (its options').
  double learning_rate() const;

 protected:
  // kind: 1 SGD, 2 Adam, 3 AdamW (tensord.v1.OptimizerKind).
  Optimizer(std::vector<Tensor> params, int kind, int states);
  // The options of `kind` into the wire message `args` (a
  // tensord.v1.OptimizerStepArgs).
  virtual void Fill(void* args) const = 0;

 private:
  friend class client::Program;  // counts the runs of a compiled step
  friend class client::Batch;    // a compiled step counts when it runs
  // The step's message, making the state on the first step.
  void Message(void* op);
  std::vector<Tensor> params_;
  std::vector<Tensor> state_;
  int kind_;
  int states_;
  int64_t steps_ = 0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  const SGDOptions& options() const { return options_; }

 private:
  void Fill(void* args) const override;
  SGDOptions options_;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::vector<Tensor> params, AdamOptions options, int kind);

 private:
  void Fill(void* args) const override;
  AdamOptions options_;
};

// Adam with decoupled weight decay (torch.optim.AdamW).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params,
        AdamOptions options = {.weight_decay = 1e-2});
};

}  // namespace tensord::client::optim

namespace tensord {
namespace optim = client::optim;
}  // namespace tensord

#endif  // TENSORD_CLIENT_TENSORD_OPTIM_H_
