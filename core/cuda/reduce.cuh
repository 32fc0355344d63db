// Reductions over the middle axis of [outer, n, inner] (KernelKind::kReduce).
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_REDUCE_CUH_
#define TENSORD_CORE_CUDA_REDUCE_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

// out[o, i] = op over j of in[o, j, i], with core/base/scalar_ops.h's reduction
// semantics (the CPU's): floating sums accumulate in double, integer sums
// wrap in int64; ties in max/min/argmax take the first index and NaN counts
// as the largest value; argmax writes int64; the half types compute in
// float32. mean/norm of non-floating types and max/min/argmax over n == 0
// (which the planner never plans) are cudaErrorInvalidValue. Returns the
// launch status.
cudaError_t LaunchReduce(ReduceOp op, ElemType type, int64_t outer, int64_t n,
                         int64_t inner, const void* in, void* out,
                         cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_REDUCE_CUH_
