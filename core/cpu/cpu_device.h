// The CPU device: tensors in host memory, kernels on the host, OpenBLAS for
// floating-point matrix products.
// Thread-safety: as Device.
#ifndef TENSORD_CORE_CPU_CPU_DEVICE_H_
#define TENSORD_CORE_CPU_CPU_DEVICE_H_

#include <memory>
#include <string>

#include "core/base/device.h"

namespace tensord::core {

struct CpuDeviceOptions {
  std::string name = "cpu";  // canonical name: "cpu" or "cpu:<index>"
  int index = 0;
  // Memory this device reports as its total; 0 = the machine's RAM.
  uint64_t total_memory = 0;
  // Freed blocks of >= 1 MiB kept warm for reuse (core/cpu/host_pool.h).
  // Not counted against the budget, which counts live tensors.
  uint64_t host_cache_bytes = uint64_t{1} << 30;
  // Run conv2d on a library (oneDNN, when the build has it:
  // core/cpu/library_kernels.h, where it runs the dtype and window) and
  // max/avg pooling on the direct kernel (core/cpu/pool_kernels.h); false:
  // both composed of im2col and products or reductions
  // (--kernel-libraries).
  bool kernel_libraries = true;
};

std::unique_ptr<Device> CreateCpuDevice(const CpuDeviceOptions& options);

}  // namespace tensord::core

#endif  // TENSORD_CORE_CPU_CPU_DEVICE_H_
