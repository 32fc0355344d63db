// Internal: CUDA runtime and cuBLAS return codes as absl::Status
// (STYLE.md 5). Host code only.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_CUDA_CUDA_STATUS_H_
#define TENSORD_CORE_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "absl/status/status.h"

namespace tensord::core::cuda {

// OK for cudaSuccess. cudaErrorMemoryAllocation is RESOURCE_EXHAUSTED;
// everything else INTERNAL: "<device>: <what> failed: <name> (<text>)".
absl::Status CudaStatus(cudaError_t err, std::string_view device,
                        std::string_view what);

// OK for CUBLAS_STATUS_SUCCESS; CUBLAS_STATUS_ALLOC_FAILED is
// RESOURCE_EXHAUSTED, everything else INTERNAL.
absl::Status CublasStatus(cublasStatus_t status, std::string_view device,
                          std::string_view what);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_CUDA_STATUS_H_
