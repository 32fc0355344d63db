// The element-wise reductions a collective applies, per dtype: what an
// engine (Gloo) calls to combine two ranks' buffers, and the scaling that
// turns a sum into an average. Plain C++ on host memory.
#ifndef TENSORD_CORE_COLLECTIVES_REDUCE_KERNELS_H_
#define TENSORD_CORE_COLLECTIVES_REDUCE_KERNELS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "core/base/dtype.h"
#include "core/collectives/collective.h"

namespace tensord::core {

// out[i] = a[i] (op) b[i] for n elements of one dtype; `out` may be `a`
// or `b`. kAvg reduces as kSum (ScaleBy divides afterwards).
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// OK when `op` is defined for `dtype`: every op on floating dtypes and on
// int32/int64 but kAvg (an average of integers is not one: floating dtypes
// only, FAILED_PRECONDITION naming both); on bool, kSum and kMax are a
// logical or and kProduct and kMin a logical and, as torch's reductions of
// bool tensors are.
absl::Status CheckReduceOp(std::string_view collective, Reduction op,
                           DType dtype);
// The reduction of `op` on `dtype`. Precondition: CheckReduceOp is OK.
ReduceFn ReduceFunction(Reduction op, DType dtype);
// data[i] /= divisor for n elements of a floating dtype (kAvg's last step;
// float16/bfloat16 through float, rounded to nearest even).
void DivideBy(void* data, size_t n, DType dtype, double divisor);

}  // namespace tensord::core

#endif  // TENSORD_CORE_COLLECTIVES_REDUCE_KERNELS_H_
