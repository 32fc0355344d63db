// The optimizers' client side (tensord/optim.h): the step's message; the
// update itself is the server's (core/executor/optimizer_ops.cc).
#include "tensord/optim.h"

#include "client/grpc_ops.h"

namespace tensord::client::optim {

using internal::HandleOperand;

Optimizer::Optimizer(std::vector<Tensor> params, int kind, int states)
    : params_(std::move(params)), kind_(kind), states_(states) {}

void Optimizer::Message(void* out) {
  v1::Op& op = *static_cast<v1::Op*>(out);
  if (state_.empty() && states_ > 0) {
    for (int j = 0; j < states_; ++j) {
      for (const Tensor& p : params_) state_.push_back(internal::ZerosLike(p));
    }
  }
  ++steps_;
  v1::OptimizerStepArgs* args = op.mutable_optimizer_step();
  args->set_kind(static_cast<v1::OptimizerKind>(kind_));
  for (const Tensor& p : params_) *args->add_params() = HandleOperand(p);
  for (const Tensor& s : state_) *args->add_state() = HandleOperand(s);
  args->set_step(steps_);
  Fill(args);
}

void Optimizer::step() {
  if (params_.empty()) return;
  v1::Op op;
  Message(&op);
  internal::RunOnTarget(params_[0], std::move(op));
}

void Optimizer::step(Batch& batch) {
  if (params_.empty()) return;
  v1::Op op;
  Message(&op);
  const Batch::Value v = batch.Record(&op);
  batch.state_->optimizer_steps.emplace_back(v.index(), this);
}

double Optimizer::learning_rate() const {
  v1::OptimizerStepArgs args;
  Fill(&args);
  return args.lr();
}

void Optimizer::zero_grad() { client::zero_grad(params_); }

void Optimizer::zero_grad(Batch& batch) {
  if (params_.empty()) return;
  std::vector<Batch::Input> all(params_.begin(), params_.end());
  batch.zero_grad(all);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), v1::SGD, options.momentum != 0 ? 1 : 0),
      options_(options) {}

void SGD::Fill(void* out) const {
  auto* args = static_cast<v1::OptimizerStepArgs*>(out);
  args->set_lr(options_.lr);
  args->set_momentum(options_.momentum);
  args->set_dampening(options_.dampening);
  args->set_weight_decay(options_.weight_decay);
  args->set_nesterov(options_.nesterov);
  args->set_maximize(options_.maximize);
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::move(params), options, v1::ADAM) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, int kind)
    : Optimizer(std::move(params), kind, 2), options_(options) {}

void Adam::Fill(void* out) const {
  auto* args = static_cast<v1::OptimizerStepArgs*>(out);
  args->set_lr(options_.lr);
  args->set_beta1(options_.beta1);
  args->set_beta2(options_.beta2);
  args->set_eps(options_.eps);
  args->set_weight_decay(options_.weight_decay);
  args->set_maximize(options_.maximize);
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::move(params), options, v1::ADAMW) {}

}  // namespace tensord::client::optim
