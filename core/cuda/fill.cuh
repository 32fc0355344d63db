// Fills (KernelKind::kFill): zeros, ones, full, arange for every element type,
// and uniform/normal random values through cuRAND's Philox generator for
// the floating types.
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_FILL_CUH_
#define TENSORD_CORE_CUDA_FILL_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

// Writes `numel` elements of `type` per `params` (cpu_kernels' value
// rules: values converted as Cast does; an integer arange with integral
// start and step is exact in int64; rand is in [low, high)). Random values
// depend only on (seed, element index), so a seed reproduces a tensor
// exactly on any GPU and launch configuration (they differ from the CPU
// device's generator). cudaErrorInvalidValue for a random fill of a
// non-floating type. Returns the launch status.
cudaError_t LaunchFill(const FillParams& params, ElemType type, void* out,
                       int64_t numel, cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_FILL_CUH_
