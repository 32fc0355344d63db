#include "core/base/ops.h"

#include <charconv>
#include <cmath>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/base/op_table.h"

namespace tensord::core {

std::string Scalar::ToString() const {
  return is_integral ? absl::StrCat(i) : PythonFloat(f);
}

std::string PythonFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char text[32];
  // Shortest round trip: fixed below 1e16 and from 1e-4, else scientific,
  // as Python's repr.
  const double magnitude = std::fabs(v);
  const bool scientific =
      magnitude != 0 && (magnitude >= 1e16 || magnitude < 1e-4);
  const auto [end, ec] = std::to_chars(
      text, text + sizeof(text), v,
      scientific ? std::chars_format::scientific : std::chars_format::fixed);
  // (to_chars writes at least two exponent digits, as Python: 1e-05.)
  std::string out(text, ec == std::errc() ? end : text);
  if (!scientific && out.find('.') == std::string::npos) out += ".0";
  return out;
}

std::string_view InPlaceOpName(InPlaceOp op) {
  return RowOf(OpSpecKind::kInPlace, static_cast<int>(op)).name;
}

std::string OpName(const OpSpec& op) { return std::string(RowOf(op).name); }

std::string_view OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "SGD";
    case OptimizerKind::kAdam:
      return "Adam";
    case OptimizerKind::kAdamW:
      return "AdamW";
  }
  return "optimizer";
}

int OptimizerStateCount(const OptimizerArgs& args) {
  if (args.kind == OptimizerKind::kSgd) return args.momentum != 0 ? 1 : 0;
  return 2;
}

std::string_view LossName(LossKind kind) {
  return RowOf(OpSpecKind::kLoss, static_cast<int>(kind)).name;
}

BinaryOp InPlaceBinaryOp(InPlaceOp op) {
  switch (op) {
    case InPlaceOp::kSub:
      return BinaryOp::kSub;
    case InPlaceOp::kMul:
      return BinaryOp::kMul;
    case InPlaceOp::kDiv:
      return BinaryOp::kDiv;
    case InPlaceOp::kAdd:
    case InPlaceOp::kAxpy:
      break;
  }
  return BinaryOp::kAdd;
}

}  // namespace tensord::core
