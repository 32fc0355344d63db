// batch_norm and layer_norm on stored tensors (the op table's EmitNorm and
// NormGrads): planned by core/planner/norm_plan.h and run as reductions and
// elementwise kernels every device has. Each step's result lives only as
// long as a later step reads it.
//
// Forward: mean and biased var over the statistic's dims (x's own, or
// batch_norm's running ones outside training), invstd = 1 / sqrt(var +
// eps), y = (x - mean) * invstd (* weight) (+ bias). In training,
// batch_norm's running statistics become (1 - momentum) * running +
// momentum * statistic (the variance unbiased: times count / (count - 1)),
// in place. The node saves the inputs and invstd.
//
// Backward (PyTorch's native_batch_norm_backward / layer_norm_backward),
// with xhat = (x - mean) * invstd and gh = g * weight: with x's own
// statistics gx = invstd * (gh - mean(gh) - xhat * mean(gh * xhat)) over
// the statistic's dims, else gx = gh * invstd; gweight = sum(g * xhat) and
// gbias = sum(g), summed down to the parameter's shape.
#include "core/executor/executor.h"
#include "core/autograd/grad_math.h"
#include "core/planner/norm_plan.h"

namespace tensord::core {
absl::StatusOr<Executor::Value> Executor::EmitNorm(const OpSpec& op,
                                                   std::span<const Value> in,
                                                   const OpResult& result) {
  const NormPlan& plan = result.Plan<NormPlan>();
  const NormLayout& layout = plan.layout;
  const NormSlots& slots = plan.slots;
  GradMath m(*this, in[0].tensor->device);
  // running = (1 - momentum) * running + momentum * stat, in place.
  auto update_running = [&](const TensorPtr& running,
                            const TensorPtr& stat) -> absl::Status {
    const double momentum = op.norm.momentum;
    ASSIGN_OR_RETURN(TensorPtr flat, m.Reshape(stat, running->shape));
    ASSIGN_OR_RETURN(TensorPtr kept,
                     m.Num(BinaryOp::kMul, running, 1.0 - momentum));
    ASSIGN_OR_RETURN(TensorPtr added, m.Num(BinaryOp::kMul, flat, momentum));
    RETURN_IF_ERROR(BinaryOut(BinaryOp::kAdd, *kept, added.get(), nullptr,
                              false, running.get())
                        .status());
    running->buffer->BumpVersion();
    return absl::OkStatus();
  };
  auto param = [&](int slot) -> absl::StatusOr<TensorPtr> {
    return m.Reshape(in[slot].tensor, layout.param);
  };
  const TensorPtr& x = in[0].tensor;
  TensorPtr centred, invstd;
  if (plan.batch_stats) {
    ASSIGN_OR_RETURN(TensorPtr mean, m.Mean(x, layout.dims));
    ASSIGN_OR_RETURN(centred, m.Bin(BinaryOp::kSub, x, mean));
    ASSIGN_OR_RETURN(TensorPtr square, m.Bin(BinaryOp::kMul, centred, centred));
    ASSIGN_OR_RETURN(TensorPtr var, m.Mean(square, layout.dims));
    square.reset();
    ASSIGN_OR_RETURN(invstd, m.InvSqrt(var, op.norm.eps));
    if (plan.update_running) {
      const double unbias = static_cast<double>(layout.count) /
                            static_cast<double>(layout.count - 1);
      ASSIGN_OR_RETURN(TensorPtr unbiased, m.Num(BinaryOp::kMul, var, unbias));
      RETURN_IF_ERROR(update_running(in[slots.running_mean].tensor, mean));
      RETURN_IF_ERROR(update_running(in[slots.running_var].tensor, unbiased));
    }
  } else {
    ASSIGN_OR_RETURN(TensorPtr mean, param(slots.running_mean));
    ASSIGN_OR_RETURN(TensorPtr var, param(slots.running_var));
    ASSIGN_OR_RETURN(centred, m.Bin(BinaryOp::kSub, x, mean));
    ASSIGN_OR_RETURN(invstd, m.InvSqrt(var, op.norm.eps));
  }
  // The last step writes the result; the ones before it are temporaries.
  std::vector<std::pair<BinaryOp, TensorPtr>> steps = {
      {BinaryOp::kMul, invstd}};
  if (slots.weight >= 0) {
    ASSIGN_OR_RETURN(TensorPtr w, param(slots.weight));
    steps.emplace_back(BinaryOp::kMul, std::move(w));
  }
  if (slots.bias >= 0) {
    ASSIGN_OR_RETURN(TensorPtr b, param(slots.bias));
    steps.emplace_back(BinaryOp::kAdd, std::move(b));
  }
  TensorPtr y = std::move(centred);
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    ASSIGN_OR_RETURN(y, m.Bin(steps[i].first, y, steps[i].second));
  }
  return Made(op, in, result,
              BinaryOut(steps.back().first, *y, steps.back().second.get(),
                        nullptr, false, nullptr),
              std::move(invstd));
}

