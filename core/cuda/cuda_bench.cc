#include "core/cuda/cuda_bench.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/cuda/cuda_status.h"
#include "core/cuda/fill.cuh"
#include "core/base/status.h"

namespace tensord::core::cuda {
namespace {

// Owns what one timing run allocates, freed whatever happens.
struct BenchResources {
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  void* workspace = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~BenchResources() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (handle != nullptr) cublasDestroy(handle);
    for (void* p : {a, b, c, workspace}) {
      if (p != nullptr) cudaFree(p);
    }
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

}  // namespace

absl::StatusOr<MatMulTiming> TimeCublasMatMul(int ordinal, int n,
                                              BenchPrecision precision,
                                              int iterations) {
  const std::string device = "cuda:" + std::to_string(ordinal);
  auto check = [&](cudaError_t e, const char* what) {
    return CudaStatus(e, device, what);
  };
  auto check_blas = [&](cublasStatus_t s, const char* what) {
    return CublasStatus(s, device, what);
  };
  if (n <= 0 || iterations <= 0) {
    return absl::InvalidArgumentError("n and iterations must be positive");
  }
  const bool half = precision == BenchPrecision::kBFloat16 ||
                    precision == BenchPrecision::kFloat16;
  const cudaDataType_t type =
      precision == BenchPrecision::kBFloat16  ? CUDA_R_16BF
      : precision == BenchPrecision::kFloat16 ? CUDA_R_16F
                                              : CUDA_R_32F;
  const ElemType elem = precision == BenchPrecision::kBFloat16 ? ElemType::kBF16
                        : precision == BenchPrecision::kFloat16
                            ? ElemType::kF16
                            : ElemType::kF32;
  const size_t bytes = static_cast<size_t>(n) * n * (half ? 2 : 4);

  RETURN_IF_ERROR(check(cudaSetDevice(ordinal), "cudaSetDevice"));
  BenchResources r;
  RETURN_IF_ERROR(
      check(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking),
            "cudaStreamCreate"));
  RETURN_IF_ERROR(check(cudaMalloc(&r.a, bytes), "cudaMalloc"));
  RETURN_IF_ERROR(check(cudaMalloc(&r.b, bytes), "cudaMalloc"));
  RETURN_IF_ERROR(check(cudaMalloc(&r.c, bytes), "cudaMalloc"));
  constexpr size_t kWorkspace = size_t{32} << 20;
  RETURN_IF_ERROR(check(cudaMalloc(&r.workspace, kWorkspace), "cudaMalloc"));
  FillParams fill;
  fill.kind = FillKind::kRand;
  fill.seed = 1;
  RETURN_IF_ERROR(check(LaunchFill(fill, elem, r.a, int64_t{n} * n, r.stream),
                        "fill kernel"));
  fill.seed = 2;
  RETURN_IF_ERROR(check(LaunchFill(fill, elem, r.b, int64_t{n} * n, r.stream),
                        "fill kernel"));
  RETURN_IF_ERROR(check_blas(cublasCreate(&r.handle), "cublasCreate"));
  RETURN_IF_ERROR(
      check_blas(cublasSetStream(r.handle, r.stream), "cublasSetStream"));
  RETURN_IF_ERROR(
      check_blas(cublasSetWorkspace(r.handle, r.workspace, kWorkspace),
                 "cublasSetWorkspace"));
  RETURN_IF_ERROR(
      check_blas(cublasSetMathMode(r.handle, precision == BenchPrecision::kTF32
                                                 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                 : CUBLAS_DEFAULT_MATH),
                 "cublasSetMathMode"));
  const cublasComputeType_t compute = precision == BenchPrecision::kTF32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    return check_blas(cublasGemmEx(r.handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n,
                                   &alpha, r.b, type, n, r.a, type, n, &beta,
                                   r.c, type, n, compute, CUBLAS_GEMM_DEFAULT),
                      "cublasGemmEx");
  };
  for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(gemm());
  RETURN_IF_ERROR(check(cudaEventCreate(&r.start), "cudaEventCreate"));
  RETURN_IF_ERROR(check(cudaEventCreate(&r.stop), "cudaEventCreate"));
  RETURN_IF_ERROR(check(cudaEventRecord(r.start, r.stream), "cudaEventRecord"));
  for (int i = 0; i < iterations; ++i) RETURN_IF_ERROR(gemm());
  RETURN_IF_ERROR(check(cudaEventRecord(r.stop, r.stream), "cudaEventRecord"));
  RETURN_IF_ERROR(check(cudaEventSynchronize(r.stop), "cudaEventSynchronize"));
  float ms = 0;
  RETURN_IF_ERROR(check(cudaEventElapsedTime(&ms, r.start, r.stop),
                        "cudaEventElapsedTime"));
  MatMulTiming t;
  t.seconds_per_matmul = ms / 1e3 / iterations;
  t.tflops = 2.0 * n * n * static_cast<double>(n) / t.seconds_per_matmul / 1e12;
  return t;
}

}  // namespace tensord::core::cuda
