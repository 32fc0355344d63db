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
//
// batch_norm in training runs as one kernel call per pass instead where
// the device selects its library kernel for it (BatchNormArgs in
// core/base/device.h; the CPU's direct kernel): the statistics, then y;
// backward the parameters' sums, then x's gradient. The node then saves the
// [3, c] statistics (mean, var, invstd) in place of invstd.
#include "core/executor/executor.h"
#include "core/autograd/grad_math.h"
#include "core/planner/norm_plan.h"

namespace tensord::core {
namespace {

// batch_norm over x as BatchNormArgs' [n, c, plane], for `pass`.
BatchNormArgs BatchNormArgsOf(const NormArgs& args, const NormSlots& slots,
                              const Shape& x, BatchNormPass pass) {
  BatchNormArgs a;
  a.n = x.dim(0);
  a.c = x.dim(1);
  a.plane = a.n * a.c == 0 ? 0 : x.NumElements() / (a.n * a.c);
  a.eps = args.eps;
  a.weight = slots.weight >= 0;
  a.bias = slots.bias >= 0;
  a.pass = pass;
  return a;
}

// Whether batch_norm in training over x runs as the device's one-call
// kernel (a non-empty x the device selects it for).
bool FusedBatchNorm(const NormArgs& args, bool training, const NormSlots& slots,
                    const StoredTensor& x) {
  return args.kind == NormKind::kBatchNorm && training &&
         x.shape.NumElements() > 0 &&
         x.device->Select(
             BatchNormArgsOf(args, slots, x.shape, BatchNormPass::kStatistics),
             x.dtype) == Device::Implementation::kLibrary;
}

Shape StatsShape(int64_t rows, int64_t c) {
  const int64_t dims[2] = {rows, c};
  return *Shape::Make(std::span<const int64_t>(dims, 2));
}

}  // namespace
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
  if (plan.batch_stats && FusedBatchNorm(op.norm, true, slots, *x)) {
    BatchNormArgs bn =
        BatchNormArgsOf(op.norm, slots, x->shape, BatchNormPass::kStatistics);
    const TensorRef xr = RefOf(*x);
    ASSIGN_OR_RETURN(
        TensorPtr stats,
        m.Kernel(bn, {xr, xr, xr, xr, xr}, plan.dtype, StatsShape(3, bn.c)));
    if (plan.update_running) {
      const double unbias = static_cast<double>(layout.count) /
                            static_cast<double>(layout.count - 1);
      ASSIGN_OR_RETURN(TensorPtr mean, m.Row(stats, 3, 0));
      ASSIGN_OR_RETURN(TensorPtr var, m.Row(stats, 3, 1));
      ASSIGN_OR_RETURN(TensorPtr unbiased, m.Num(BinaryOp::kMul, var, unbias));
      RETURN_IF_ERROR(update_running(in[slots.running_mean].tensor, mean));
      RETURN_IF_ERROR(update_running(in[slots.running_var].tensor, unbiased));
    }
    bn.pass = BatchNormPass::kNormalize;
    auto operand = [&](int slot) {
      return slot >= 0 ? RefOf(*in[slot].tensor) : xr;
    };
    absl::StatusOr<Output> y = AllocateOutput(m.slot(), plan.dtype, plan.out);
    if (y.ok()) {
      const absl::Status ran = m.device().Launch(
          {bn,
           {xr, RefOf(*stats), operand(slots.weight), operand(slots.bias), xr},
           y->ref()});
      if (!ran.ok()) y = ran;
    }
    return Made(op, in, result, std::move(y), std::move(stats));
  }
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
  TensorPtr invstd = node.extra.data;
  if (invstd == nullptr) {
    return absl::InternalError("autograd: a norm node saved no invstd");
  }
  const NormLayout layout = NormLayoutOf(args, x->shape);
  const bool batch_stats = args.kind == NormKind::kLayerNorm || node.op.train;
  auto param = [&](int slot) {
    return Reshape(node.inputs[slot].data, layout.param);
  };
  // A forward that ran as one-call kernels saved its [3, c] statistics.
  const bool fused = args.kind == NormKind::kBatchNorm && node.op.train &&
                     x->shape.rank() >= 2 &&
                     invstd->shape == StatsShape(3, x->shape.dim(1));
  if (fused && g->shape == x->shape && g->dtype == x->dtype) {
    const TensorPtr& stats = invstd;
    BatchNormArgs bn =
        BatchNormArgsOf(args, slots, x->shape, BatchNormPass::kParamGrads);
    const TensorRef xr = RefOf(*x), gr = RefOf(*g);
    ASSIGN_OR_RETURN(TensorPtr sums, Kernel(bn, {xr, gr, RefOf(*stats), xr, xr},
                                            x->dtype, StatsShape(2, bn.c)));
    if (node.next[0].active()) {
      bn.pass = BatchNormPass::kInputGrad;
      const TensorRef w =
          slots.weight >= 0 ? RefOf(*node.inputs[slots.weight].data) : xr;
      ASSIGN_OR_RETURN(
          out[0], Kernel(bn, {xr, gr, RefOf(*stats), RefOf(*sums), w}, x->dtype,
                         x->shape));
    }
    if (slots.weight >= 0 && node.next[slots.weight].active()) {
      ASSIGN_OR_RETURN(TensorPtr gw, Row(sums, 2, 0));
      ASSIGN_OR_RETURN(out[slots.weight],
                       Reshape(gw, node.inputs[slots.weight].data->shape));
    }
    if (slots.bias >= 0 && node.next[slots.bias].active()) {
      ASSIGN_OR_RETURN(TensorPtr gb, Row(sums, 2, 1));
      ASSIGN_OR_RETURN(out[slots.bias],
                       Reshape(gb, node.inputs[slots.bias].data->shape));
    }
    return absl::OkStatus();
  }
  if (fused) {  // a gradient of another form: the composed formulas
    ASSIGN_OR_RETURN(TensorPtr row, Row(invstd, 3, 2));
    ASSIGN_OR_RETURN(invstd, Reshape(row, layout.stats));
  }
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
