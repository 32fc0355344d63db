#include "server/grpc_service.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/descriptor.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <isa-l/crc.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/op_table.h"
#include "core/base/status.h"
#include "core/runtime/program.h"
#include "core/runtime/shared_memory.h"
#include "proto/wire/bulk.h"
#include "proto/wire/parse_error.h"
#include "server/grpc_convert.h"
#include "server/grpc_rpc.h"
#include "server/grpc_status.h"
#include "server/list_page.h"

namespace tensord::server {
namespace {

absl::Status FillTensor(const absl::StatusOr<core::TensorMeta>& meta,
                        v1::TensorResponse* resp) {
  if (!meta.ok()) return meta.status();
  ToProto(*meta, resp->mutable_tensor());
  return absl::OkStatus();
}

// The client's request id (metadata tensord-request-id), or "" for none.
std::string RequestIdOf(const grpc::CallbackServerContext& ctx) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find(kRequestIdMetadataKey);
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

std::string NewInstanceId() {
  std::random_device rd;
  const uint64_t id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return absl::StrFormat("%016x", id);
}

}  // namespace

// The unary RPCs: each method's name and its adapter over its typed
// handler (Mutating: the release list and the request-id dedupe).
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
TensorServiceImpl::Stream(grpc::CallbackServerContext* ctx) {
  return NewStreamReactor(this, ctx);
}

const TensorServiceImpl::UnaryRpc TensorServiceImpl::kUnaryRpcs[] = {
    {"ListDevices",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::ListDevicesImpl>},
    {"OpenSession",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::OpenSessionImpl>},
    {"GetLimits",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::GetLimitsImpl>},
    {"KeepAlive",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::KeepAliveImpl>},
    {"CloseSession",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::CloseSessionImpl>},
    {"Create", &TensorServiceImpl::MutatingOf<&TensorServiceImpl::CreateImpl>},
    {"To", &TensorServiceImpl::MutatingOf<&TensorServiceImpl::ToImpl>},
    {"Binary", &TensorServiceImpl::MutatingOf<&TensorServiceImpl::BinaryImpl>},
    {"MatMul", &TensorServiceImpl::MutatingOf<&TensorServiceImpl::MatMulImpl>},
    {"Run", &TensorServiceImpl::MutatingOf<&TensorServiceImpl::RunImpl>},
    {"Execute",
     &TensorServiceImpl::MutatingOf<&TensorServiceImpl::ExecuteImpl>},
    {"RegisterProgram",
     &TensorServiceImpl::MutatingOf<&TensorServiceImpl::RegisterProgramImpl>},
    {"RunProgram",
     &TensorServiceImpl::MutatingOf<&TensorServiceImpl::RunProgramImpl>},
    {"ListPrograms",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::ListProgramsImpl>},
    {"ReleaseProgram",
     &TensorServiceImpl::MutatingOf<&TensorServiceImpl::ReleaseProgramImpl>},
    {"CreateGroup",
     &TensorServiceImpl::MutatingOf<&TensorServiceImpl::CreateGroupImpl>},
    {"Collective",
     &TensorServiceImpl::MutatingOf<&TensorServiceImpl::CollectiveImpl>},
    {"ListGroups",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::ListGroupsImpl>},
    {"DestroyGroup",
     &TensorServiceImpl::MutatingOf<&TensorServiceImpl::DestroyGroupImpl>},
    {"Read", &TensorServiceImpl::UnaryOf<&TensorServiceImpl::ReadImpl>},
    {"Release",
     &TensorServiceImpl::MutatingOf<&TensorServiceImpl::ReleaseImpl>},
    {"GetTensor",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::GetTensorImpl>},
    {"ListTensors",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::ListTensorsImpl>},
    {"ListSessions",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::ListSessionsImpl>},
    {"ListAllTensors",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::ListAllTensorsImpl>},
    {"GetStats", &TensorServiceImpl::UnaryOf<&TensorServiceImpl::GetStatsImpl>},
    {"RegisterSharedMemory", &TensorServiceImpl::MutatingOf<
                                 &TensorServiceImpl::RegisterSharedMemoryImpl>},
    {"UnregisterSharedMemory",
     &TensorServiceImpl::MutatingOf<
         &TensorServiceImpl::UnregisterSharedMemoryImpl>},
    {"UploadFromSharedMemory",
     &TensorServiceImpl::MutatingOf<
         &TensorServiceImpl::UploadFromSharedMemoryImpl>},
    {"FetchToSharedMemory",
     &TensorServiceImpl::UnaryOf<&TensorServiceImpl::FetchToSharedMemoryImpl>},
    {"GrantTransfer",
     &TensorServiceImpl::MutatingOf<&TensorServiceImpl::GrantTransferImpl>},
    {"Import", &TensorServiceImpl::MutatingOf<&TensorServiceImpl::ImportImpl>},
};

TensorServiceImpl::TensorServiceImpl(core::Runtime* runtime, Metrics* metrics,
                                     const TokenAuthenticator* auth)
    : runtime_(runtime),
      metrics_(metrics),
      refusal_log_(metrics),
      auth_(auth),
      instance_id_(NewInstanceId()) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::TensorService::service_full_name());
  for (const UnaryRpc& rpc : kUnaryRpcs) {
    // gRPC numbers a service's methods in the proto's order.
    const google::protobuf::MethodDescriptor* method =
        service->FindMethodByName(rpc.method);
    if (method == nullptr) std::abort();  // a row names no method
    MarkMethodRawCallback(
        method->index(),
        new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer,
                                                 grpc::ByteBuffer>(
            [this, &rpc](grpc::CallbackServerContext* ctx,
                         const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
              return (this->*rpc.serve)(ctx, rpc.method, req, resp);
            }));
  }
}

