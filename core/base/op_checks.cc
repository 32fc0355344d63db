#include "core/base/op_checks.h"

#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/absl_compat.h"
#include "core/base/op_table.h"

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
    return NotImplementedError("pow", dtype);
  }
  return absl::OkStatus();
}

absl::Status CheckUnaryOpDType(UnaryOp op, DType dtype) {
  // The op table's rule: PyTorch's activations take floating tensors only
  // (no integer promotion, unlike exp or sigmoid); the ops that keep an
  // integer dtype each refuse bool their own way.
  const OpRow& row = RowOf(OpSpecKind::kUnary, static_cast<int>(op));
  const bool refused =
      row.integers == UnaryIntegers::kRefuse ? !IsFloating(dtype)
      : row.integers == UnaryIntegers::kKeep ? dtype == DType::kBool
                                             : false;
  if (!refused) return absl::OkStatus();
  if (!row.bool_error.empty() && dtype == DType::kBool) {
    return absl::FailedPreconditionError(ToAbsl(row.bool_error));
  }
  return NotImplementedError(row.kernel_name, dtype);
}

absl::Status NotImplementedError(std::string_view op, DType dtype,
                                 std::string_view device) {
  return absl::FailedPreconditionError(absl::StrCat(
      NotImplementedError(op, dtype).message(), " on ", ToAbsl(device)));
}

absl::Status NotImplementedError(std::string_view op, DType dtype) {
  return absl::FailedPreconditionError(
      absl::StrCat("\"", ToAbsl(op), "\" not implemented for '",
                   ToAbsl(ScalarTypeName(dtype)), "'"));
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
    case OpKind::kWhere:
      return "where";
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

absl::Status CheckBoolData(std::span<const uint8_t> bytes, uint64_t at) {
  // Any byte above 1 has a bit outside bit 0: OR-ing whole words finds that
  // at memory speed; the rare failure then finds the byte.
  uint8_t seen = 0;
  for (uint8_t b : bytes) seen |= b;
  if ((seen & 0xFE) == 0) return absl::OkStatus();
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("bool data must be 0 or 1 in every byte; byte ", at + i,
                       " is ", bytes[i]));
    }
  }
  return absl::OkStatus();
}

std::string Echo(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back up over continuation bytes (10xxxxxx) to a sequence's start.
  while (cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(ToAbsl(text.substr(0, cut)), "... (", text.size(),
                      " bytes)");
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
