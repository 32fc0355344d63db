// conv2d on oneDNN: the CPU device's library implementation of
// KernelKind::kConv2d (core/base/device.h, Conv2dArgs), which its
// kernel-selection table picks for float32 when this build has oneDNN and
// a primitive can be made on this CPU (probed once).
//
// Each call's primitive comes from a bounded cache keyed by the pass, the
// dtype and the window (LibraryConvCounters counts what was made, reused
// and evicted). The tensors stay in plain layouts at the API; the
// primitive may prefer blocked ones, and then the call reorders its inputs
// into the workspace and its output back out of it (counted). The
// primitive's scratch is in the workspace too (oneDNN's user scratchpad
// mode), so the library allocates nothing per call: every byte a
// convolution uses was admitted by the executor.
//
// Threads: each call runs on an OpenMP team of `threads` (the BLAS thread
// count the daemon set, --blas-threads) made by the calling thread.
// Thread-safety: every function may be called from any thread; calls run
// concurrently (the cache has its own lock; a primitive runs on many
// threads at once, each call with its own workspace).
#ifndef TENSORD_CORE_CPU_LIBRARY_CONV_H_
#define TENSORD_CORE_CPU_LIBRARY_CONV_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/device.h"

namespace tensord::core::cpu {

// "oneDNN 2.6.3 (avx512_core_bf16)" when this build has oneDNN and a
// float32 convolution primitive can be made on this CPU; "" otherwise.
const std::string& ConvLibrary();
// Whether ConvLibrary() runs `dtype` (float32 only for now: oneDNN has no
// float64, and its bf16 waits for a bench).
bool ConvLibraryRuns(DType dtype);

// The workspace bytes `args` needs in `dtype`: the reordered copies its
// primitive wants and its scratchpad. INTERNAL if the library refuses the
// window.
absl::StatusOr<uint64_t> LibraryConvWorkspace(const Conv2dArgs& args,
                                              DType dtype);

// Runs `args` (Conv2dArgs says what in0, in1 and out are for each pass) on
// `threads` threads (0: OpenMP's default). `workspace` holds at least
// LibraryConvWorkspace(args, dtype) bytes.
absl::Status LibraryConv(const Conv2dArgs& args, DType dtype, const void* in0,
                         const void* in1, void* out, void* workspace,
                         int threads);

struct LibraryConvCounters {
  uint64_t primitives = 0;  // made (a cache miss)
  uint64_t reused = 0;      // cache hits
  uint64_t evicted = 0;     // dropped to keep the cache bounded
  uint64_t reorders = 0;    // layout conversions run
};
LibraryConvCounters GetLibraryConvCounters();

}  // namespace tensord::core::cpu

#endif  // TENSORD_CORE_CPU_LIBRARY_CONV_H_