absl::Status TensorServiceImpl::CheckServing(
    const grpc::CallbackServerContext* ctx) const {
  if (draining_.load()) {
    return absl::UnavailableError("server is shutting down");
  }
  if (auth_ != nullptr) return auth_->Check(ctx->client_metadata());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* TensorServiceImpl::Serve(
    grpc::CallbackServerContext* ctx, const char* method,
    const grpc::ByteBuffer& raw_req, google::protobuf::Message* req,
    grpc::ByteBuffer* raw_resp, const google::protobuf::Message& resp,
    absl::FunctionRef<absl::Status()> body) {
  RpcScope scope(this, ctx, method);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::Status status = CheckServing(ctx);
  if (status.ok()) status = ParseRequest(raw_req, req);
  if (status.ok()) {
    // Named in a refusal's log line (nothing of an unauthenticated request
    // is parsed, so its refusal names no session).
    const google::protobuf::FieldDescriptor* field =
        req->GetDescriptor()->FindFieldByName("session");
    if (field != nullptr &&
        field->type() == google::protobuf::FieldDescriptor::TYPE_STRING &&
        !field->is_repeated()) {
      scope.set_session(req->GetReflection()->GetString(*req, field));
    }
    status = body();
  }
  if (status.ok()) status = SerializeReply(resp, raw_resp);
  reactor->Finish(scope.Finish(status));
  return reactor;
}

template <typename Req, typename Resp>
grpc::ServerUnaryReactor* TensorServiceImpl::Unary(
    grpc::CallbackServerContext* ctx, const char* method,
    const grpc::ByteBuffer* raw_req, grpc::ByteBuffer* raw_resp,
    Handler<Req, Resp> handler) {
  // The request's messages on an arena: an Execute of 10,000 ops is 40,000
  // of them, allocated and freed one by one otherwise.
  google::protobuf::Arena arena;
  Req& req = *google::protobuf::Arena::CreateMessage<Req>(&arena);
  Resp resp;
  return Serve(ctx, method, *raw_req, &req, raw_resp, resp, [&] {
    const auto pinned = PinSession(req);
    return (this->*handler)(ctx, req, &resp);
  });
}

template <typename Req, typename Resp>
grpc::ServerUnaryReactor* TensorServiceImpl::Mutating(
    grpc::CallbackServerContext* ctx, const char* method,
    const grpc::ByteBuffer* raw_req, grpc::ByteBuffer* raw_resp,
    Handler<Req, Resp> handler) {
  google::protobuf::Arena arena;  // as Unary's
  Req& req = *google::protobuf::Arena::CreateMessage<Req>(&arena);
  Resp resp;
  return Serve(ctx, method, *raw_req, &req, raw_resp, resp, [&] {
    const auto pinned = PinSession(req);
    RETURN_IF_ERROR(ReleaseListed(req));
    return Deduplicated(*ctx, req.session(), &resp,
                        [&] { return (this->*handler)(ctx, req, &resp); });
  });
}

template <typename Req>
absl::Status TensorServiceImpl::ReleaseListed(const Req& req) {
  if constexpr (requires { req.release(); }) {
    if (req.release_size() > static_cast<int>(kMaxReleaseHandles)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "release lists ", req.release_size(), " handles; at most ",
          kMaxReleaseHandles, " per request (Limits.max_release_handles)"));
    }
    if (!req.release().empty()) {
      runtime_->ReleaseIfPresent(
          req.session(), std::span<const uint64_t>(req.release().data(),
                                                   req.release().size()));
    }
  }
  return absl::OkStatus();
}

template <typename Req>
std::unique_ptr<core::Runtime::CallScope> TensorServiceImpl::PinSession(
    const Req& req) {
  if constexpr (requires { req.session(); }) {
    if (absl::StatusOr<std::unique_ptr<core::Runtime::CallScope>> call =
            runtime_->BeginCall(req.session());
        call.ok()) {
      return std::move(*call);
    }
  }
  return nullptr;
}

absl::Status TensorServiceImpl::Deduplicated(
    const grpc::CallbackServerContext& ctx, const std::string& session,
    google::protobuf::Message* resp, absl::FunctionRef<absl::Status()> body) {
  const std::string id = RequestIdOf(ctx);
  if (id.empty()) return body();
  ASSIGN_OR_RETURN(std::optional<std::string> remembered,
                   runtime_->BeginRequest(session, id));
  if (remembered.has_value()) {
    if (!resp->ParseFromString(*remembered)) {
      return absl::InternalError("a remembered response does not parse");
    }
    return absl::OkStatus();
  }
  absl::Status status = body();
  if (status.ok()) {
    const std::string bytes = resp->SerializeAsString();
    runtime_->EndRequest(session, id, &bytes);
  } else {
    runtime_->EndRequest(session, id, nullptr);
  }
  return status;
}

// The requests with a `release` list (the stream runs them too).
template absl::Status TensorServiceImpl::ReleaseListed(
    const v1::CreateRequest& req);
template absl::Status TensorServiceImpl::ReleaseListed(
    const v1::ToRequest& req);
template absl::Status TensorServiceImpl::ReleaseListed(
    const v1::RunRequest& req);
template absl::Status TensorServiceImpl::ReleaseListed(
    const v1::ReleaseRequest& req);

absl::Status TensorServiceImpl::CheckTransfers() const {
  if (transfers_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "moves between nodes are off on this server: start it with "
      "--node-name, --node-token-file and --peers or --peer-address-pattern");
}

absl::Status TensorServiceImpl::GrantTransferImpl(
    grpc::CallbackServerContext* ctx, const v1::GrantTransferRequest& req,
    v1::GrantTransferResponse* resp) {
  RETURN_IF_ERROR(CheckTransfers());
  return transfers_->Grant(req, resp);
}

absl::Status TensorServiceImpl::ImportImpl(grpc::CallbackServerContext* ctx,
                                           const v1::ImportRequest& req,
                                           v1::TensorResponse* resp) {
  RETURN_IF_ERROR(CheckTransfers());
  return transfers_->Import(req, resp);
}

