#include "core/device_registry.h"

#ifdef TENSORD_WITH_CUDA
#include "core/cuda/cuda_probe.h"
#endif

namespace tensord::core {

AcceleratorDiscovery DiscoverAccelerators() {
  AcceleratorDiscovery found;
#ifdef TENSORD_WITH_CUDA
  const cuda::CudaProbe probe = cuda::ProbeCuda();
  found.summary = probe.summary;
  // The CUDA Device implementation is the CUDA issue's work; until it lands
  // the probe reports the GPUs it sees and none is registered.
#else
  found.summary = "CUDA: not built in (configure with -DTENSORD_CUDA=ON)";
#endif
  return found;
}

}  // namespace tensord::core
