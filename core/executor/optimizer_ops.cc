// The optimizers' steps (OpSpec::Kind::kOptimizerStep): torch.optim's SGD,
// Adam and AdamW update rules in PyTorch 1.13's order of operations (its
// single-tensor code path), each a few in-place kernels per parameter on
// the parameter's device. A parameter whose grad is None is skipped.
#include <cmath>

#include "core/executor/executor.h"
#include "core/autograd/grad_math.h"

namespace tensord::core {

absl::Status Executor::OptimizerStep(const OpSpec& op,
                                     std::span<const Value> in) {
  const OptimizerArgs& a = op.optimizer;
  const size_t k = static_cast<size_t>(OptimizerStateCount(a));
  const size_t n = in.size() / (k + 1);
  for (size_t i = 0; i < n; ++i) {
    const StoredTensor& param = *in[i].tensor;
    TensorPtr grad;
    {
      absl::MutexLock lock(&param.autograd->mu);
      grad = param.autograd->grad;
    }
    if (grad == nullptr) continue;
    GradMath m(*this, param.device);
    // target (op)= b, or (op)= s: written into target's memory.
    auto update = [&](const StoredTensor& target, BinaryOp bop,
                      const TensorPtr& b, double s) -> absl::Status {
      const Scalar number = Scalar::Float(s);
      RETURN_IF_ERROR(BinaryOut(bop, target, b.get(),
                                b == nullptr ? &number : nullptr, false,
                                &target)
                          .status());
      target.buffer->BumpVersion();
      return absl::OkStatus();
    };
    const TensorPtr p = in[i].tensor;
    TensorPtr d = grad;
    if (a.maximize) {
      ASSIGN_OR_RETURN(d, m.Num(BinaryOp::kMul, d, -1));
    }
    if (a.kind == OptimizerKind::kSgd) {
      if (a.weight_decay != 0) {  // d + wd * p
        ASSIGN_OR_RETURN(TensorPtr decay,
                         m.Num(BinaryOp::kMul, p, a.weight_decay));
        ASSIGN_OR_RETURN(d, m.Bin(BinaryOp::kAdd, d, decay));
      }
      if (a.momentum != 0) {
        const TensorPtr& buf = in[n + i].tensor;
        if (a.step == 1) {  // buf = d
          RETURN_IF_ERROR(
              m.device().Launch({CastArgs{}, {RefOf(*d)}, RefOf(*buf)}));
          buf->buffer->BumpVersion();
        } else {  // buf = momentum * buf + (1 - dampening) * d
          RETURN_IF_ERROR(update(*buf, BinaryOp::kMul, nullptr, a.momentum));
          ASSIGN_OR_RETURN(TensorPtr part,
                           m.Num(BinaryOp::kMul, d, 1 - a.dampening));
          RETURN_IF_ERROR(update(*buf, BinaryOp::kAdd, part, 0));
        }
        if (a.nesterov) {  // d + momentum * buf
          ASSIGN_OR_RETURN(TensorPtr ahead,
                           m.Num(BinaryOp::kMul, buf, a.momentum));
          ASSIGN_OR_RETURN(d, m.Bin(BinaryOp::kAdd, d, ahead));
        } else {
          d = buf;
        }
      }
      ASSIGN_OR_RETURN(TensorPtr delta, m.Num(BinaryOp::kMul, d, -a.lr));
      RETURN_IF_ERROR(update(*p, BinaryOp::kAdd, delta, 0));
      continue;
    }
    // Adam / AdamW.
    const TensorPtr& exp_avg = in[n + i].tensor;
    const TensorPtr& exp_avg_sq = in[2 * n + i].tensor;
    if (a.kind == OptimizerKind::kAdamW) {  // p *= 1 - lr * wd
      RETURN_IF_ERROR(
          update(*p, BinaryOp::kMul, nullptr, 1 - a.lr * a.weight_decay));
    } else if (a.weight_decay != 0) {  // d + wd * p
      ASSIGN_OR_RETURN(TensorPtr decay,
                       m.Num(BinaryOp::kMul, p, a.weight_decay));
      ASSIGN_OR_RETURN(d, m.Bin(BinaryOp::kAdd, d, decay));
    }
    // exp_avg = beta1 exp_avg + (1 - beta1) d
    RETURN_IF_ERROR(update(*exp_avg, BinaryOp::kMul, nullptr, a.beta1));
    ASSIGN_OR_RETURN(TensorPtr first, m.Num(BinaryOp::kMul, d, 1 - a.beta1));
    RETURN_IF_ERROR(update(*exp_avg, BinaryOp::kAdd, first, 0));
    // exp_avg_sq = beta2 exp_avg_sq + (1 - beta2) d d
    RETURN_IF_ERROR(update(*exp_avg_sq, BinaryOp::kMul, nullptr, a.beta2));
    ASSIGN_OR_RETURN(TensorPtr scaled, m.Num(BinaryOp::kMul, d, 1 - a.beta2));
    ASSIGN_OR_RETURN(TensorPtr second, m.Bin(BinaryOp::kMul, scaled, d));
    RETURN_IF_ERROR(update(*exp_avg_sq, BinaryOp::kAdd, second, 0));
    // p -= lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) /
    //      sqrt(1 - beta2^t) + eps)
    const double t = static_cast<double>(a.step);
    const double step_size = a.lr / (1 - std::pow(a.beta1, t));
    const double correction2_sqrt = std::sqrt(1 - std::pow(a.beta2, t));
    ASSIGN_OR_RETURN(TensorPtr denom, m.Un(UnaryOp::kSqrt, exp_avg_sq));
    ASSIGN_OR_RETURN(denom, m.Num(BinaryOp::kDiv, denom, correction2_sqrt));
    ASSIGN_OR_RETURN(denom, m.Num(BinaryOp::kAdd, denom, a.eps));
    ASSIGN_OR_RETURN(TensorPtr ratio, m.Bin(BinaryOp::kDiv, exp_avg, denom));
    ASSIGN_OR_RETURN(TensorPtr delta, m.Num(BinaryOp::kMul, ratio, -step_size));
    RETURN_IF_ERROR(update(*p, BinaryOp::kAdd, delta, 0));
  }
  return absl::OkStatus();
}

}  // namespace tensord::core
