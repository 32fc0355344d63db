// torch.where's kernel (Device::Launch, KernelKind::kWhere).
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_WHERE_CUH_
#define TENSORD_CORE_CUDA_WHERE_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

// out[i] = cond[.] ? x[.] : y[.] for i < numel (core/base/scalar_ops.h's
// Select), reading each operand through its strides in `index`; cond is
// bool bytes, x, y and out are `type`. Returns the launch status.
cudaError_t LaunchWhere(ElemType type, const void* cond, const void* x,
                        const void* y, void* out, int64_t numel,
                        const WhereIndex& index, cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_WHERE_CUH_
