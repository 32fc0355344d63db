// The CPU device's library kernels: conv2d (KernelKind::kConv2d: forward
// and both gradients) as calls of oneDNN, which the device's
// kernel-selection table (CpuDevice::Select) picks where LibraryRuns says
// the library runs the call; everything else stays composed of the
// kernels every device has. (Pooling runs on the device's own direct
// kernel, core/cpu/pool_kernels.h: oneDNN 2.6's pooling over plain NCHW
// tensors was slower.)
//
// What the library runs: float32 (oneDNN has no float64, and its bf16
// waits for a bench). Support is probed once at run time (a primitive is
// made for a small window): a build without oneDNN, or a CPU oneDNN cannot
// serve, runs nothing here.
//
// Each call's PreparedCall (core/cpu/onednn_call.h) comes from one bounded
// cache per process (core/base/library_cache.h) keyed by the pass, dtype,
// window and threads (LibraryKernelCounters counts what was made, reused,
// evicted and reordered). Tensors stay in plain layouts at the API; a
// primitive that prefers blocked ones has its inputs reordered into the
// workspace and its output back out of it.
//
// Threads (the thread policy): a call runs on the calling thread's OpenMP
// team (libgomp) of LibraryThreads(work) threads: one below a grain of
// work, where waking a team costs more than it saves, else the BLAS thread
// count the daemon set (--blas-threads). One call at a time runs on a
// team: a call that finds another's team running runs on its own thread
// (counted as contended), so concurrent sessions never put two teams on
// the same cores. The daemon starts libgomp passive and OpenBLAS's idle
// workers quick to sleep (OMP_WAIT_POLICY, OPENBLAS_THREAD_TIMEOUT,
// core/cpu/blas.h): neither library's threads spin on the cores the other's
// and the service's need.
//
// Thread-safety: every function may be called from any thread; calls run
// concurrently (the cache has its own lock; each call has its own
// workspace).
#ifndef TENSORD_CORE_CPU_LIBRARY_KERNELS_H_
#define TENSORD_CORE_CPU_LIBRARY_KERNELS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/device.h"

namespace tensord::core::cpu {

// "oneDNN 2.6.3" when this build has oneDNN and it runs on this CPU; ""
// otherwise.
const std::string& KernelLibraryName();

// Whether the library runs `args` (a Conv2dArgs) in `dtype`.
bool LibraryRuns(const KernelArgs& args, DType dtype);

// The workspace bytes `args` needs in `dtype`: reordered copies, regions
// and scratch. INTERNAL if the library refuses the window.
absl::StatusOr<uint64_t> LibraryWorkspace(const KernelArgs& args, DType dtype);

// Runs `call` (kConv2d; its last input is the workspace, at least
// LibraryWorkspace bytes).
absl::Status RunLibraryKernel(const KernelCall& call);

// The OpenMP threads a library call of `flops` work runs on.
int LibraryThreads(double flops);

struct LibraryKernelCounters {
  uint64_t primitives = 0;  // prepared calls made (cache misses)
  uint64_t reused = 0;      // cache hits
  uint64_t evicted = 0;     // dropped to keep the cache bounded
  uint64_t reorders = 0;    // layout conversions run
  uint64_t team_calls = 0;  // calls run on a team of threads
  uint64_t alone_calls = 0;  // calls run on their calling thread alone
  uint64_t contended = 0;    // of those, calls that found the team busy
};
LibraryKernelCounters GetLibraryKernelCounters();
// Counts one reorder (onednn_call.cc).
void NoteLibraryReorder();

}  // namespace tensord::core::cpu

#endif  // TENSORD_CORE_CPU_LIBRARY_KERNELS_H_
