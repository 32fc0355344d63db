#include "core/op_checks.h"

#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/absl_compat.h"

namespace tensord::core {

absl::Status ValidateDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kBool:
    case DType::kFloat16:
    case DType::kBFloat16:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid dtype value ", static_cast<int>(dtype)));
}

absl::Status CheckBinaryOpDType(BinaryOp op, DType dtype) {
  if (op == BinaryOp::kSub && dtype == DType::kBool) {
    return absl::FailedPreconditionError(
        "Subtraction, the `-` operator, with two bool tensors is not "
        "supported. Use the `^` or `logical_xor()` operator instead.");
  }
  if (op == BinaryOp::kPow && dtype == DType::kBool) {
    return NotImplementedError("pow", dtype, "any device");
  }
  return absl::OkStatus();
}

absl::Status CheckUnaryOpDType(UnaryOp op, DType dtype) {
  if (dtype != DType::kBool) return absl::OkStatus();
  if (op == UnaryOp::kNeg) {
    return absl::FailedPreconditionError(
        "Negation, the `-` operator, on a bool tensor is not supported. If "
        "you are trying to invert a mask, use the `~` or `logical_not()` "
        "operator instead.");
  }
  if (op == UnaryOp::kAbs || op == UnaryOp::kRelu) {
    return NotImplementedError(UnaryOpName(op), dtype, "any device");
  }
  return absl::OkStatus();
}

absl::Status NotImplementedError(std::string_view op, DType dtype,
                                 std::string_view device) {
  return absl::FailedPreconditionError(
      absl::StrCat("\"", ToAbsl(op), "\" not implemented for '",
                   ToAbsl(DTypeName(dtype)), "' on ", ToAbsl(device)));
}

std::string_view OpKindName(OpKind op) {
  switch (op) {
    case OpKind::kFill:
      return "fill";
    case OpKind::kRandomFill:
      return "random fill";
    case OpKind::kCast:
      return "cast";
    case OpKind::kBinary:
      return "binary";
    case OpKind::kMatMul:
      return "matmul";
    case OpKind::kUnary:
      return "unary";
    case OpKind::kReduce:
      return "reduce";
  }
  return "unknown";
}

absl::Status CheckRange(const Buffer& buffer, size_t offset, size_t bytes) {
  if (offset > buffer.size() || bytes > buffer.size() - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("copy of ", bytes, " bytes at offset ", offset,
                     " is outside a buffer of ", buffer.size(), " bytes"));
  }
  return absl::OkStatus();
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " bytes");
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

}  // namespace tensord::core