absl::Status Executor::GradMath::NormGrads(const GradNode& node,
                                           const TensorPtr& g, Grads& out) {
  const NormArgs& args = node.op.norm;
  const NormSlots slots = NormSlotsOf(args);
  const TensorPtr& x = node.inputs[0].data;
  const TensorPtr& invstd = node.extra.data;
  if (invstd == nullptr) {
    return absl::InternalError("autograd: a norm node saved no invstd");
  }
  const NormLayout layout = NormLayoutOf(args, x->shape);
  const bool batch_stats = args.kind == NormKind::kLayerNorm || node.op.train;
  auto param = [&](int slot) {
    return Reshape(node.inputs[slot].data, layout.param);
  };
  TensorPtr mean;
  if (batch_stats) {
    ASSIGN_OR_RETURN(mean, Mean(x, layout.dims));
  } else {
    ASSIGN_OR_RETURN(mean, param(slots.running_mean));
  }
  ASSIGN_OR_RETURN(TensorPtr centred, Bin(BinaryOp::kSub, x, mean));
  ASSIGN_OR_RETURN(TensorPtr xhat, Bin(BinaryOp::kMul, centred, invstd));
  centred.reset();
  if (node.next[0].active()) {
    TensorPtr gh = g;
    if (slots.weight >= 0) {
      ASSIGN_OR_RETURN(TensorPtr w, param(slots.weight));
      ASSIGN_OR_RETURN(gh, Bin(BinaryOp::kMul, g, w));
    }
    if (batch_stats) {
      ASSIGN_OR_RETURN(TensorPtr gh_mean, Mean(gh, layout.dims));
      ASSIGN_OR_RETURN(TensorPtr gh_xhat, Bin(BinaryOp::kMul, gh, xhat));
      ASSIGN_OR_RETURN(TensorPtr proj, Mean(gh_xhat, layout.dims));
      gh_xhat.reset();
      ASSIGN_OR_RETURN(TensorPtr along, Bin(BinaryOp::kMul, xhat, proj));
      ASSIGN_OR_RETURN(gh, Bin(BinaryOp::kSub, gh, gh_mean));
      ASSIGN_OR_RETURN(gh, Bin(BinaryOp::kSub, gh, along));
    }
    ASSIGN_OR_RETURN(out[0], Bin(BinaryOp::kMul, gh, invstd));
  }
  if (slots.weight >= 0 && node.next[slots.weight].active()) {
    ASSIGN_OR_RETURN(TensorPtr gw, Bin(BinaryOp::kMul, g, xhat));
    ASSIGN_OR_RETURN(gw, SumTo(gw, layout.param));
    ASSIGN_OR_RETURN(out[slots.weight],
                     Reshape(gw, node.inputs[slots.weight].data->shape));
  }
  if (slots.bias >= 0 && node.next[slots.bias].active()) {
    ASSIGN_OR_RETURN(TensorPtr gb, SumTo(g, layout.param));
    ASSIGN_OR_RETURN(out[slots.bias],
                     Reshape(gb, node.inputs[slots.bias].data->shape));
  }
  return absl::OkStatus();
}

}  // namespace tensord::core
