// CudnnKernels in a build without cuDNN (core/cuda/CMakeLists.txt): the
// CUDA device runs conv2d and pooling composed, and says why.
#include "core/cuda/cudnn_kernels.h"

namespace tensord::core::cuda {

absl::StatusOr<std::unique_ptr<CudnnKernels>> CudnnKernels::Create(
    void*, const std::string&, int, bool) {
  return absl::UnavailableError(
      "cuDNN: not built in (cudnn.h and libcudnn not found with the CUDA "
      "toolkit at configure time; deploy/install-deps.sh)");
}

}  // namespace tensord::core::cuda
