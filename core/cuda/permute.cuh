// Data movement kernels: dimension permutation (KernelKind::kPermute) and the
// strided block copy fallback (KernelKind::kCopyBlocks).
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_PERMUTE_CUH_
#define TENSORD_CORE_CUDA_PERMUTE_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

// out[i] = in[offset(i)] for i < numel elements of `elem_size` bytes (1, 2,
// 4 or 8), where i is decomposed over index.dims (the output shape) and
// offset = sum of coordinate * index.a_strides (the input's strides,
// permuted). cudaErrorInvalidValue for another element size.
cudaError_t LaunchPermute(size_t elem_size, const void* in, void* out,
                          int64_t numel, const BroadcastIndex& index,
                          cudaStream_t stream);

// Copies `rows` blocks of `row_bytes` from src + r * src_stride to
// dst + r * dst_stride (byte strides, any value), for the cases
// cudaMemcpy2DAsync does not take.
cudaError_t LaunchCopyBlocks(const void* src, int64_t src_stride, void* dst,
                             int64_t dst_stride, int64_t rows,
                             int64_t row_bytes, cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_PERMUTE_CUH_
