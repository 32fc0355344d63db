#include "core/cuda/cuda_supports.h"

#include "core/op_checks.h"

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

}  // namespace tensord::core::cuda