absl::Status TensorServiceImpl::ListDevicesImpl(
    grpc::CallbackServerContext* ctx, const v1::ListDevicesRequest& req,
    v1::ListDevicesResponse* resp) {
  for (const core::DeviceStatus& d : runtime_->ListDevices()) {
    ToProto(d, resp->add_devices());
  }
  resp->set_server_version(TENSORD_VERSION);
  resp->set_node(runtime_->node_name());
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::OpenSessionImpl(
    grpc::CallbackServerContext* ctx, const v1::OpenSessionRequest& req,
    v1::OpenSessionResponse* resp) {
  ASSIGN_OR_RETURN(
      core::SessionLease lease,
      runtime_->OpenSession(req.client_name(),
                            std::chrono::milliseconds(req.ttl_ms())));
  resp->set_session(std::move(lease.id));
  resp->set_ttl_ms(lease.ttl.count());
  *resp->mutable_limits() = Limits();
  return absl::OkStatus();
}

v1::Limits TensorServiceImpl::Limits() const {
  const core::RuntimeLimits core = runtime_->limits();
  v1::Limits limits;
  limits.set_max_message_bytes(max_message_bytes_);
  limits.set_max_inline_bytes(max_inline_bytes_);
  limits.set_max_read_bytes(kMaxFetchChunkBytes);
  limits.set_default_fetch_chunk_bytes(kDefaultFetchChunkBytes);
  limits.set_max_tensor_bytes(core.max_tensor_bytes);
  limits.set_session_max_bytes(core.session_max_bytes);
  limits.set_session_max_tensors(core.session_max_tensors);
  limits.set_max_sessions(core.max_sessions);
  limits.set_default_session_ttl_ms(core.default_session_ttl.count());
  limits.set_min_session_ttl_ms(core.min_session_ttl.count());
  limits.set_max_session_ttl_ms(core.max_session_ttl.count());
  limits.set_max_device_name_bytes(core::kMaxDeviceNameBytes);
  limits.set_max_tag_bytes(core::kMaxTagBytes);
  limits.set_max_client_name_bytes(core::kMaxClientNameBytes);
  limits.set_max_request_id_bytes(core.max_request_id_bytes);
  limits.set_max_rank(core::kMaxRank);
  limits.set_max_shared_memory_regions(core.session_max_regions);
  limits.set_max_list_page_size(kMaxListPageSize);
  limits.set_max_release_handles(kMaxReleaseHandles);
  limits.set_max_stream_commands(kMaxStreamCommands);
  limits.set_max_stream_unacknowledged(kMaxStreamUnacknowledged);
  limits.set_max_session_programs(core.session_max_programs);
  limits.set_max_program_ops(core::kMaxProgramOps);
  limits.set_max_program_inputs(core::kMaxProgramInputs);
  limits.set_max_session_groups(core.session_max_groups);
  limits.set_max_group_devices(core::kMaxGroupDevices);
  limits.set_collective_timeout_ms(core.collective_timeout.count());
  return limits;
}

absl::Status TensorServiceImpl::GetLimitsImpl(grpc::CallbackServerContext* ctx,
                                              const v1::GetLimitsRequest& req,
                                              v1::Limits* resp) {
  *resp = Limits();
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::KeepAliveImpl(grpc::CallbackServerContext* ctx,
                                              const v1::KeepAliveRequest& req,
                                              v1::KeepAliveResponse* resp) {
  ASSIGN_OR_RETURN(std::chrono::milliseconds ttl,
                   runtime_->KeepAlive(req.session()));
  resp->set_ttl_ms(ttl.count());
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::CloseSessionImpl(
    grpc::CallbackServerContext* ctx, const v1::CloseSessionRequest& req,
    v1::CloseSessionResponse* resp) {
  ASSIGN_OR_RETURN(core::SessionCloseStats stats,
                   runtime_->CloseSession(req.session()));
  resp->set_released_tensors(stats.released_tensors);
  resp->set_released_bytes(stats.released_bytes);
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::CreateImpl(grpc::CallbackServerContext* ctx,
                                           const v1::CreateRequest& req,
                                           v1::TensorResponse* resp) {
  ASSIGN_OR_RETURN(core::DType dtype, FromProto(req.dtype()));
  switch (req.source_case()) {
    case v1::CreateRequest::kData: {
      const std::string& data = req.data();
      if (max_inline_bytes_ != 0 && data.size() > max_inline_bytes_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inline data is ", data.size(),
            " bytes; the server accepts at most ", max_inline_bytes_,
            " bytes inline in Create (--max-inline-bytes): send larger "
            "tensors with Upload"));
      }
      return FillTensor(
          runtime_->CreateFromData(
              req.session(), req.device(), dtype, Dims(req.shape()),
              {reinterpret_cast<const uint8_t*>(data.data()), data.size()},
              req.tag()),
          resp);
    }
    case v1::CreateRequest::kFill: {
      ASSIGN_OR_RETURN(core::FillSpec fill, FromProto(req.fill()));
      return FillTensor(runtime_->CreateFilled(req.session(), req.device(),
                                               dtype, Dims(req.shape()), fill,
                                               req.fill().end(), req.tag()),
                        resp);
    }
    default:
      return absl::InvalidArgumentError(
          "Create needs a source: set either `data` or `fill`");
  }
}

// Reads an upload stream: the header allocates the tensor, every message's
// data is appended in place, end of stream registers it. Any error finishes
// the RPC at once; destroying the Upload frees its memory. Messages arrive
// raw: their `data` goes from gRPC's slices onto the device in one copy.
class UploadReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  UploadReactor(TensorServiceImpl* service, grpc::CallbackServerContext* ctx,
                grpc::ByteBuffer* resp)
      : service_(service),
        resp_(resp),
        scope_(service, ctx, "Upload"),
        request_id_(RequestIdOf(*ctx)) {
    absl::Status serving = service_->CheckServing(ctx);
    if (!serving.ok()) {
      Fail(serving);
      return;
    }
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call broke)
      Complete();
      return;
    }
    absl::Status status = Consume();
    if (!status.ok()) {
      Fail(status);
      return;
    }
    if (replayed_) {  // a retry of a finished upload: its first response
      Reply(replayed_response_);
      Finish(scope_.Finish(absl::OkStatus()));
      return;
    }
    message_.Clear();
    StartRead(&message_);
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Consume() {
    ++messages_;
    v1::UploadRequest fields;  // every field but `data`
    wire::BulkField data;
    std::string error;
    if (!wire::ScanBulkMessage(&message_, kUploadDataField, &fields, &data,
                               &error)) {
      // The slow path, for bad messages only: the walker says what and
      // where (as for the unary RPCs' requests).
      grpc::Slice flat;
      std::optional<std::string> why;
      if (message_.DumpToSingleSlice(&flat).ok()) {
        why = wire::FindParseError(
            *v1::UploadRequest::descriptor(),
            std::string_view(reinterpret_cast<const char*>(flat.begin()),
                             flat.size()));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "Upload message #", messages_, " is not a tensord.v1.UploadRequest: ",
          why.has_value() ? *why : error));
    }
    if (data.count > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Upload message #", messages_, " carries `data` ",
                       data.count, " times; send one chunk per message"));
    }
    if (upload_ == nullptr) {
      if (!fields.has_header()) {
        return absl::InvalidArgumentError(
            "the first Upload message must carry the header (session, "
            "device, dtype, shape)");
      }
      const v1::UploadRequest::Header& h = fields.header();
      scope_.set_session(h.session());  // named in a refusal's log line
      if (!request_id_.empty()) {
        ASSIGN_OR_RETURN(
            std::optional<std::string> remembered,
            service_->runtime_->BeginRequest(h.session(), request_id_));
        if (remembered.has_value()) {
          replayed_ = true;
          replayed_response_ = std::move(*remembered);
          return absl::OkStatus();
        }
        session_ = h.session();  // the request is ours to end
      }
      ASSIGN_OR_RETURN(core::DType dtype, FromProto(h.dtype()));
      ASSIGN_OR_RETURN(upload_, service_->runtime_->BeginUpload(
                                    h.session(), h.device(), dtype,
                                    Dims(h.shape()), h.tag()));
    } else if (fields.has_header()) {
      return absl::InvalidArgumentError(
          "only the first Upload message may carry a header");
    }
    if (data.count == 0) return absl::OkStatus();
    absl::Status status;
    const bool read = wire::ForEachBulkPiece(
        &message_, kUploadDataField,
        [&](const uint8_t* bytes, size_t n) {
          status = upload_->Append({bytes, n});
          return status.ok();
        },
        &error);
    if (!status.ok()) return status;
    if (!read) {
      return absl::InvalidArgumentError(
          absl::StrCat("Upload message #", messages_, ": ", error));
    }
    return absl::OkStatus();
  }

  // Sets the raw reply to the serialized TensorResponse `bytes`.
  void Reply(const std::string& bytes) {
    grpc::Slice slice(bytes);
    *resp_ = grpc::ByteBuffer(&slice, 1);
  }

  void Complete() {
    if (upload_ == nullptr) {
      Fail(absl::InvalidArgumentError(
          "Upload stream ended before its header arrived"));
      return;
    }
    v1::TensorResponse response;
    absl::Status status = FillTensor(upload_->Finish(), &response);
    upload_.reset();
    if (!status.ok()) {
      Fail(status);
      return;
    }
    const std::string bytes = response.SerializeAsString();
    Reply(bytes);
    EndRequest(&bytes);
    Finish(scope_.Finish(status));
  }

  void Fail(const absl::Status& status) {
    upload_.reset();
    EndRequest(nullptr);
    Finish(scope_.Finish(status));
  }

  // Records the outcome of a request id this upload began: its serialized
  // response, or nullptr when it failed.
  void EndRequest(const std::string* response) {
    if (session_.empty()) return;
    service_->runtime_->EndRequest(session_, request_id_, response);
    session_.clear();
  }

  static constexpr uint32_t kUploadDataField =
      v1::UploadRequest::kDataFieldNumber;

  TensorServiceImpl* service_;  // borrowed
  grpc::ByteBuffer* resp_;      // owned by gRPC
  RpcScope scope_;
  const std::string request_id_;  // "" = none
  std::string session_;  // set while a request id of this upload is open
  bool replayed_ = false;
  std::string replayed_response_;  // when replayed_
  int64_t messages_ = 0;           // read so far
  grpc::ByteBuffer message_;
  std::unique_ptr<core::Runtime::Upload> upload_;
};

