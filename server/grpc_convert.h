// Conversions between the wire types (tensord.v1) and core types.
// Validation of enum values happens here; everything about shapes, sizes and
// devices is validated by core::Runtime. Thread-safety: stateless.
#ifndef TENSORD_SERVER_GRPC_CONVERT_H_
#define TENSORD_SERVER_GRPC_CONVERT_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/runtime.h"
#include "tensord/v1/tensord.pb.h"

namespace tensord::server {

// INVALID_ARGUMENT for DTYPE_UNSPECIFIED or a number this server does not
// know (a newer client, or garbage).
absl::StatusOr<core::DType> FromProto(v1::DType dtype);
v1::DType ToProto(core::DType dtype);

absl::StatusOr<core::BinaryOp> FromProto(v1::BinaryOp op);

// Op -> OpSpec: INVALID_ARGUMENT for an unset oneof, an unset operand or
// an unknown enum value. Shapes, dtypes and handles are core's business.
absl::StatusOr<core::OpSpec> FromProto(const v1::Op& op);
core::Scalar FromProto(const v1::Scalar& scalar);

// Fill -> FillSpec (defaults for zero-valued fields as the proto documents).
absl::StatusOr<core::FillSpec> FromProto(const v1::Fill& fill);

void ToProto(const core::TensorMeta& meta, v1::TensorInfo* out);
void ToProto(const core::DeviceStatus& device, v1::DeviceInfo* out);
v1::OpFamily ToProto(core::OpKind kind);

// The repeated int64 shape field as a span (no copy).
inline std::span<const int64_t> Dims(
    const google::protobuf::RepeatedField<int64_t>& shape) {
  return {shape.data(), static_cast<size_t>(shape.size())};
}

}  // namespace tensord::server

#endif  // TENSORD_SERVER_GRPC_CONVERT_H_
