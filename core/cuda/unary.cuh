// Elementwise unary kernels (Device::Unary).
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_UNARY_CUH_
#define TENSORD_CORE_CUDA_UNARY_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

// out[i] = op(in[i]) for i < numel; `out` may be `in`. The floating ops
// (exp, log, sqrt, sigmoid, tanh) need a floating type and bool takes none
// of the ops: cudaErrorInvalidValue otherwise (the caller reports the
// dtype rule first). Returns the launch status.
cudaError_t LaunchUnary(UnOp op, ElemType type, const void* in, void* out,
                        int64_t numel, cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_UNARY_CUH_