grpc::ServerReadReactor<grpc::ByteBuffer>* TensorServiceImpl::Upload(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  return new UploadReactor(this, ctx, resp);
}

absl::Status TensorServiceImpl::ToImpl(grpc::CallbackServerContext* ctx,
                                       const v1::ToRequest& req,
                                       v1::TensorResponse* resp) {
  return FillTensor(
      runtime_->To(req.session(), req.handle(), req.device(), req.copy()),
      resp);
}

absl::Status TensorServiceImpl::BinaryImpl(grpc::CallbackServerContext* ctx,
                                           const v1::BinaryRequest& req,
                                           v1::TensorResponse* resp) {
  ASSIGN_OR_RETURN(core::BinaryOp op, FromProto(req.op()));
  if (!req.has_scalar()) {
    return FillTensor(runtime_->Binary(req.session(), op, req.lhs(), req.rhs()),
                      resp);
  }
  core::OpSpec spec;
  spec.kind = core::OpSpec::Kind::kBinary;
  spec.binary = op;
  spec.inputs = {core::Operand::Handle(req.lhs())};
  spec.scalar = FromProto(req.scalar());
  return FillTensor(runtime_->Run(req.session(), spec), resp);
}

absl::Status TensorServiceImpl::MatMulImpl(grpc::CallbackServerContext* ctx,
                                           const v1::MatMulRequest& req,
                                           v1::TensorResponse* resp) {
  return FillTensor(runtime_->MatMul(req.session(), req.lhs(), req.rhs()),
                    resp);
}

absl::Status TensorServiceImpl::RunImpl(grpc::CallbackServerContext* ctx,
                                        const v1::RunRequest& req,
                                        v1::TensorResponse* resp) {
  ASSIGN_OR_RETURN(core::OpSpec spec, FromProto(req.op()));
  return FillTensor(runtime_->Run(req.session(), spec), resp);
}

