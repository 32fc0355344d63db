#include "core/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"

namespace tensord::core::cuda {

absl::Status CudaStatus(cudaError_t err, std::string_view device,
                        std::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string message = absl::StrCat(ToAbsl(device), ": ", ToAbsl(what),
                                           " failed: ", cudaGetErrorName(err),
                                           " (", cudaGetErrorString(err), ")");
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it for this thread's next call
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

absl::Status CublasStatus(cublasStatus_t status, std::string_view device,
                          std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat(ToAbsl(device), ": ", ToAbsl(what),
                   " failed: ", cublasGetStatusName(status), " (",
                   cublasGetStatusString(status), ")");
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

}  // namespace tensord::core::cuda
