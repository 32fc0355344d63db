// Conversions between the wire types (tensord.v1) and core's pure base
// types (dtypes, ops, fills, capability tables), shared by the server and
// the client library (which plans ops locally with the same rules).
// Validation of enum values happens here; shapes, sizes, handles and
// devices are the planner's and the runtime's business.
// Thread-safety: stateless.
#ifndef TENSORD_PROTO_WIRE_OP_CONVERT_H_
#define TENSORD_PROTO_WIRE_OP_CONVERT_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/ops.h"
#include "tensord/v1/tensord.pb.h"

namespace tensord::wire {

namespace v1 = ::tensord::v1;

// INVALID_ARGUMENT for DTYPE_UNSPECIFIED or a number this build does not
// know (a newer peer, or garbage).
absl::StatusOr<core::DType> FromProto(v1::DType dtype);
v1::DType ToProto(core::DType dtype);

absl::StatusOr<core::BinaryOp> FromProto(v1::BinaryOp op);

// Op -> OpSpec: INVALID_ARGUMENT for an unset oneof, an unset operand or
// an unknown enum value. Shapes, dtypes and handles are core's business.
absl::StatusOr<core::OpSpec> FromProto(const v1::Op& op);
// The same into `spec`, a default OpSpec (an Execute's list converts each
// op in place: no OpSpec moved per op).
absl::Status FromProto(const v1::Op& op, core::OpSpec& spec);
core::Scalar FromProto(const v1::Scalar& scalar);

// Fill -> FillSpec (defaults for zero-valued fields as the proto documents).
absl::StatusOr<core::FillSpec> FromProto(const v1::Fill& fill);

// Capability tables (DeviceInfo.capabilities): a family this build does
// not know is skipped.
v1::OpFamily ToProto(core::OpKind kind);
absl::StatusOr<core::OpKind> FromProto(v1::OpFamily family);
core::Capabilities FromProto(
    const google::protobuf::RepeatedPtrField<v1::Capability>& caps);
void ToProto(const core::Capabilities& caps,
             google::protobuf::RepeatedPtrField<v1::Capability>* out);

// The repeated int64 shape field as a span (no copy).
inline std::span<const int64_t> Dims(
    const google::protobuf::RepeatedField<int64_t>& shape) {
  return {shape.data(), static_cast<size_t>(shape.size())};
}

}  // namespace tensord::wire

#endif  // TENSORD_PROTO_WIRE_OP_CONVERT_H_