namespace {

// ExecuteRequest.results' rules (tensord.proto), before anything runs.
absl::Status CheckNamedResults(const v1::ExecuteRequest& req,
                               std::span<const core::OpSpec> ops) {
  if (req.results_size() != req.keep_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("results names ", req.results_size(), " handles for ",
                     req.keep_size(), " kept results"));
  }
  absl::flat_hash_set<uint32_t> seen;
  for (uint32_t k : req.keep()) {
    if (k >= ops.size()) continue;  // Execute's own message
    if (!seen.insert(k).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "keep names op #", k,
          " twice: with `results`, each kept op takes one handle"));
    }
    if (core::RowOf(ops[k]).returns_input) {
      return absl::InvalidArgumentError(
          absl::StrCat("kept op #", k, " (", core::OpName(ops[k]),
                       ") gives back its operand: with `results`, each kept "
                       "op makes a new tensor"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TensorServiceImpl::ExecuteImpl(grpc::CallbackServerContext* ctx,
                                            const v1::ExecuteRequest& req,
                                            v1::ExecuteResponse* resp) {
  if (req.results_size() > 0) {
    return absl::InvalidArgumentError(
        "results names kept results' handles on the command stream only "
        "(Command.execute)");
  }
  return ExecuteList(ctx, req.session(), req, resp);
}

absl::Status TensorServiceImpl::ExecuteList(grpc::CallbackServerContext* ctx,
                                            std::string_view session,
                                            const v1::ExecuteRequest& req,
                                            v1::ExecuteResponse* resp) {
  std::vector<core::OpSpec> ops(static_cast<size_t>(req.ops_size()));
  for (int i = 0; i < req.ops_size(); ++i) {
    if (absl::Status s = FromProto(req.ops(i), ops[i]); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("op #", i, ": ", s.message()));
    }
  }
  if (req.results_size() > 0) RETURN_IF_ERROR(CheckNamedResults(req, ops));
  // The client's cancellation, asked every 32 ops: asking gRPC costs as
  // much as a tiny op.
  size_t polls = 0;
  ASSIGN_OR_RETURN(
      std::vector<core::TensorMeta> kept,
      runtime_->Execute(
          session, ops,
          {req.keep().data(), static_cast<size_t>(req.keep_size())},
          [ctx, &polls] { return polls++ % 32 == 0 && ctx->IsCancelled(); }));
  RETURN_IF_ERROR(FillKept(session, kept, resp->mutable_kept()));
  // The client's handles: all of them, or none kept.
  for (int i = 0; i < req.results_size(); ++i) {
    const absl::Status renamed =
        runtime_->RenameHandle(session, resp->kept(i).handle(), req.results(i));
    if (!renamed.ok()) {
      for (int j = 0; j < resp->kept_size(); ++j) {
        (void)runtime_->Release(
            session, j < i ? req.results(j) : resp->kept(j).handle());
      }
      resp->clear_kept();
      return renamed;
    }
    resp->mutable_kept(i)->set_handle(req.results(i));
  }
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::FillKept(
    std::string_view session, const std::vector<core::TensorMeta>& kept,
    google::protobuf::RepeatedPtrField<v1::TensorInfo>* out) {
  for (const core::TensorMeta& meta : kept) {
    v1::TensorInfo* info = out->Add();
    ToProto(meta, info);
    if (meta.shape.NumElements() != 1) continue;
    // One element (a loss): its bytes ride the reply.
    ASSIGN_OR_RETURN(std::unique_ptr<core::Runtime::Reader> reader,
                     runtime_->OpenReader(session, meta.handle,
                                          core::Runtime::ReaderUse::kCall));
    std::string* value = info->mutable_value();
    value->resize(meta.nbytes);
    RETURN_IF_ERROR(reader->Read(
        0, {reinterpret_cast<uint8_t*>(value->data()), meta.nbytes}));
  }
  return absl::OkStatus();
}

namespace {

void FillProgramInfo(const core::Runtime::ProgramMeta& meta,
                     v1::ProgramInfo* out) {
  out->set_program(meta.id);
  out->set_tag(meta.tag);
  for (const core::TensorMeta& in : meta.inputs) {
    v1::ProgramInput* p = out->add_inputs();
    p->set_dtype(ToProto(in.dtype));
    for (int64_t d : in.shape.dims()) p->add_shape(d);
    p->set_device(in.device);
  }
  for (const core::TensorMeta& r : meta.results) {
    ToProto(r, out->add_results());
  }
  out->set_ops(static_cast<uint32_t>(meta.ops));
  for (uint64_t h : meta.bound) out->add_bound(h);
  out->set_runs(meta.runs);
}

}  // namespace

absl::Status TensorServiceImpl::RegisterProgramImpl(
    grpc::CallbackServerContext* ctx, const v1::RegisterProgramRequest& req,
    v1::RegisterProgramResponse* resp) {
  // The bounds first: a list past them is refused before it is converted.
  RETURN_IF_ERROR(core::CheckProgramBounds(
      static_cast<size_t>(req.ops_size()),
      static_cast<size_t>(req.inputs_size())));
  std::vector<core::Runtime::ProgramInput> inputs(
      static_cast<size_t>(req.inputs_size()));
  for (int i = 0; i < req.inputs_size(); ++i) {
    const v1::ProgramInput& in = req.inputs(i);
    absl::StatusOr<core::DType> dtype = FromProto(in.dtype());
    if (!dtype.ok()) {
      return absl::Status(dtype.status().code(),
                          absl::StrCat("input #", i, ": ",
                                       dtype.status().message()));
    }
    inputs[i].dtype = *dtype;
    inputs[i].dims.assign(in.shape().begin(), in.shape().end());
    inputs[i].device = in.device();
  }
  std::vector<core::OpSpec> ops(static_cast<size_t>(req.ops_size()));
  for (int i = 0; i < req.ops_size(); ++i) {
    if (absl::Status s = FromProto(req.ops(i), ops[i]); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("op #", i, ": ", s.message()));
    }
  }
  ASSIGN_OR_RETURN(
      core::Runtime::ProgramMeta meta,
      runtime_->RegisterProgram(
          req.session(), inputs, std::move(ops),
          std::vector<uint32_t>(req.keep().begin(), req.keep().end()),
          req.tag()));
  FillProgramInfo(meta, resp->mutable_program());
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::RunProgramIn(
    grpc::CallbackServerContext* ctx, std::string_view session,
    const v1::RunProgramRequest& req, v1::RunProgramResponse* resp) {
  std::vector<core::Runtime::ProgramArg> args(
      static_cast<size_t>(req.inputs_size()));
  for (int i = 0; i < req.inputs_size(); ++i) {
    const v1::ProgramArg& arg = req.inputs(i);
    switch (arg.source_case()) {
      case v1::ProgramArg::kHandle:
        args[i].handle = arg.handle();
        break;
      case v1::ProgramArg::kData:
        if (max_inline_bytes_ > 0 && arg.data().size() > max_inline_bytes_) {
          return absl::InvalidArgumentError(absl::StrCat(
              "input #", i, " is ", arg.data().size(),
              " bytes inline; the server's limit is ", max_inline_bytes_,
              " (Limits.max_inline_bytes): upload it and pass its handle"));
        }
        args[i].is_data = true;
        args[i].data = {reinterpret_cast<const uint8_t*>(arg.data().data()),
                        arg.data().size()};
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "input #", i, " is not set: give a handle or data"));
    }
  }
  std::vector<core::Runtime::ProgramStepArgs> steps;
  steps.reserve(static_cast<size_t>(req.steps_size()));
  for (const v1::ProgramStepArgs& s : req.steps()) {
    auto given = [](bool has, double v) {
      return has ? std::optional<double>(v) : std::nullopt;
    };
    steps.push_back({s.op(), s.step(), given(s.has_lr(), s.lr()),
                     given(s.has_momentum(), s.momentum()),
                     given(s.has_weight_decay(), s.weight_decay())});
  }
  size_t polls = 0;
  ASSIGN_OR_RETURN(std::vector<core::TensorMeta> kept,
                   runtime_->RunProgram(session, req.program(), args,
                                        steps, [ctx, &polls] {
                                          return polls++ % 32 == 0 &&
                                                 ctx->IsCancelled();
                                        },
                                        req.seed_offset()));
  return FillKept(session, kept, resp->mutable_kept());
}

absl::Status TensorServiceImpl::ListProgramsImpl(
    grpc::CallbackServerContext* ctx, const v1::ListProgramsRequest& req,
    v1::ListProgramsResponse* resp) {
  ASSIGN_OR_RETURN(std::vector<core::Runtime::ProgramMeta> programs,
                   runtime_->ListPrograms(req.session()));
  for (const core::Runtime::ProgramMeta& p : programs) {
    FillProgramInfo(p, resp->add_programs());
  }
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::ReleaseProgramImpl(
    grpc::CallbackServerContext* ctx, const v1::ReleaseProgramRequest& req,
    v1::ReleaseProgramResponse* resp) {
  return runtime_->ReleaseProgram(req.session(), req.program());
}

namespace {

void FillGroupInfo(const core::Runtime::GroupMeta& meta, v1::GroupInfo* out) {
  out->set_group(meta.id);
  for (const std::string& d : meta.devices) out->add_devices(d);
  out->set_engine(meta.engine);
  out->set_tag(meta.tag);
  out->set_collectives(meta.collectives);
}

absl::StatusOr<core::CollectiveKind> CollectiveKindOf(v1::CollectiveKind k) {
  switch (k) {
    case v1::ALL_REDUCE:
      return core::CollectiveKind::kAllReduce;
    case v1::BROADCAST:
      return core::CollectiveKind::kBroadcast;
    case v1::ALL_GATHER:
      return core::CollectiveKind::kAllGather;
    case v1::REDUCE_SCATTER:
      return core::CollectiveKind::kReduceScatter;
    case v1::BARRIER:
      return core::CollectiveKind::kBarrier;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "kind is ", static_cast<int>(k),
          "; expected ALL_REDUCE, BROADCAST, ALL_GATHER, REDUCE_SCATTER or "
          "BARRIER"));
  }
}

absl::StatusOr<core::Reduction> ReductionOf(v1::CollectiveReduceOp op) {
  switch (op) {
    case v1::REDUCE_SUM:
      return core::Reduction::kSum;
    case v1::REDUCE_AVG:
      return core::Reduction::kAvg;
    case v1::REDUCE_PRODUCT:
      return core::Reduction::kProduct;
    case v1::REDUCE_MIN:
      return core::Reduction::kMin;
    case v1::REDUCE_MAX:
      return core::Reduction::kMax;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "op is ", static_cast<int>(op),
          "; expected REDUCE_SUM, REDUCE_AVG, REDUCE_PRODUCT, REDUCE_MIN or "
          "REDUCE_MAX"));
  }
}

}  // namespace

