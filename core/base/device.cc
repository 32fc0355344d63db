#include "core/base/device.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/base/op_checks.h"
#include "core/base/op_table.h"

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
  return RowOf(OpSpecKind::kBinary, static_cast<int>(op)).name;
}

bool IsComparison(BinaryOp op) {
  switch (op) {
    case BinaryOp::kEq:
    case BinaryOp::kNe:
    case BinaryOp::kLt:
    case BinaryOp::kLe:
    case BinaryOp::kGt:
    case BinaryOp::kGe:
      return true;
    default:
      return false;
  }
}

std::string_view UnaryOpName(UnaryOp op) {
  return RowOf(OpSpecKind::kUnary, static_cast<int>(op)).name;
}

bool IsFloatingUnary(UnaryOp op) {
  return RowOf(OpSpecKind::kUnary, static_cast<int>(op)).integers !=
         UnaryIntegers::kKeep;
}

std::string_view ReduceOpName(ReduceOp op) {
  return RowOf(OpSpecKind::kReduce, static_cast<int>(op)).name;
}

Capabilities Capabilities::Common() {
  Capabilities caps;
  for (OpKind op : {OpKind::kFill, OpKind::kCast, OpKind::kBinary,
                    OpKind::kUnary, OpKind::kReduce, OpKind::kWhere}) {
    caps.AllowAll(op);
  }
  for (DType dtype : kEveryDType) {
    if (dtype != DType::kBool) caps.Allow(OpKind::kMatMul, dtype);
  }
  return caps;
}

Capabilities& Capabilities::Allow(OpKind op, DType dtype) {
  dtypes_[static_cast<size_t>(op)] |= uint32_t{1} << static_cast<int>(dtype);
  return *this;
}

Capabilities& Capabilities::AllowAll(OpKind op) {
  for (DType dtype : kEveryDType) Allow(op, dtype);
  return *this;
}

bool Capabilities::Has(OpKind op, DType dtype) const {
  const int bit = static_cast<int>(dtype);
  return bit >= 0 && bit < 32 &&
         (dtypes_[static_cast<size_t>(op)] >> bit & 1) != 0;
}

absl::Status Capabilities::Check(OpKind op, DType dtype,
                                 std::string_view device) const {
  if (Has(op, dtype)) return absl::OkStatus();
  return NotImplementedError(OpKindName(op), dtype, device);
}

std::string_view KernelKindName(KernelKind kind) {
  switch (kind) {
    case KernelKind::kFill:
      return "fill";
    case KernelKind::kCast:
      return "cast";
    case KernelKind::kBinary:
      return "binary";
    case KernelKind::kUnary:
      return "unary";
    case KernelKind::kReduce:
      return "reduce";
    case KernelKind::kMatMul:
      return "matmul";
    case KernelKind::kPermute:
      return "permute";
    case KernelKind::kCopyBlocks:
      return "copy_blocks";
    case KernelKind::kWhere:
      return "where";
    case KernelKind::kIm2Col:
      return "im2col";
    case KernelKind::kCol2Im:
      return "col2im";
    case KernelKind::kConv2d:
      return "conv2d";
    case KernelKind::kBatchNorm:
      return "batch_norm";
    case KernelKind::kPool2d:
      return "pool2d";
  }
  return "unknown";
}

int KernelArity(KernelKind kind) {
  switch (kind) {
    case KernelKind::kFill:
      return 0;
    case KernelKind::kCast:
    case KernelKind::kUnary:
    case KernelKind::kReduce:
    case KernelKind::kPermute:
    case KernelKind::kCopyBlocks:
    case KernelKind::kIm2Col:
    case KernelKind::kCol2Im:
      return 1;
    case KernelKind::kBinary:
    case KernelKind::kMatMul:
      return 2;
    case KernelKind::kWhere:
    case KernelKind::kPool2d:  // two operands and the workspace
      return 3;
    case KernelKind::kConv2d:  // two operands, the bias and the workspace
      return 4;
    case KernelKind::kBatchNorm:  // x and four a pass may read
      return 5;
  }
  return -1;
}

// KernelKind names KernelArgs' alternatives in order.
static_assert(
    std::is_same_v<std::variant_alternative_t<
                       static_cast<size_t>(KernelKind::kFill), KernelArgs>,
                   FillSpec>);
static_assert(
    std::is_same_v<std::variant_alternative_t<
                       static_cast<size_t>(KernelKind::kMatMul), KernelArgs>,
                   MatMulDims>);
static_assert(std::is_same_v<
              std::variant_alternative_t<
                  static_cast<size_t>(KernelKind::kCopyBlocks), KernelArgs>,
              BlockCopy>);
static_assert(static_cast<int>(KernelKind::kBatchNorm) + 1 == kKernelKindCount);

absl::Status CheckKernelCall(const KernelCall& call, std::string_view device) {
  const int want = KernelArity(call.kind());
  bool ok = static_cast<int>(call.inputs.size()) == want &&
            call.out.buffer != nullptr;
  for (const TensorRef& in : call.inputs) ok = ok && in.buffer != nullptr;
  if (ok) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      ToAbsl(device), ": malformed ", ToAbsl(KernelKindName(call.kind())),
      " kernel call (", call.inputs.size(), " inputs of ", want,
      ", or a tensor without a buffer)"));
}

namespace {
std::atomic<uint64_t>& DeviceBytes() {
  static auto* bytes = new std::atomic<uint64_t>(0);  // read at exit
  return *bytes;
}
}  // namespace

void NoteDeviceAllocation(uint64_t bytes) { DeviceBytes().fetch_add(bytes); }
uint64_t DeviceBytesAllocated() { return DeviceBytes().load(); }

}  // namespace tensord::core
