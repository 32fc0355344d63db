#include "core/cuda/cuda_supports.h"

namespace tensord::core::cuda {

Capabilities CudaCapabilities() {
  Capabilities caps = Capabilities::Common();
  for (DType dtype : kEveryDType) {
    if (IsFloating(dtype)) caps.Allow(OpKind::kRandomFill, dtype);
  }
  return caps;
}

}  // namespace tensord::core::cuda