absl::Status TensorServiceImpl::CreateGroupImpl(
    grpc::CallbackServerContext* ctx, const v1::CreateGroupRequest& req,
    v1::CreateGroupResponse* resp) {
  if (static_cast<size_t>(req.devices_size()) > core::kMaxGroupDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("a group has 1 to ", core::kMaxGroupDevices,
                     " devices, not ", req.devices_size()));
  }
  const std::vector<std::string> devices(req.devices().begin(),
                                         req.devices().end());
  ASSIGN_OR_RETURN(core::Runtime::GroupMeta meta,
                   runtime_->CreateGroup(req.session(), devices, req.tag()));
  FillGroupInfo(meta, resp->mutable_group());
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::CollectiveIn(
    grpc::CallbackServerContext* ctx, std::string_view session,
    const v1::CollectiveRequest& req, v1::CollectiveResponse* resp) {
  core::Runtime::CollectiveArgs args;
  ASSIGN_OR_RETURN(args.kind, CollectiveKindOf(req.kind()));
  ASSIGN_OR_RETURN(args.op, ReductionOf(req.op()));
  args.root = req.root();
  if (static_cast<size_t>(req.tensors_size()) > core::kMaxGroupDevices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a collective names one tensor per member device, at most ",
        core::kMaxGroupDevices, ", not ", req.tensors_size()));
  }
  const std::vector<uint64_t> handles(req.tensors().begin(),
                                      req.tensors().end());
  ASSIGN_OR_RETURN(std::vector<core::TensorMeta> tensors,
                   runtime_->Collective(session, req.group(), args,
                                        handles));
  for (const core::TensorMeta& t : tensors) ToProto(t, resp->add_tensors());
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::ListGroupsImpl(
    grpc::CallbackServerContext* ctx, const v1::ListGroupsRequest& req,
    v1::ListGroupsResponse* resp) {
  ASSIGN_OR_RETURN(std::vector<core::Runtime::GroupMeta> groups,
                   runtime_->ListGroups(req.session()));
  for (const core::Runtime::GroupMeta& g : groups) {
    FillGroupInfo(g, resp->add_groups());
  }
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::DestroyGroupImpl(
    grpc::CallbackServerContext* ctx, const v1::DestroyGroupRequest& req,
    v1::DestroyGroupResponse* resp) {
  return runtime_->DestroyGroup(req.session(), req.group());
}

namespace {

// Reads `n` bytes at `offset` of the reader's tensor into `chunk`, with the
// offset and the CRC-32 the client checks.
absl::Status ReadChunk(core::Runtime::Reader& reader, uint64_t offset,
                       uint64_t n, v1::FetchChunk* chunk) {
  std::string* data = chunk->mutable_data();
  data->resize(n);
  auto* bytes = reinterpret_cast<uint8_t*>(data->data());
  RETURN_IF_ERROR(reader.Read(offset, {bytes, n}));
  chunk->set_offset(offset);
  chunk->set_crc32(crc32_gzip_refl(0, bytes, n));
  return absl::OkStatus();
}

}  // namespace

absl::Status TensorServiceImpl::ReadImpl(grpc::CallbackServerContext* ctx,
                                         const v1::ReadRequest& req,
                                         v1::FetchChunk* resp) {
  // A call, pinned by the adapter: the reader needs no tie to the session.
  ASSIGN_OR_RETURN(std::unique_ptr<core::Runtime::Reader> reader,
                   runtime_->OpenReader(req.session(), req.handle(),
                                        core::Runtime::ReaderUse::kCall));
  const uint64_t end = reader->meta().nbytes;
  const uint64_t offset = req.offset();
  if (offset > end) {
    return absl::OutOfRangeError(
        absl::StrCat("read offset ", offset, " is past the end of the tensor (",
                     end, " bytes)"));
  }
  const uint64_t n = req.length() == 0 ? end - offset : req.length();
  if (n > end - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("read of ", n, " bytes at offset ", offset,
                     " runs past the end of the tensor (", end, " bytes)"));
  }
  const std::string& device = reader->meta().device;
  const bool on_host = device == "cpu" || absl::StartsWith(device, "cpu:");
  if (req.if_small_on_host() && (n > kMaxFetchChunkBytes || !on_host)) {
    ToProto(reader->meta(), resp->mutable_tensor());  // the info, no data
    resp->set_offset(offset);
    resp->set_crc32(0);  // zlib's CRC-32 of no bytes
    return absl::OkStatus();
  }
  if (n > kMaxFetchChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Read returns at most ", kMaxFetchChunkBytes, " bytes in one reply (",
        n, " asked); stream larger tensors with Fetch"));
  }
  ToProto(reader->meta(), resp->mutable_tensor());
  return ReadChunk(*reader, offset, n, resp);
}

