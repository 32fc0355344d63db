// The one place that knows which device kinds this build supports and how
// each is set up.
//
// The daemon calls PrepareHostCompute() first thing, ConfigureHostCompute()
// once flags are read, and DiscoverAccelerators() once at start, handing the
// devices to the Runtime; nothing else in server/ knows device kinds (nor
// the CPU device's BLAS).
// Thread-safety: call from one thread.
#ifndef TENSORD_CORE_RUNTIME_DEVICE_REGISTRY_H_
#define TENSORD_CORE_RUNTIME_DEVICE_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "core/base/device.h"

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
  // conv2d and pooling on GPUs through cuDNN where it runs them
  // (--kernel-libraries); false: composed (im2col + cuBLAS).
  bool kernel_libraries = true;
};

// The CPU device's compute for this machine (core/cpu/blas.h): when the
// BLAS library picked a weaker kernel than the CPU runs and the user chose
// none (OPENBLAS_CORETYPE), or the OpenMP wait policy is unset
// (OMP_WAIT_POLICY: PASSIVE, the thread policy), re-executes the program
// with `argv` and that environment (does not return then). Call first in
// main, before any thread starts.
void PrepareHostCompute(char** argv);

// Sizes the CPU device's BLAS threads (`blas_threads`; 0 = one per CPU this
// process may use: its affinity, capped by a container's CPU quota) and
// returns the log line naming the library, its kernel and the threads.
std::string ConfigureHostCompute(int blas_threads);

// Never fails: a build or machine without accelerators yields no devices
// and says why in `summary`; a GPU that is visible but cannot be set up is
// left out and the summary says why.
AcceleratorDiscovery DiscoverAccelerators(
    const AcceleratorOptions& options = {});

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_DEVICE_REGISTRY_H_
