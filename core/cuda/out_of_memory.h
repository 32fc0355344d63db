// The message of the CUDA device's RESOURCE_EXHAUSTED on allocation:
// PyTorch's "CUDA out of memory" detail, from figures the device reads from
// the driver.
//
// Plain C++ with no CUDA type, unit-tested in every build
// (tests/core/cuda_host_logic_test.cc).
// Thread-safety: pure functions.
#ifndef TENSORD_CORE_CUDA_OUT_OF_MEMORY_H_
#define TENSORD_CORE_CUDA_OUT_OF_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tensord::core::cuda {

// A device's memory at the moment an allocation failed, in bytes. A figure
// the driver did not give is 0.
struct CudaMemoryFigures {
  uint64_t used = 0;      // by tensord's pool (allocated, not freed)
  uint64_t reserved = 0;  // held by tensord's pool, used or cached
  uint64_t free = 0;      // on the GPU, as the driver reports it
  uint64_t total = 0;
};

// "<device>: CUDA out of memory. Tried to allocate 2.00 GiB (2147483648
// bytes); in use by tensord 1.00 KiB (reserved 2.00 KiB); free 512.00 MiB of
// 80.00 GiB total GPU memory": what was asked, what tensord holds, what the
// GPU has left (sizes by FormatBytes, core/base/op_checks.h).
std::string OutOfMemoryMessage(std::string_view device, size_t bytes,
                               const CudaMemoryFigures& memory);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_OUT_OF_MEMORY_H_
