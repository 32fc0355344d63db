// The cuBLAS matmul kernel timed alone, in-process, for bench/gpu_bench:
// the floor the service's matmul is compared with. Names no CUDA type.
// Thread-safety: call from one thread; uses the GPU exclusively while
// running.
#ifndef TENSORD_CORE_CUDA_CUDA_BENCH_H_
#define TENSORD_CORE_CUDA_CUDA_BENCH_H_

#include "absl/status/statusor.h"

namespace tensord::core::cuda {

enum class BenchPrecision { kFloat32, kTF32, kBFloat16, kFloat16 };

struct MatMulTiming {
  double seconds_per_matmul = 0;
  double tflops = 0;  // 2 n^3 / seconds_per_matmul / 1e12
};

// Times `iterations` n x n x n products on GPU `ordinal` (after two
// warm-ups) with cuBLAS configured as CudaDevice configures it for
// `precision` (float32: CUBLAS_COMPUTE_32F; TF32: _FAST_TF32; bfloat16 and
// float16: tensor cores with float32 accumulation), timed with CUDA events.
// Errors as Status (RESOURCE_EXHAUSTED when the matrices do not fit).
absl::StatusOr<MatMulTiming> TimeCublasMatMul(int ordinal, int n,
                                              BenchPrecision precision,
                                              int iterations);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_CUDA_BENCH_H_
