// Internal to the server: what every RPC handler of TensorServiceImpl
// shares, whichever file it lives in — parsing a raw request, serializing
// a reply, and RpcScope, each RPC's bookkeeping.
// Thread-safety: ParseRequest and SerializeReply are pure; an RpcScope
// belongs to its one RPC.
#ifndef TENSORD_SERVER_GRPC_RPC_H_
#define TENSORD_SERVER_GRPC_RPC_H_

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/metrics.h"
#include "server/refusal_log.h"

namespace tensord::server {

// What an RpcScope counts on (TensorServiceImpl is one): request ids, the
// in-flight count, the instance id every reply carries, the refusal log
// and the metrics.
class RpcHost {
 public:
  virtual ~RpcHost() = default;
  virtual uint64_t NextRequestId() = 0;
  virtual std::atomic<int64_t>& in_flight_count() = 0;
  virtual const std::string& instance_id() const = 0;
  virtual RefusalLog* refusal_log() = 0;
  virtual Metrics* metrics() = 0;
};

// The server instance id's metadata key, on every reply (trailing).
inline constexpr char kInstanceMetadataKey[] = "tensord-instance";

// Trailing metadata naming PyTorch's exception class for a failed call
// ("IndexError", "ValueError", "TypeError"); absent for RuntimeError.
inline constexpr char kErrorKindMetadataKey[] = "tensord-error-kind";

// Parses a raw request into `req`. A request that is not one is
// INVALID_ARGUMENT saying what is wrong with it (DESIGN.md: a malformed
// request), and so is a call without a request message.
absl::Status ParseRequest(const grpc::ByteBuffer& raw,
                          google::protobuf::Message* req);

// Serializes a reply into the raw response (INTERNAL if it cannot be).
absl::Status SerializeReply(const google::protobuf::Message& resp,
                            grpc::ByteBuffer* raw);

// One RPC's bookkeeping: its request id, its start time, the in-flight
// count that graceful shutdown waits on, the instance id every reply
// carries, and the one exit through which its status is mapped, logged and
// counted.
class RpcScope {
 public:
  // `service` is borrowed and outlives the scope.
  RpcScope(RpcHost* service, grpc::CallbackServerContext* ctx,
           const char* method);
  ~RpcScope();
  RpcScope(const RpcScope&) = delete;
  RpcScope& operator=(const RpcScope&) = delete;

  // The gRPC status for `status` (mapped and logged once, server/
  // grpc_status.h), with the RPC's duration counted in the metrics.
  // A refusal (core/base/refusal.h) is also counted by reason and logged, rate-
  // limited, with the peer and the session (server/refusal_log.h). An error
  // that torch raises as another class than RuntimeError names it in the
  // trailing metadata (kErrorKindMetadataKey, core/base/error_kind.h).
  grpc::Status Finish(const absl::Status& status);
  uint64_t request_id() const { return request_id_; }
  // The session the request names, once parsed: its first 8 characters are
  // what a refusal's log line shows.
  void set_session(std::string_view session) {
    session_prefix_ = std::string(session.substr(0, 8));
  }

 private:
  RpcHost* service_;                  // borrowed
  grpc::CallbackServerContext* ctx_;  // borrowed: the RPC's
  const std::string peer_;
  std::string session_prefix_;
  const char* method_;
  const uint64_t request_id_;
  const std::chrono::steady_clock::time_point start_;
};

}  // namespace tensord::server

#endif  // TENSORD_SERVER_GRPC_RPC_H_