// Streams a tensor's bytes from the requested offset in chunks, one write in
// flight at a time. The first chunk carries the metadata; an empty tensor (or
// an offset at the end) still gets that one chunk. Chunks go out raw: the
// device copies each one straight into the slice gRPC sends.
class FetchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  FetchReactor(TensorServiceImpl* service, grpc::CallbackServerContext* ctx,
               const grpc::ByteBuffer& raw)
      : scope_(service, ctx, "Fetch") {
    v1::FetchRequest req;
    absl::Status status = ParseRequest(raw, &req);
    scope_.set_session(req.session());  // named in a refusal's log line
    if (status.ok()) status = Open(service, ctx, req);
    if (!status.ok()) {
      Finish(scope_.Finish(status));
      return;
    }
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {          // client went away; nothing more to do
      reader_.reset();  // stop reading; let go of the tensor's memory now
      Finish(scope_.Finish(absl::CancelledError("client cancelled the fetch")));
      return;
    }
    WriteNext();  // the last chunk finished the call in WriteNext()
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Open(TensorServiceImpl* service,
                    const grpc::CallbackServerContext* ctx,
                    const v1::FetchRequest& req) {
    RETURN_IF_ERROR(service->CheckServing(ctx));
    ASSIGN_OR_RETURN(
        reader_, service->runtime_->OpenReader(req.session(), req.handle()));
    end_ = reader_->meta().nbytes;
    if (req.offset() > end_) {
      return absl::OutOfRangeError(
          absl::StrCat("fetch offset ", req.offset(), " is past the end of ",
                       "the tensor (", end_, " bytes)"));
    }
    offset_ = req.offset();
    chunk_bytes_ = req.chunk_bytes() == 0
                       ? kDefaultFetchChunkBytes
                       : std::min(req.chunk_bytes(), kMaxFetchChunkBytes);
    ToProto(reader_->meta(), head_.mutable_tensor());
    return absl::OkStatus();
  }

  void WriteNext() {
    // Metadata rides on the first chunk only. The previous chunk is free to
    // replace: gRPC holds its own reference to the slices it still sends.
    const uint64_t n = std::min<uint64_t>(chunk_bytes_, end_ - offset_);
    head_.set_offset(offset_);
    wire::BulkMessageBuilder builder(head_, v1::FetchChunk::kDataFieldNumber,
                                     n);
    absl::Status status = reader_->Read(offset_, {builder.data(), n});
    if (!status.ok()) {
      Finish(scope_.Finish(status));
      return;
    }
    head_.clear_tensor();
    v1::FetchChunk tail;
    tail.set_crc32(crc32_gzip_refl(0, builder.data(), n));
    chunk_ = builder.Finish(tail);
    offset_ += n;
    if (offset_ >= end_) {
      // Every byte is read: let go of the tensor before the status goes
      // out, so that a client releasing it right after sees it freed
      // (OnDone may run after the client has the status).
      reader_.reset();
      // The last chunk and the status go out together. (StartWriteLast
      // would hold the chunk back until Finish, which we would only call
      // from its OnWriteDone: a stall that only other traffic unblocks.)
      StartWriteAndFinish(&chunk_, grpc::WriteOptions(),
                          scope_.Finish(absl::OkStatus()));
    } else {
      StartWrite(&chunk_);
    }
  }

  RpcScope scope_;
  std::unique_ptr<core::Runtime::Reader> reader_;
  uint64_t offset_ = 0;
  uint64_t end_ = 0;
  uint32_t chunk_bytes_ = kDefaultFetchChunkBytes;
  v1::FetchChunk head_;  // the fields before `data`: tensor (first), offset
  grpc::ByteBuffer chunk_;
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* TensorServiceImpl::Fetch(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) {
  return new FetchReactor(this, ctx, *req);
}

absl::Status TensorServiceImpl::ReleaseImpl(grpc::CallbackServerContext* ctx,
                                            const v1::ReleaseRequest& req,
                                            v1::ReleaseResponse* resp) {
  // The listed handles went first (Mutating); handle 0 asks for nothing
  // more.
  if (req.handle() == 0 && !req.release().empty()) return absl::OkStatus();
  return runtime_->Release(req.session(), req.handle());
}

absl::Status TensorServiceImpl::GetTensorImpl(grpc::CallbackServerContext* ctx,
                                              const v1::GetTensorRequest& req,
                                              v1::TensorResponse* resp) {
  return FillTensor(runtime_->GetTensor(req.session(), req.handle()), resp);
}

absl::Status TensorServiceImpl::ListTensorsImpl(
    grpc::CallbackServerContext* ctx, const v1::ListTensorsRequest& req,
    v1::ListTensorsResponse* resp) {
  ASSIGN_OR_RETURN(PageCursor page,
                   ParsePageRequest(req.page_size(), req.page_token()));
  ASSIGN_OR_RETURN(std::vector<core::TensorMeta> tensors,
                   runtime_->ListTensors(req.session()));  // by handle
  ASSIGN_OR_RETURN(std::vector<core::TensorMeta> held,
                   runtime_->ListHeld(req.session()));
  uint64_t total = 0;
  for (const core::TensorMeta& t : tensors) total += t.nbytes;
  for (const core::TensorMeta& t : held) {
    total += t.nbytes;
    if (req.page_token().empty()) ToProto(t, resp->add_held());
  }
  resp->set_total_bytes(total);
  resp->set_next_page_token(EmitPage(
      tensors, page, [](const core::TensorMeta& t) { return t.handle; },
      [&](const core::TensorMeta& t) { ToProto(t, resp->add_tensors()); }));
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::ListSessionsImpl(
    grpc::CallbackServerContext* ctx, const v1::ListSessionsRequest& req,
    v1::ListSessionsResponse* resp) {
  ASSIGN_OR_RETURN(PageCursor page,
                   ParsePageRequest(req.page_size(), req.page_token()));
  resp->set_next_page_token(EmitPage(
      runtime_->ListSessions(), page,
      [](const core::SessionInfo& s) { return s.serial; },
      [&](const core::SessionInfo& s) {
        v1::SessionInfo* out = resp->add_sessions();
        out->set_id_prefix(s.id_prefix);
        out->set_client_name(s.client_name);
        out->set_tensors(s.tensors);
        out->set_bytes(s.bytes);
        out->set_age_ms(s.age_ms);
      }));
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::ListAllTensorsImpl(
    grpc::CallbackServerContext* ctx, const v1::ListAllTensorsRequest& req,
    v1::ListAllTensorsResponse* resp) {
  ASSIGN_OR_RETURN(PageCursor page,
                   ParsePageRequest(req.page_size(), req.page_token()));
  using Entry = std::pair<std::string, core::TensorMeta>;
  resp->set_next_page_token(EmitPage(
      runtime_->ListAllTensors(), page,  // by handle
      [](const Entry& e) { return e.second.handle; },
      [&](const Entry& e) {
        auto* entry = resp->add_tensors();
        entry->set_session_id_prefix(e.first);
        ToProto(e.second, entry->mutable_tensor());
      }));
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::GetStatsImpl(grpc::CallbackServerContext* ctx,
                                             const v1::GetStatsRequest& req,
                                             v1::GetStatsResponse* resp) {
  resp->set_server_version(TENSORD_VERSION);
  resp->set_uptime_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - started_)
                          .count());
  resp->set_sessions(runtime_->session_count());
  uint64_t tensors = 0, bytes = 0;
  for (const core::DeviceStatus& d : runtime_->ListDevices()) {
    tensors += d.live_tensors;
    bytes += d.held_bytes;
    ToProto(d, resp->add_devices());
  }
  resp->set_tensors(tensors);
  resp->set_held_bytes(bytes);
  const core::Runtime::SharedMemoryStats shm = runtime_->shared_memory_stats();
  resp->set_shared_memory_regions(shm.regions);
  resp->set_shared_memory_uploads(shm.uploads);
  resp->set_shared_memory_fetches(shm.fetches);
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::RegisterSharedMemoryImpl(
    grpc::CallbackServerContext* ctx,
    const v1::RegisterSharedMemoryRequest& req,
    v1::RegisterSharedMemoryResponse* resp) {
  ASSIGN_OR_RETURN(uint64_t region,
                   runtime_->RegisterSharedMemory(req.session(), req.name(),
                                                  req.size(), req.cookie()));
  resp->set_region(region);
  resp->set_data_bytes(req.size() - core::kSharedMemoryDataOffset);
  return absl::OkStatus();
}

absl::Status TensorServiceImpl::UnregisterSharedMemoryImpl(
    grpc::CallbackServerContext* ctx,
    const v1::UnregisterSharedMemoryRequest& req,
    v1::UnregisterSharedMemoryResponse* resp) {
  return runtime_->UnregisterSharedMemory(req.session(), req.region());
}

absl::Status TensorServiceImpl::UploadFromSharedMemoryImpl(
    grpc::CallbackServerContext* ctx,
    const v1::UploadFromSharedMemoryRequest& req, v1::TensorResponse* resp) {
  ASSIGN_OR_RETURN(core::DType dtype, FromProto(req.dtype()));
  return FillTensor(runtime_->CreateFromSharedMemory(
                        req.session(), req.region(), req.offset(), req.device(),
                        dtype, Dims(req.shape()), req.tag()),
                    resp);
}

absl::Status TensorServiceImpl::FetchToSharedMemoryImpl(
    grpc::CallbackServerContext* ctx, const v1::FetchToSharedMemoryRequest& req,
    v1::TensorResponse* resp) {
  return FillTensor(runtime_->FetchToSharedMemory(req.session(), req.handle(),
                                                  req.region(), req.offset()),
                    resp);
}

}  // namespace tensord::server
