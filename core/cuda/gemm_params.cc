#include "core/cuda/gemm_params.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "core/base/op_checks.h"

namespace tensord::core::cuda {

MatMulPath ChooseMatMulPath(const MatMulDims& dims, DType dtype) {
  if (dims.batch <= 0 || dims.m <= 0 || dims.n <= 0) {
    return MatMulPath::kNothing;
  }
  // Empty sums, for every dtype alike: a fill, not a gemm or kernel of
  // depth 0.
  if (dims.k == 0) return MatMulPath::kZeroFill;
  return IsFloating(dtype) ? MatMulPath::kGemm : MatMulPath::kIntegerKernel;
}

absl::StatusOr<GemmParams> PlanGemm(const MatMulDims& d, DType dtype,
                                    bool allow_tf32, std::string_view device) {
  if (d.m > INT_MAX || d.n > INT_MAX || d.k > INT_MAX || d.batch > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul dimensions (", d.m, "x", d.k, " and ", d.k, "x", d.n,
        ", batch ", d.batch, ") exceed the cuBLAS index range"));
  }
  GemmParams p;
  switch (dtype) {
    case DType::kFloat32:
      p.data_type = GemmDataType::kF32;
      p.compute_type =
          allow_tf32 ? GemmComputeType::k32FFastTF32 : GemmComputeType::k32F;
      break;
    case DType::kFloat64:
      p.data_type = GemmDataType::kF64;
      p.compute_type = GemmComputeType::k64F;
      p.scalar_type = GemmScalarType::kDouble;
      break;
    case DType::kFloat16:
      p.data_type = GemmDataType::kF16;  // tensor cores, float32 accumulation
      break;
    case DType::kBFloat16:
      p.data_type = GemmDataType::kBF16;
      break;
    default:
      return NotImplementedError("matmul", dtype, device);
  }
  // Row-major out (m x n) = a (m x k) * b (k x n) holds the same bytes as
  // column-major out^T (n x m) = b^T (n x k) * a^T (k x m), where each
  // transpose is the operand itself read column-major with its row length
  // as leading dimension. cuBLAS asks ld >= 1 even of an empty matrix.
  const int m = static_cast<int>(d.m), n = static_cast<int>(d.n),
            k = static_cast<int>(d.k);
  p.trans_a = GemmOp::kNoTranspose;
  p.trans_b = GemmOp::kNoTranspose;
  p.m = n;
  p.n = m;
  p.k = k;
  p.a_is = GemmOperand::kB;
  p.lda = std::max(n, 1);
  p.stride_a = d.b_batch_stride;
  p.b_is = GemmOperand::kA;
  p.ldb = std::max(k, 1);
  p.stride_b = d.a_batch_stride;
  p.ldc = std::max(n, 1);
  p.stride_c = d.out_batch_stride;
  p.batch_count = static_cast<int>(d.batch);
  p.alpha = 1;
  p.beta = 0;
  return p;
}

BlasMathMode MathModeFor(bool allow_tf32) {
  return allow_tf32 ? BlasMathMode::kTf32TensorOp : BlasMathMode::kDefault;
}

}  // namespace tensord::core::cuda
