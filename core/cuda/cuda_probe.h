// Asks the CUDA runtime which GPUs this process can use. Names no CUDA type.
// Thread-safety: safe to call from any thread.
#ifndef TENSORD_CORE_CUDA_CUDA_PROBE_H_
#define TENSORD_CORE_CUDA_CUDA_PROBE_H_

#include <string>
#include <vector>

namespace tensord::core::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  unsigned long long total_memory = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessor_count = 0;
};

struct CudaProbe {
  std::vector<GpuInfo> gpus;  // empty without a GPU or driver
  std::string summary;        // one log line
};

// Never fails: no driver or no GPU gives an empty list and says so.
CudaProbe ProbeCuda();

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_CUDA_PROBE_H_
