// How the CUDA device runs a matmul, as plain data: which path a planned
// the matmul kernel takes (nothing, zero fill, the integer kernel, cuBLAS) and,
// for cuBLAS, every argument of its cublasGemmStridedBatchedEx call.
//
// cuBLAS is column-major; tensord's matrices are row-major. A row-major
// m x n matrix is the column-major n x m matrix of its transpose with the
// same bytes, so row-major C = A * B is column-major C^T = B^T * A^T: cuBLAS
// gets (n, m, k) with tensord's b as its first operand, no transposes and no
// copies. This header names no CUDA or cuBLAS type: its enums are mapped onto
// the cuBLAS constants by core/cuda/cuda_device.cc, the one file that calls
// cuBLAS, so the parameters are unit-tested in every build
// (tests/core/cuda_host_logic_test.cc runs them through a CPU reference gemm
// with cuBLAS's semantics).
// Thread-safety: pure functions.
#ifndef TENSORD_CORE_CUDA_GEMM_PARAMS_H_
#define TENSORD_CORE_CUDA_GEMM_PARAMS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/base/device.h"
#include "core/base/dtype.h"

namespace tensord::core::cuda {

// What the matmul kernel does with planned dims, once the dtype is supported.
enum class MatMulPath {
  kNothing,        // batch, m or n is 0: an empty output
  kZeroFill,       // k is 0: every output matrix is an empty sum, all zeros
  kIntegerKernel,  // int32/int64: tensord's own kernel (cuBLAS has none)
  kGemm,           // floating: cublasGemmStridedBatchedEx (PlanGemm)
};
MatMulPath ChooseMatMulPath(const MatMulDims& dims, DType dtype);

// cublasOperation_t: CUBLAS_OP_N, CUBLAS_OP_T.
enum class GemmOp { kNoTranspose, kTranspose };
// cudaDataType_t of the three matrices: CUDA_R_32F, _64F, _16F, _16BF.
enum class GemmDataType { kF32, kF64, kF16, kBF16 };
// cublasComputeType_t: CUBLAS_COMPUTE_32F, _32F_FAST_TF32, _64F.
enum class GemmComputeType { k32F, k32FFastTF32, k64F };
// The host type alpha and beta point to: float for the 32F compute types,
// double for 64F (cuBLAS reads them as the compute type's scalar).
enum class GemmScalarType { kFloat, kDouble };
// Which of tensord's operands (the matmul kernel's a or b) a cuBLAS operand is.
enum class GemmOperand { kA, kB };
// cublasMath_t of the device's handle: CUBLAS_DEFAULT_MATH or
// CUBLAS_TF32_TENSOR_OP_MATH.
enum class BlasMathMode { kDefault, kTf32TensorOp };

// The arguments of cublasGemmStridedBatchedEx in its own order and with its
// own names: for p < batch_count,
//   C_p = alpha * op(A_p) * op(B_p) + beta * C_p   (column-major, C_p m x n)
// where A_p starts at element p * stride_a of the operand `a_is` names, and
// so on. The algorithm (CUBLAS_GEMM_DEFAULT) is not a parameter.
struct GemmParams {
  GemmOp trans_a = GemmOp::kNoTranspose;
  GemmOp trans_b = GemmOp::kNoTranspose;
  int m = 0, n = 0, k = 0;
  GemmOperand a_is = GemmOperand::kA;  // the pointer passed as cuBLAS's A
  int lda = 1;
  int64_t stride_a = 0;                // elements
  GemmOperand b_is = GemmOperand::kB;  // the pointer passed as cuBLAS's B
  int ldb = 1;
  int64_t stride_b = 0;
  int ldc = 1;  // C is always tensord's out
  int64_t stride_c = 0;
  int batch_count = 0;
  GemmDataType data_type = GemmDataType::kF32;  // of A, B and C alike
  GemmComputeType compute_type = GemmComputeType::k32F;
  GemmScalarType scalar_type = GemmScalarType::kFloat;
  double alpha = 1, beta = 0;  // passed as scalar_type
};

// The cuBLAS call computing the row-major product `dims` describes (see
// MatMulDims) in `dtype`. float32 computes with TF32 tensor cores
// when `allow_tf32` (CUBLAS_COMPUTE_32F_FAST_TF32); float16 and bfloat16
// accumulate in float32; float64 in float64. Valid for any dims with
// non-negative sizes, k = 0 included (leading dimensions are at least 1, as
// cuBLAS requires), though the matmul kernel routes only kGemm here.
// INVALID_ARGUMENT when batch, m, n or k exceeds cuBLAS's int range
// (naming the dims); FAILED_PRECONDITION naming `device` for a dtype cuBLAS
// does not multiply (integers, bool).
absl::StatusOr<GemmParams> PlanGemm(const MatMulDims& dims, DType dtype,
                                    bool allow_tf32, std::string_view device);

// The math mode a device's cuBLAS handle is created with: TF32 tensor-op
// math when `allow_tf32`, cuBLAS's default otherwise.
BlasMathMode MathModeFor(bool allow_tf32);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_GEMM_PARAMS_H_
