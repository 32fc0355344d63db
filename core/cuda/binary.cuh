// Elementwise binary kernels with broadcasting (KernelKind::kBinary).
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_BINARY_CUH_
#define TENSORD_CORE_CUDA_BINARY_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

// out[i] = a[.] (op) b[.] for i < numel with core/base/scalar_ops.h's functor
// for `op` (the half types compute in float32), reading a and b through
// `index`'s broadcast strides, or elementwise when `contiguous` (all three
// shapes equal). a, b are `type`; out is `type`, or bool for comparisons.
// `out` may alias `a` when the shapes match. An op the functor does not
// define for `type` (bool sub/pow, integer div: the planner never plans
// them) is cudaErrorInvalidValue. Returns the launch status.
cudaError_t LaunchBinary(BinaryOp op, ElemType type, const void* a,
                         const void* b, void* out, int64_t numel,
                         bool contiguous, const BroadcastIndex& index,
                         cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_BINARY_CUH_
