// The one place where core statuses become gRPC statuses (STYLE.md 6).
//
// Handlers never build a grpc::Status by hand: they pass the absl::Status
// that core returned through FinishRpc(), which maps the code, keeps the
// message and logs the failure once: client errors at info, INTERNAL and
// UNKNOWN at error; both carry the request id, and an INTERNAL message
// returned to the client carries it too so a user report can be matched to
// the log line.
// Thread-safety: stateless apart from the spdlog logger.
#ifndef TENSORD_SERVER_GRPC_STATUS_H_
#define TENSORD_SERVER_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace tensord::server {

// Code-for-code mapping (absl and gRPC share numbering, but we map
// explicitly so an unknown code can never leak through as something else).
grpc::StatusCode ToGrpcCode(absl::StatusCode code);

// Every status message that leaves the server (and its log line) is cut to
// this many bytes: gRPC carries the message in a header, which a default
// client refuses past 8 KiB of metadata.
inline constexpr size_t kMaxStatusMessageBytes = 2048;

// Maps `status`; logs it once if it is an error. `request_id` identifies the
// RPC in logs. A message longer than kMaxStatusMessageBytes is cut there
// (core's Echo), never splitting a UTF-8 sequence.
grpc::Status FinishRpc(std::string_view method, uint64_t request_id,
                       const absl::Status& status);

}  // namespace tensord::server

#endif  // TENSORD_SERVER_GRPC_STATUS_H_
