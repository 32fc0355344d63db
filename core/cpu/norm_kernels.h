// The CPU device's direct batch-norm kernel (BatchNormArgs in
// core/base/device.h): each pass one sweep or two over x per channel,
// where the composed path (core/executor/norm_ops.cc) runs seven kernels
// forward and eleven backward, each a full pass with a temporary of x's
// size. Same arithmetic as the composed path, element by element, in x's
// dtype: (x - mean) * invstd, then * weight, then + bias; the statistics
// and the gradients' sums accumulated in double, the variance over the
// centred values (two passes, not E[x^2] - mean^2).
//
// Thread-safety: pure functions of their arguments.
#ifndef TENSORD_CORE_CPU_NORM_KERNELS_H_
#define TENSORD_CORE_CPU_NORM_KERNELS_H_

#include <span>

#include "absl/status/status.h"
#include "core/base/device.h"

namespace tensord::core::cpu {

// `in` holds the pass's five operands' data (BatchNormArgs), `out` its
// result. INVALID_ARGUMENT for a dtype other than float32 or float64.
absl::Status BatchNormKernel(const BatchNormArgs& args, DType dtype,
                             std::span<const void* const> in, void* out);

}  // namespace tensord::core::cpu

#endif  // TENSORD_CORE_CPU_NORM_KERNELS_H_
