#include <cuda_runtime.h>

#include <string>

#include "core/cuda/cuda_probe.h"

namespace tensord::core::cuda {

CudaProbe ProbeCuda() {
  CudaProbe probe;
  int runtime_version = 0;
  cudaRuntimeGetVersion(&runtime_version);
  const std::string built = "CUDA: built in (runtime " +
                            std::to_string(runtime_version / 1000) + "." +
                            std::to_string(runtime_version % 1000 / 10) + ")";
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for later callers
    probe.summary =
        built + "; no GPU visible (" + cudaGetErrorString(err) + ")";
    return probe;
  }
  std::string names;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    GpuInfo gpu;
    gpu.index = i;
    gpu.name = prop.name;
    gpu.total_memory = prop.totalGlobalMem;
    gpu.compute_capability_major = prop.major;
    gpu.compute_capability_minor = prop.minor;
    gpu.multiprocessor_count = prop.multiProcessorCount;
    names += (names.empty() ? "" : ", ") + ("cuda:" + std::to_string(i)) + " " +
             gpu.name;
    probe.gpus.push_back(std::move(gpu));
  }
  probe.summary = built + "; " + std::to_string(count) + " GPU(s) visible" +
                  (names.empty() ? "" : ": " + names);
  return probe;
}

}  // namespace tensord::core::cuda
