#include "server/grpc_status.h"

#include <string>

#include "core/base/absl_compat.h"
#include "core/base/op_checks.h"
#include "spdlog/spdlog.h"

namespace tensord::server {

grpc::StatusCode ToGrpcCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return grpc::StatusCode::OK;
    case absl::StatusCode::kCancelled: return grpc::StatusCode::CANCELLED;
    case absl::StatusCode::kUnknown: return grpc::StatusCode::UNKNOWN;
    case absl::StatusCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case absl::StatusCode::kDeadlineExceeded: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case absl::StatusCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case absl::StatusCode::kAlreadyExists: return grpc::StatusCode::ALREADY_EXISTS;
    case absl::StatusCode::kPermissionDenied: return grpc::StatusCode::PERMISSION_DENIED;
    case absl::StatusCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case absl::StatusCode::kFailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case absl::StatusCode::kAborted: return grpc::StatusCode::ABORTED;
    case absl::StatusCode::kOutOfRange: return grpc::StatusCode::OUT_OF_RANGE;
    case absl::StatusCode::kUnimplemented: return grpc::StatusCode::UNIMPLEMENTED;
    case absl::StatusCode::kInternal: return grpc::StatusCode::INTERNAL;
    case absl::StatusCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case absl::StatusCode::kDataLoss: return grpc::StatusCode::DATA_LOSS;
    case absl::StatusCode::kUnauthenticated: return grpc::StatusCode::UNAUTHENTICATED;
    default: return grpc::StatusCode::INTERNAL;
  }
}

grpc::Status FinishRpc(std::string_view method, uint64_t request_id,
                       const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const grpc::StatusCode code = ToGrpcCode(status.code());
  const std::string code_name = absl::StatusCodeToString(status.code());
  // Client errors are expected traffic (info); a bug is an error.
  const auto level = (code == grpc::StatusCode::INTERNAL ||
                      code == grpc::StatusCode::UNKNOWN)
                         ? spdlog::level::err
                         : spdlog::level::info;
  std::string message =
      core::Echo(core::FromAbsl(status.message()), kMaxStatusMessageBytes);
  spdlog::log(level, "rpc {} request={} failed: {}: {}", method, request_id,
              code_name, message);
  if (code == grpc::StatusCode::INTERNAL) {
    message += " (request id " + std::to_string(request_id) + ")";
  }
  return grpc::Status(code, message);
}

}  // namespace tensord::server
