// Elementwise dtype conversion (KernelKind::kCast) between every element type,
// float16 and bfloat16 included.
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_CAST_CUH_
#define TENSORD_CORE_CUDA_CAST_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

// out[i] = convert(in[i]) for i < numel, with cpu_kernels' rules
// (saturating floating -> integer, NaN -> 0, != 0 -> bool). Returns the
// launch status.
cudaError_t LaunchCast(ElemType in_type, const void* in, ElemType out_type,
                       void* out, int64_t numel, cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_CAST_CUH_
