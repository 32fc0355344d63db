#include "core/runtime/device_registry.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/cpu/blas.h"
#include "core/cpu/blas_placement.h"

#ifdef TENSORD_WITH_CUDA
#include <utility>

#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_probe.h"
#endif

namespace tensord::core {

void PrepareHostCompute(char** argv) { ReexecForHostCompute(argv); }

std::string ConfigureHostCompute(int blas_threads) {
  const int usable = UsableCpus();
  SetBlasThreads(blas_threads > 0 ? blas_threads : usable);
  ScopedBlasPlacement::RecordCpus();
  const BlasInfo blas = CurrentBlas();
  const std::string replaced = ReplacedBlasCore();
  return absl::StrCat(
      "BLAS: ", blas.config, "; kernel ", blas.core,
      replaced.empty()
          ? ""
          : absl::StrCat(" (forced over the library's choice, ", replaced, ")"),
      "; ", blas.threads, " threads (", usable, " usable CPUs); OpenMP ",
      std::getenv("OMP_WAIT_POLICY") == nullptr
          ? std::string("wait policy unset")
          : absl::StrCat("OMP_WAIT_POLICY=", std::getenv("OMP_WAIT_POLICY")),
      "; OpenBLAS ",
      std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr
          ? std::string("thread timeout unset")
          : absl::StrCat("OPENBLAS_THREAD_TIMEOUT=",
                         std::getenv("OPENBLAS_THREAD_TIMEOUT")));
}

AcceleratorDiscovery DiscoverAccelerators(const AcceleratorOptions& options) {
  AcceleratorDiscovery found;
#ifdef TENSORD_WITH_CUDA
  const cuda::CudaProbe probe = cuda::ProbeCuda();
  found.summary = probe.summary;
  if (probe.gpus.empty()) return found;
  cuda::CudaDeviceOptions cuda_options;
  cuda_options.allow_tf32 = options.allow_tf32;
  cuda_options.kernel_libraries = options.kernel_libraries;
  absl::StatusOr<cuda::CudaDevices> devices =
      cuda::CreateCudaDevices(cuda_options);
  if (!devices.ok()) {
    found.summary = absl::StrCat(found.summary,
                                 "; not served: ", devices.status().ToString());
    return found;
  }
  found.devices = std::move(devices->devices);
  std::string names;
  for (const auto& d : found.devices) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", d->name());
  }
  absl::StrAppend(&found.summary, "; serving ", names,
                  options.allow_tf32 ? " (float32 matmul may use TF32)"
                                     : " (float32 matmul exact, no TF32)",
                  "; ", devices->kernel_library_note);
#else
  (void)options;
  found.summary = "CUDA: not built in (configure with -DTENSORD_CUDA=ON)";
#endif
  return found;
}

}  // namespace tensord::core
