// conv2d and the 2-d pooling ops, planned before anything runs: PyTorch's
// argument rules and messages, the result's shape, and the window every
// device unfolds (core/base/window.h). Part of the planner (core/planner/planner.h):
// pure functions on dtypes, shapes and a capability table, which the
// server's executor and the eager client both call.
//
// The executor runs these ops as kernels every device has: im2col
// (KernelKind::kIm2Col) unfolds the windows into columns, then conv2d is
// one matrix product per group (plus the bias), max_pool2d and avg_pool2d
// one reduction over each window.
//
// Thread-safety: pure functions.
#ifndef TENSORD_CORE_PLANNER_WINDOW_PLAN_H_
#define TENSORD_CORE_PLANNER_WINDOW_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/dtype.h"
#include "core/base/ops.h"
#include "core/planner/planner.h"
#include "core/base/shape.h"
#include "core/base/window.h"

namespace tensord::core {


// conv2d(x, weight, bias): x [n, c, h, w] or unbatched [c, h, w]; weight
// [oc, c / groups, kh, kw]; bias [oc] or none. `window` is over x with
// n = 1 when unbatched.
struct Conv2dPlan {
  WindowDims window;
  int64_t groups = 1;
  int64_t out_channels = 0;
  DType dtype = DType::kFloat32;
  Shape out;  // [n, oc, oh, ow], or [oc, oh, ow] when x is unbatched
};
// INVALID_ARGUMENT, with PyTorch's messages, for a rank, a channel count,
// a bias, an argument list or value, or a (dilated) kernel larger than the
// padded input; for operands of different dtypes ("Input type (float64) and
// weight type (float32) should be the same"). FAILED_PRECONDITION
// "\"conv2d\" not implemented for 'int64' on cpu" for a non-floating
// dtype or one the device has no matmul for.
absl::StatusOr<Conv2dPlan> PlanConv2d(const OperandDesc& x,
                                      const OperandDesc& weight,
                                      const OperandDesc* bias,
                                      const WindowArgs& args,
                                      const Target& target);

enum class PoolKind { kMax, kAvg };
// "max_pool2d", "avg_pool2d".
std::string_view PoolName(PoolKind kind);

// max_pool2d / avg_pool2d of x [n, c, h, w] or unbatched [c, h, w]; the
// result has x's dtype. `window` is over x with n = 1 when unbatched.
struct Pool2dPlan {
  WindowDims window;
  Shape out;  // [n, c, oh, ow], or [c, oh, ow]
};
// INVALID_ARGUMENT with PyTorch's messages (a rank, an empty dim other
// than the batch, an argument list or value, padding over half the
// kernel, an output smaller than one element, dilation given to
// avg_pool2d); FAILED_PRECONDITION "\"max_pool2d\" not implemented for
// 'int64' on cpu" for a non-floating dtype or one the device does not
// reduce in.
absl::StatusOr<Pool2dPlan> PlanPool2d(PoolKind kind, DType dtype,
                                      const Shape& x, const WindowArgs& args,
                                      const Target& target);

// adaptive_avg_pool2d of x [n, c, h, w] (or [c, h, w]) to `output_size`
// (one value for both dims, or two): output row i averages input rows
// [floor(i h / oh), ceil((i + 1) h / oh)), as PyTorch. The executor runs it
// as two products with averaging matrices, rows [oh, h] . x . cols [w, ow].
struct AdaptivePoolPlan {
  int64_t planes = 1;  // n * c
  int64_t h = 1, w = 1, oh = 0, ow = 0;
  Shape out;  // [n, c, oh, ow], or [c, oh, ow]
};
// INVALID_ARGUMENT with PyTorch's messages (rank, an empty non-batch dim,
// output_size's length or a negative entry); FAILED_PRECONDITION for a
// non-floating dtype or one the device has no matmul for.
absl::StatusOr<AdaptivePoolPlan> PlanAdaptiveAvgPool2d(
    DType dtype, const Shape& x, const std::vector<int64_t>& output_size,
    const Target& target);

// Window [start, end) of output index i of `out` over `in` elements.
inline int64_t AdaptiveStart(int64_t i, int64_t out, int64_t in) {
  return (i * in) / out;
}
inline int64_t AdaptiveEnd(int64_t i, int64_t out, int64_t in) {
  return ((i + 1) * in + out - 1) / out;
}

}  // namespace tensord::core

#endif  // TENSORD_CORE_PLANNER_WINDOW_PLAN_H_
