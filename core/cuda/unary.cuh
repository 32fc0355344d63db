// Elementwise unary kernels (KernelKind::kUnary).
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_UNARY_CUH_
#define TENSORD_CORE_CUDA_UNARY_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

// out[i] = op(in[i]) for i < numel with core/base/scalar_ops.h's functor for
// `op` with its numeric arguments `alpha`, `beta` (the op table's
// `params`; the half types compute in float32); `out` may be `in`. An op the
// functor does not define for `type` (bool, or a floating function of an
// integer type; the planner never plans either) is cudaErrorInvalidValue.
// Returns the launch status.
cudaError_t LaunchUnary(UnaryOp op, double alpha, double beta, ElemType type,
                        const void* in, void* out, int64_t numel,
                        cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_UNARY_CUH_
