// The launch geometry of the CUDA kernels' grid-stride loops: threads per
// block and how many blocks cover n elements.
//
// Plain C++17 with no CUDA type, so that it is unit-tested in every build
// (tests/core/cuda_host_logic_test.cc) and can be included by the
// nvcc-compiled kernel families as well as by host code.
// Thread-safety: constants and a pure function.
#ifndef TENSORD_CORE_CUDA_LAUNCH_GEOMETRY_H_
#define TENSORD_CORE_CUDA_LAUNCH_GEOMETRY_H_

#include <cstdint>

namespace tensord::core::cuda {

inline constexpr int kBlockThreads = 256;
// Beyond this many blocks a grid-stride loop gains nothing (every SM is long
// full) and each thread takes several elements instead.
inline constexpr int64_t kMaxGridBlocks = int64_t{1} << 20;

// Blocks of kBlockThreads for a grid-stride loop over `n` elements:
// ceil(n / kBlockThreads), clamped to [1, kMaxGridBlocks]. A grid of zero
// blocks is not a valid launch, so n <= 0 still gets one block (whose
// loop runs no iteration). Defined for every int64_t n.
constexpr unsigned int GridBlocks(int64_t n) {
  if (n <= 0) return 1;
  // n / kBlockThreads rounded up, without the overflow of n + 255.
  const int64_t blocks = n / kBlockThreads + (n % kBlockThreads != 0 ? 1 : 0);
  return static_cast<unsigned int>(blocks > kMaxGridBlocks ? kMaxGridBlocks
                                                           : blocks);
}

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_LAUNCH_GEOMETRY_H_
