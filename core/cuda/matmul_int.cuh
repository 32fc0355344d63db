// Integer batched matrix product (KernelKind::kMatMul for int32/int64; the
// floating types go through cuBLAS in cuda_device.cc).
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_MATMUL_INT_CUH_
#define TENSORD_CORE_CUDA_MATMUL_INT_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

// For each p < batch: out[p] (m x n) = a[p] (m x k) * b[p] (k x n), row-major,
// operand p at element p * stride (0 broadcasts), with wrapping arithmetic.
// `type` is kI32 or kI64 (cudaErrorInvalidValue otherwise).
cudaError_t LaunchIntMatMul(ElemType type, int64_t batch, int64_t m, int64_t n,
                            int64_t k, const void* a, int64_t a_stride,
                            const void* b, int64_t b_stride, void* out,
                            int64_t out_stride, cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_MATMUL_INT_CUH_
