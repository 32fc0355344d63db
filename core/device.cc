#include "core/device.h"

namespace tensord::core {

std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

std::string_view BinaryOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "add";
    case BinaryOp::kSub:
      return "sub";
    case BinaryOp::kMul:
      return "mul";
    case BinaryOp::kDiv:
      return "div";
  }
  return "unknown";
}

}  // namespace tensord::core
