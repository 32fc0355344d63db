// The CUDA device: tensors in GPU memory, kernels queued on one compute
// stream per GPU, cuBLAS for floating-point matrix products, cuDNN for
// conv2d and pooling where it computes them as PyTorch does (its
// kernel-selection table, core/cuda/cudnn_kernels.h), cuRAND's Philox for
// random fills. Names no CUDA type (STYLE.md 4); only
// core/runtime/device_registry.cc creates these devices.
//
// Execution model: every kernel, fill and device-side copy of a device is
// queued on its compute stream in call order, and a method returns once
// its work is queued (its launch errors are reported by the call). Buffers
// are allocated and freed in stream order (cudaMallocAsync/cudaFreeAsync
// on the device's memory pool), so a temporary freed while a kernel that
// reads it is still queued stays valid for that kernel. CopyToHost waits
// for the data it reads; CopyFromHost returns once the caller's memory
// has been read (through pinned staging buffers, chunked and double
// buffered). Errors a kernel hits while running (e.g. an illegal address,
// a bug) surface as INTERNAL from the next call that waits.
//
// Thread-safety: as Device: every method may be called from any thread.
#ifndef TENSORD_CORE_CUDA_CUDA_DEVICE_H_
#define TENSORD_CORE_CUDA_CUDA_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/device.h"

namespace tensord::core::cuda {

struct CudaDeviceOptions {
  // float32 matmul on tensor cores in TF32 (10-bit mantissa inputs), as
  // PyTorch's torch.backends.cuda.matmul.allow_tf32. Off: float32 is exact
  // (CUBLAS_COMPUTE_32F, no TF32).
  bool allow_tf32 = false;
  // Bytes of pinned host memory per staging buffer of host <-> device
  // copies; two per copy in flight.
  size_t staging_chunk_bytes = size_t{8} << 20;
  // conv2d and 2-d pooling on cuDNN where it runs them (and this build and
  // machine have it); false: im2col with cuBLAS, and reductions, only
  // (--kernel-libraries).
  bool kernel_libraries = true;
};

struct CudaDevices {
  std::vector<std::unique_ptr<Device>> devices;
  // For the log: "conv2d and pooling on cuDNN 9.19.0", or why they run
  // composed ("cuDNN: not built in (...)", "off (--kernel-libraries)").
  std::string kernel_library_note;
};

// One device per GPU the CUDA runtime reports ("cuda:0" .. "cuda:N-1"),
// with peer access enabled between the pairs that support it. An empty
// list (OK) when there is no GPU or driver; an error (e.g. INTERNAL,
// RESOURCE_EXHAUSTED) when a present GPU cannot be initialised (stream,
// cuBLAS handle, memory pool).
absl::StatusOr<CudaDevices> CreateCudaDevices(const CudaDeviceOptions& options);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_CUDA_DEVICE_H_
