#include "server/grpc_rpc.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "core/base/error_kind.h"
#include "proto/wire/parse_error.h"
#include "server/grpc_status.h"
#include "server/metrics.h"

namespace tensord::server {

absl::Status ParseRequest(const grpc::ByteBuffer& raw,
                          google::protobuf::Message* req) {
  const google::protobuf::Descriptor& type = *req->GetDescriptor();
  if (!raw.Valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the call carries no ", type.full_name(),
                     " (a unary RPC takes exactly one request message)"));
  }
  grpc::ByteBuffer copy(raw);  // shares the slices; the reader needs non-const
  grpc::ProtoBufferReader reader(&copy);
  if (reader.status().ok() && req->ParseFromZeroCopyStream(&reader)) {
    return absl::OkStatus();
  }
  // The slow path, for bad requests only: the bytes in one piece.
  grpc::Slice flat;
  if (!raw.DumpToSingleSlice(&flat).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", type.full_name(), " message cannot be read"));
  }
  return absl::InvalidArgumentError(wire::DescribeParseError(
      type, std::string_view(reinterpret_cast<const char*>(flat.begin()),
                             flat.size())));
}

absl::Status SerializeReply(const google::protobuf::Message& resp,
                            grpc::ByteBuffer* raw) {
  bool own_buffer = false;
  const grpc::Status status =
      grpc::SerializationTraits<google::protobuf::Message>::Serialize(
          resp, raw, &own_buffer);
  if (status.ok()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("the ", resp.GetTypeName(),
                   " reply does not serialize: ", status.error_message()));
}

RpcScope::RpcScope(RpcHost* service, grpc::CallbackServerContext* ctx,
                   const char* method)
    : service_(service),
      ctx_(ctx),
      peer_(ctx->peer()),
      method_(method),
      request_id_(service->NextRequestId()),
      start_(std::chrono::steady_clock::now()) {
  service_->in_flight_count().fetch_add(1);
  ctx->AddTrailingMetadata(kInstanceMetadataKey, service_->instance_id());
}

RpcScope::~RpcScope() { service_->in_flight_count().fetch_sub(1); }

grpc::Status RpcScope::Finish(const absl::Status& status) {
  grpc::Status mapped = FinishRpc(method_, request_id_, status);
  service_->refusal_log()->Note(status, peer_, session_prefix_, method_);
  if (const core::ErrorKind kind = core::ErrorKindOf(status);
      kind != core::ErrorKind::kRuntimeError) {
    ctx_->AddTrailingMetadata(kErrorKindMetadataKey,
                              std::string(core::ErrorKindName(kind)));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
          .count();
  service_->metrics()->RecordRpc(
      method_, absl::StatusCodeToString(status.code()), seconds);
  return mapped;
}

}  // namespace tensord::server
