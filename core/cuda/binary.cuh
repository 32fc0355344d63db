// Elementwise binary kernels with broadcasting (Device::Binary).
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_BINARY_CUH_
#define TENSORD_CORE_CUDA_BINARY_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

// out[i] = a[.] (op) b[.] for i < numel, reading a and b through
// `index`'s broadcast strides, or elementwise when `contiguous` (all three
// shapes equal). a, b are `type`; out is `type`, or bool for comparisons.
// `out` may alias `a` when the shapes match. The dtype rules (no bool
// sub/pow, floating-only div) are the caller's: other combinations give
// cudaErrorInvalidValue. Returns the launch status.
cudaError_t LaunchBinary(BinOp op, ElemType type, const void* a, const void* b,
                         void* out, int64_t numel, bool contiguous,
                         const BroadcastIndex& index, cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_BINARY_CUH_
