#include "core/planner/norm_plan.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/absl_compat.h"
#include "core/base/error_kind.h"
#include "core/base/op_checks.h"
#include "core/base/status.h"

namespace tensord::core {
namespace {

std::string List(std::span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// Shape::Make of dims a plan has already bounded (rank <= kMaxRank).
Shape MakeShape(std::span<const int64_t> dims) {
  return Shape::Make(dims).value();
}

// batch_norm's messages for a per-channel tensor of the wrong size.
absl::Status CheckChannels(const NormSlots& slots,
                           std::span<const OperandDesc> in, int64_t channels) {
  const std::pair<int, const char*> named[] = {
      {slots.running_mean, "running_mean"},
      {slots.running_var, "running_var"},
      {slots.weight, "weight"},
      {slots.bias, "bias"}};
  for (const auto& [slot, name] : named) {
    if (slot < 0) continue;
    const int64_t n = in[slot].shape.NumElements();
    if (n != channels) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " should contain ", channels, " elements not ", n));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLayerShape(const NormArgs& args,
                             std::span<const OperandDesc> in,
                             const NormSlots& slots) {
  const std::vector<int64_t>& norm = args.normalized_shape;
  if (norm.empty()) {
    return absl::InvalidArgumentError(
        "Expected normalized_shape to be at least 1-dimensional, i.e., "
        "containing at least one element, but got normalized_shape = []");
  }
  if (norm.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("normalized_shape has ", norm.size(),
                     " dims; a tensor has at most ", kMaxRank));
  }
  if (slots.running_mean >= 0) {
    return absl::InvalidArgumentError(
        "layer_norm takes no running_mean or running_var");
  }
  const Shape& x = in[0].shape;
  const int lead = x.rank() - static_cast<int>(norm.size());
  bool fits = lead >= 0;
  for (size_t i = 0; fits && i < norm.size(); ++i) {
    fits = x.dim(lead + static_cast<int>(i)) == norm[i];
  }
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Given normalized_shape=", List(norm),
        ", expected input with shape [*, ", absl::StrJoin(norm, ", "),
        "], but got input of size", x.ToString()));
  }
  for (const auto& [slot, name] :
       {std::pair{slots.weight, "weight"}, std::pair{slots.bias, "bias"}}) {
    if (slot < 0) continue;
    const Shape& s = in[slot].shape;
    if (!std::equal(s.dims().begin(), s.dims().end(), norm.begin(),
                    norm.end())) {
      return absl::InvalidArgumentError(
          absl::StrCat("Expected ", name,
                       " to be of same shape as normalized_shape, but "
                       "got ",
                       name, " of shape ", s.ToString(),
                       " and normalized_shape = ", List(norm)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

NormSlots NormSlotsOf(const NormArgs& args) {
  NormSlots s;
  if (args.weight) s.weight = s.count++;
  if (args.bias) s.bias = s.count++;
  if (args.running_stats) {
    s.running_mean = s.count++;
    s.running_var = s.count++;
  }
  return s;
}

NormLayout NormLayoutOf(const NormArgs& args, const Shape& x) {
  NormLayout layout;
  const int rank = x.rank();
  std::vector<int64_t> stats = x.DimsVector(), param(rank, 1);
  if (args.kind == NormKind::kBatchNorm) {
    for (int d = 0; d < rank; ++d) {
      if (d != 1) layout.dims.push_back(d);
    }
    param[1] = x.dim(1);
  } else {
    param = args.normalized_shape;
    for (int d = rank - static_cast<int>(param.size()); d < rank; ++d) {
      layout.dims.push_back(d);
    }
  }
  layout.count = 1;
  for (int64_t d : layout.dims) {
    layout.count *= x.dim(static_cast<int>(d));
    stats[d] = 1;
  }
  layout.stats = MakeShape(stats);
  layout.param = MakeShape(param);
  return layout;
}

absl::StatusOr<NormPlan> PlanNorm(const NormArgs& args, bool training,
                                  std::span<const OperandDesc> in,
                                  const Target& target) {
  CountPlan(Planner::kNorm);
  NormPlan plan;
  plan.slots = NormSlotsOf(args);
  const OperandDesc& x = in[0];
  const bool batch = args.kind == NormKind::kBatchNorm;
  if (batch) {
    RETURN_IF_ERROR(WrapDim(1, x.shape.rank()).status());
    RETURN_IF_ERROR(CheckChannels(plan.slots, in, x.shape.dim(1)));
  } else {
    RETURN_IF_ERROR(CheckLayerShape(args, in, plan.slots));
  }
  const char* kernel = batch ? "batch_norm" : "LayerNormKernelImpl";
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64) {
    return NotImplementedError(kernel, x.dtype);
  }
  for (int i = 1; i < plan.slots.count; ++i) {
    if (in[i].dtype == x.dtype) continue;
    return absl::InvalidArgumentError(
        batch ? absl::StrCat("mixed dtype (CPU): expect parameter to have "
                             "scalar type of ",
                             ToAbsl(ScalarTypeName(x.dtype)))
              : absl::StrCat("expected scalar type ",
                             ToAbsl(ScalarTypeName(x.dtype)), " but found ",
                             ToAbsl(ScalarTypeName(in[i].dtype))));
  }
  for (OpKind kernel_kind :
       {OpKind::kReduce, OpKind::kBinary, OpKind::kUnary}) {
    RETURN_IF_ERROR(target.Supports(kernel_kind, x.dtype));
  }
  plan.dtype = x.dtype;
  plan.out = x.shape;
  plan.layout = NormLayoutOf(args, x.shape);
  plan.batch_stats = !batch || training;
  if (batch && !training && !args.running_stats) {
    return absl::InvalidArgumentError(
        "running_mean must be defined in evaluation mode");
  }
  if (batch && training && plan.layout.count == 1) {
    return ValueError(absl::StrCat(
        "Expected more than 1 value per channel when training, got input "
        "size torch.Size(",
        List(x.shape.dims()), ")"));
  }
  plan.update_running =
      batch && training && args.running_stats && x.shape.NumElements() > 0;
  return plan;
}

}  // namespace tensord::core
