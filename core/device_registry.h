// The one place that knows which accelerator kinds this build supports.
//
// The daemon calls DiscoverAccelerators() once at start and hands the
// devices to the Runtime; nothing else in server/ knows device kinds.
// Thread-safety: call from one thread.
#ifndef TENSORD_CORE_DEVICE_REGISTRY_H_
#define TENSORD_CORE_DEVICE_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"

namespace tensord::core {

struct AcceleratorDiscovery {
  std::vector<std::unique_ptr<Device>> devices;
  // One log line: what was built in and what was found, e.g. "CUDA: built
  // in; no GPU visible (no CUDA-capable device is detected)".
  std::string summary;
};

struct AcceleratorOptions {
  // float32 matmuls on GPUs may use TF32 tensor cores (PyTorch's
  // allow_tf32). Off: float32 matmul is exact float32.
  bool allow_tf32 = false;
};

// Never fails: a build or machine without accelerators yields no devices
// and says why in `summary`; a GPU that is visible but cannot be set up is
// left out and the summary says why.
AcceleratorDiscovery DiscoverAccelerators(
    const AcceleratorOptions& options = {});

}  // namespace tensord::core

#endif  // TENSORD_CORE_DEVICE_REGISTRY_H_
