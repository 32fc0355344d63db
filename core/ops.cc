#include "core/ops.h"

#include <charconv>
#include <cmath>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"

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
  switch (op) {
    case InPlaceOp::kAdd:
      return "add_";
    case InPlaceOp::kSub:
      return "sub_";
    case InPlaceOp::kMul:
      return "mul_";
    case InPlaceOp::kDiv:
      return "div_";
    case InPlaceOp::kAxpy:
      return "axpy_";
  }
  return "unknown_";
}

std::string OpName(const OpSpec& op) {
  switch (op.kind) {
    case OpSpec::Kind::kBinary:
      return std::string(BinaryOpName(op.binary));
    case OpSpec::Kind::kUnary:
      return std::string(UnaryOpName(op.unary));
    case OpSpec::Kind::kMatMul:
      return "matmul";
    case OpSpec::Kind::kLinear:
      return "linear";
    case OpSpec::Kind::kReduce:
      return std::string(ReduceOpName(op.reduce));
    case OpSpec::Kind::kPermute:
      return "permute";
    case OpSpec::Kind::kTranspose:
      return "transpose";
    case OpSpec::Kind::kReshape:
      return "reshape";
    case OpSpec::Kind::kNarrow:
      return "narrow";
    case OpSpec::Kind::kSelect:
      return "select";
    case OpSpec::Kind::kCat:
      return "cat";
    case OpSpec::Kind::kCast:
      return "to";
    case OpSpec::Kind::kInPlace:
      return std::string(InPlaceOpName(op.in_place));
    case OpSpec::Kind::kSoftmax:
      return op.log ? "log_softmax" : "softmax";
    case OpSpec::Kind::kClamp:
      return "clamp";
    case OpSpec::Kind::kWhere:
      return "where";
    case OpSpec::Kind::kConv2d:
      return "conv2d";
    case OpSpec::Kind::kMaxPool2d:
      return "max_pool2d";
    case OpSpec::Kind::kAvgPool2d:
      return "avg_pool2d";
    case OpSpec::Kind::kLoss:
      return std::string(LossName(op.loss));
    case OpSpec::Kind::kAdaptiveAvgPool2d:
      return "adaptive_avg_pool2d";
    case OpSpec::Kind::kDropout:
      return "dropout";
    case OpSpec::Kind::kRequiresGrad:
      return "requires_grad_";
    case OpSpec::Kind::kBackward:
      return "backward";
    case OpSpec::Kind::kGrad:
      return "grad";
    case OpSpec::Kind::kZeroGrad:
      return "zero_grad";
    case OpSpec::Kind::kDetach:
      return "detach";
    case OpSpec::Kind::kMoveTo:
      return "to";
    case OpSpec::Kind::kOptimizerStep:
      return absl::StrCat(ToAbsl(OptimizerName(op.optimizer.kind)), ".step");
  }
  return "unknown";
}

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
  switch (kind) {
    case LossKind::kNll:
      return "nll_loss";
    case LossKind::kCrossEntropy:
      return "cross_entropy";
    case LossKind::kMse:
      return "mse_loss";
  }
  return "loss";
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
