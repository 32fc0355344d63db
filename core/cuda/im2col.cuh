// The im2col kernel (Device::Launch, KernelKind::kIm2Col): the windows of
// an [n, c, h, w] tensor unfolded into [c, kh, kw, n, oh, ow] columns.
// Thread-safety: stateless; launches are ordered by `stream`.
#ifndef TENSORD_CORE_CUDA_IM2COL_CUH_
#define TENSORD_CORE_CUDA_IM2COL_CUH_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/cuda/kernel_types.h"
#include "core/base/window.h"

namespace tensord::core::cuda {

// As core/base/device.h's Im2ColArgs, for elements of `elem_size` bytes (1, 2,
// 4 or 8; cudaErrorInvalidValue otherwise): one thread per output element.
// Returns the launch status.
cudaError_t LaunchIm2Col(size_t elem_size, const WindowDims& dims,
                         uint64_t pad_bits, const void* in, void* out,
                         cudaStream_t stream);

// As core/base/device.h's Col2ImArgs: one thread per element of `out`, which
// gathers the entries of `cols` that read it in a fixed order
// (deterministic, no atomics). Floating types only (the half types sum in
// float32); cudaErrorInvalidValue otherwise. Returns the launch status.
cudaError_t LaunchCol2Im(ElemType type, const WindowDims& dims,
                         const void* cols, void* out, cudaStream_t stream);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_IM2COL_CUH_
