#include "core/cuda/cuda_supports.h"

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "core/op_checks.h"
#include "core/status.h"

namespace tensord::core::cuda {

absl::Status SupportsOp(OpKind op, DType dtype, std::string_view device) {
  bool ok = true;
  switch (op) {
    case OpKind::kFill:
    case OpKind::kCast:
    case OpKind::kBinary:
    case OpKind::kUnary:
    case OpKind::kReduce:
    case OpKind::kWhere:
      ok = true;
      break;
    case OpKind::kRandomFill:
      ok = IsFloating(dtype);
      break;
    case OpKind::kMatMul:
      ok = dtype != DType::kBool;
      break;
  }
  return ok ? absl::OkStatus()
            : NotImplementedError(OpKindName(op), dtype, device);
}

absl::Status CheckBinary(BinaryOp op, DType dtype, std::string_view device) {
  RETURN_IF_ERROR(SupportsOp(OpKind::kBinary, dtype, device));
  RETURN_IF_ERROR(CheckBinaryOpDType(op, dtype));
  if (op == BinaryOp::kDiv && !IsFloating(dtype)) {
    return NotImplementedError(BinaryOpName(op), dtype, device);
  }
  return absl::OkStatus();
}

absl::Status CheckUnary(UnaryOp op, DType dtype, std::string_view device) {
  RETURN_IF_ERROR(SupportsOp(OpKind::kUnary, dtype, device));
  RETURN_IF_ERROR(CheckUnaryOpDType(op, dtype));
  if (IsFloatingUnary(op) && !IsFloating(dtype)) {
    return NotImplementedError(UnaryOpName(op), dtype, device);
  }
  return absl::OkStatus();
}

absl::Status CheckReduce(ReduceOp op, int64_t n, DType dtype,
                         std::string_view device) {
  RETURN_IF_ERROR(SupportsOp(OpKind::kReduce, dtype, device));
  if (n == 0 && (op == ReduceOp::kMax || op == ReduceOp::kMin ||
                 op == ReduceOp::kArgmax)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ToAbsl(ReduceOpName(op)), "(): cannot reduce over an empty dimension"));
  }
  if ((op == ReduceOp::kMean || op == ReduceOp::kNorm) && !IsFloating(dtype)) {
    return NotImplementedError(ReduceOpName(op), dtype, device);
  }
  return absl::OkStatus();
}

}  // namespace tensord::core::cuda
