// The CUDA device's library kernels: conv2d (KernelKind::kConv2d) and 2-d
// max/average pooling (KernelKind::kPool2d) as cuDNN calls queued on the
// device's stream, which the device's kernel-selection table
// (CudaDevice::Select) picks where Runs says cuDNN computes the call as
// PyTorch does (core/cuda/cudnn_params.h has the rule and the descriptors,
// unit-tested without a GPU); everything else stays composed (im2col and a
// cuBLAS product, im2col and a reduction).
//
// Each call's descriptors and, for a convolution, its algorithm (the first
// of cuDNN's heuristic ranking that runs within 1 GiB of workspace, as
// PyTorch picks without cudnn.benchmark) are made once per shape and dtype
// and kept in a bounded cache (core/base/library_cache.h). The workspace is
// the call's last input: admitted and allocated by the executor like any
// buffer (Device::WorkspaceBytes), so cuDNN allocates nothing itself.
//
// cuDNN is reached through its legacy descriptor API (cudnnConvolution*,
// cudnnPooling*), deprecated in cuDNN 9 but present through it; the graph
// API wants the cudnn-frontend headers, which neither Debian nor NVIDIA's
// wheels ship here. A build without cuDNN compiles
// cudnn_kernels_unavailable.cc instead, whose Create says so; a machine
// whose cuDNN cannot be loaded gets the same from cudnnCreate and the
// device runs composed. cuDNN 9 loads its engine libraries lazily: where
// they fail to load, each shape's preparation fails, Runs says no and the
// call runs composed (the startup line still names cuDNN).
//
// Names no CUDA or cuDNN type (STYLE.md 4). Thread-safety: every method may
// be called from any thread (one handle, used under a lock, as cuBLAS's).
#ifndef TENSORD_CORE_CUDA_CUDNN_KERNELS_H_
#define TENSORD_CORE_CUDA_CUDNN_KERNELS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/device.h"
#include "core/base/library_cache.h"

namespace tensord::core::cuda {

class CudnnKernels {
 public:
  virtual ~CudnnKernels() = default;

  // A cuDNN handle queuing on `stream` (a cudaStream_t of the current
  // device, which outlives the handle) for the device named `device` of
  // compute capability `cc_major`.x; float32 convolutions may use TF32
  // when `allow_tf32`. UNAVAILABLE saying why when this build has no cuDNN
  // or this machine's cannot be loaded.
  static absl::StatusOr<std::unique_ptr<CudnnKernels>> Create(
      void* stream, const std::string& device, int cc_major, bool allow_tf32);

  // "cuDNN 9.19.0": the library loaded.
  virtual const std::string& version() const = 0;

  // Whether cuDNN runs `args` (a Conv2dArgs or Pool2dArgs; for conv2d, all
  // three passes) in `dtype`: CudnnComputes and the library accepted it.
  virtual bool Runs(const KernelArgs& args, DType dtype) = 0;

  // The workspace bytes a call of `args` needs in `dtype`. INTERNAL if
  // cuDNN refuses it.
  virtual absl::StatusOr<uint64_t> WorkspaceBytes(const KernelArgs& args,
                                                  DType dtype) = 0;

  // Queues `call` (kConv2d or kPool2d; its last input the workspace, at
  // least WorkspaceBytes) on the stream.
  virtual absl::Status Run(const KernelCall& call) = 0;

  // What the cache made, reused and evicted.
  virtual LibraryCacheCounts counts() const = 0;
};

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_CUDNN_KERNELS_H_
