// The normalisations (batch_norm, layer_norm), planned before anything
// runs: PyTorch's rules and messages, and the layout the executor and the
// backward both read. Part of the planner (core/planner/planner.h): pure
// functions, which the server's executor and the eager client both call.
//
// Both normalise x over some of its dims ("the statistic's dims": every
// dim but 1 for batch_norm, the last len(normalized_shape) for
// layer_norm): y = (x - mean) * invstd * weight + bias, invstd =
// 1 / sqrt(var + eps), var biased; weight and bias (and batch_norm's
// running statistics) are read as `param`, which broadcasts against x.
// The executor runs them as kernels every device has (core/executor/norm_ops.cc).
//
// Thread-safety: pure functions.
#ifndef TENSORD_CORE_PLANNER_NORM_PLAN_H_
#define TENSORD_CORE_PLANNER_NORM_PLAN_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/dtype.h"
#include "core/base/ops.h"
#include "core/planner/planner.h"
#include "core/base/shape.h"

namespace tensord::core {

// Where each tensor of a norm op sits in OpSpec::inputs (-1: absent); x is
// inputs[0]. `count` is the number of tensors.
struct NormSlots {
  int weight = -1, bias = -1, running_mean = -1, running_var = -1;
  int count = 1;
};
NormSlots NormSlotsOf(const NormArgs& args);

// How a norm reads x of a given shape.
struct NormLayout {
  std::vector<int64_t> dims;  // the statistic's dims, ascending
  Shape stats;                // a statistic's shape (those dims kept as 1)
  Shape param;                // how weight, bias, running stats are read
  int64_t count = 0;          // elements per statistic
};
// Precondition: x's shape passed PlanNorm for `args`.
NormLayout NormLayoutOf(const NormArgs& args, const Shape& x);

struct NormPlan {
  DType dtype = DType::kFloat32;  // every tensor's, and the result's
  Shape out;                      // x's shape
  NormLayout layout;
  NormSlots slots;
  // The statistics are x's own (layer_norm; batch_norm in training),
  // else batch_norm's running ones.
  bool batch_stats = true;
  // batch_norm in training with running statistics and a non-empty x:
  // the running statistics are updated in place.
  bool update_running = false;
};

// `in` holds the op's tensors in OpSpec::inputs' order (NormSlotsOf).
// batch_norm: x of rank >= 2 (IndexError "Dimension out of range ..."
// otherwise), weight, bias, running_mean and running_var of x.size(1)
// elements each (INVALID_ARGUMENT "running_mean should contain 3 elements
// not 4"), running statistics required outside training
// (INVALID_ARGUMENT "running_mean must be defined in evaluation mode"),
// more than one value per channel in training (ValueError "Expected more
// than 1 value per channel when training, got input size torch.Size([1,
// 3, 1, 1])"). layer_norm: 1 to 8 dims in normalized_shape
// (INVALID_ARGUMENT "Expected normalized_shape to be at least
// 1-dimensional, ..."), x's last dims equal to them ("Given
// normalized_shape=[3], expected input with shape [*, 3], but got input of
// size[2, 4]"), weight and bias of that shape ("Expected weight to be of
// same shape as normalized_shape, ..."), no running statistics. Both:
// float32 or float64 (FAILED_PRECONDITION "\"batch_norm\" not implemented
// for 'Long'" otherwise; layer_norm names torch's LayerNormKernelImpl),
// every tensor in x's dtype (INVALID_ARGUMENT, torch's "mixed dtype" /
// "expected scalar type" message).
absl::StatusOr<NormPlan> PlanNorm(const NormArgs& args, bool training,
                                  std::span<const OperandDesc> in,
                                  const Target& target);

}  // namespace tensord::core

#endif  // TENSORD_CORE_PLANNER_NORM_PLAN_H_
