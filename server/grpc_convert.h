// Conversions between the wire types (tensord.v1) and the runtime's types
// (tensor metadata, device status); those of core's pure base types are
// proto/wire/op_convert.h's, named here too. Thread-safety: stateless.
#ifndef TENSORD_SERVER_GRPC_CONVERT_H_
#define TENSORD_SERVER_GRPC_CONVERT_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/runtime/runtime.h"
#include "proto/wire/op_convert.h"
#include "tensord/v1/tensord.pb.h"

namespace tensord::server {

using wire::Dims;
using wire::FromProto;
using wire::ToProto;

void ToProto(const core::TensorMeta& meta, v1::TensorInfo* out);
void ToProto(const core::DeviceStatus& device, v1::DeviceInfo* out);

}  // namespace tensord::server

#endif  // TENSORD_SERVER_GRPC_CONVERT_H_
