// TensorServiceImpl: the gRPC callback-API adapter over core::Runtime.
//
// Every method is raw (TensorServiceBase below). A unary RPC goes through
// one adapter (Unary, or Mutating for the request-id dedupe): it parses the
// request (a malformed one is INVALID_ARGUMENT naming the problem), runs a
// thin typed handler (read the proto, call the Runtime, fill the reply),
// serializes the reply and finishes through FinishRpc() (the one status
// mapping). Upload and Fetch are reactors that move one chunk at a time, so
// memory per stream is one chunk.
// Compute runs on gRPC's callback threads for now (ops are short on this
// service's scale; a dedicated executor is a later step).
// Thread-safety: the Runtime is thread-safe; the service holds no other
// mutable state except an atomic request counter and the draining flag.
#ifndef TENSORD_SERVER_GRPC_SERVICE_H_
#define TENSORD_SERVER_GRPC_SERVICE_H_

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "core/runtime/runtime.h"
#include "server/auth.h"
#include "server/grpc_stream.h"
#include "server/metrics.h"
#include "server/node_transfers.h"
#include "server/refusal_log.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::server {

inline constexpr uint32_t kDefaultFetchChunkBytes = 1 << 20;
// The most data one Read reply or Fetch chunk carries: 4 MiB less 64 KiB
// of room for the rest of the reply (the tensor's metadata, offset, CRC),
// so that every reply fits a default gRPC client's 4 MiB receive limit.
inline constexpr uint32_t kMaxFetchChunkBytes = (4 << 20) - (64 << 10);
// The most handles one request's `release` list may name
// (Limits.max_release_handles).
inline constexpr uint32_t kMaxReleaseHandles = 1024;
// gRPC's default receive limit, which every reply fits.
inline constexpr uint64_t kDefaultClientReceiveBytes = 4 << 20;
// Metadata keys: the client's request id on mutating calls (see
// tensord.proto); the server instance id's, on every reply, is
// server/grpc_rpc.h's kInstanceMetadataKey.
inline constexpr char kRequestIdMetadataKey[] = "tensord-request-id";
inline constexpr uint64_t kDefaultMaxInlineBytes = 4 << 20;

namespace internal {
// Nest<Base, W1, W2, ...>::type is W1<W2<...<Base>>>: the generated
// per-method wrappers applied to a service class, listed flat.
template <typename Base, template <typename> class... Wrappers>
struct Nest {
  using type = Base;
};
template <typename Base, template <typename> class First,
          template <typename> class... Rest>
struct Nest<Base, First, Rest...> {
  using type = First<typename Nest<Base, Rest...>::type>;
};
}  // namespace internal

// Every method is raw: the service parses its requests itself, so that a
// malformed one is INVALID_ARGUMENT naming the problem (gRPC's own parsing
// answers UNIMPLEMENTED with an empty message, before the service runs).
// Upload's and Fetch's bulk payload is read from and written into gRPC's
// slices in place (proto/wire/bulk.h). The unary methods are one table
// (kUnaryRpcs in grpc_service.cc: each method's name and its adapter, Unary
// or Mutating, over its typed handler), which the constructor registers as
// raw callback methods: a new unary RPC is a row there and its typed
// handler. The streaming methods are the wrappers below. They sit on the
// plain Service, not CallbackService: no typed callback method is left for
// a raw one to hide. A method in neither stays a synchronous
// UNIMPLEMENTED one, which MalformedRequestTest's
// EveryUnaryRpcAnswersEachKindWithInvalidArgument fails on.
using TensorServiceBase =
    internal::Nest<v1::TensorService::Service,
                   v1::TensorService::WithRawCallbackMethod_Upload,
                   v1::TensorService::WithRawCallbackMethod_Fetch,
                   v1::TensorService::WithRawCallbackMethod_Stream>::type;

class TensorServiceImpl final : public TensorServiceBase, public StreamService {
 public:
  // `runtime`, `metrics` and `auth` (nullptr: no authentication) are
  // borrowed and must outlive the service.
  TensorServiceImpl(core::Runtime* runtime, Metrics* metrics,
                    const TokenAuthenticator* auth = nullptr);

  // After this, new RPCs fail with UNAVAILABLE ("server is shutting down"),
  // and so do the open command streams, at once (an idle stream would
  // otherwise hold the shutdown for its whole grace period).
  void StartDraining() {
    draining_.store(true);
    stream_logs_.EndAll(absl::UnavailableError("server is shutting down"));
  }
  // RPCs that have started and not yet finished.
  int64_t in_flight() const { return in_flight_.load(); }
  // Where refusals are counted and logged (server/refusal_log.h); the
  // node service's PullChunk notes its own there too.
  RefusalLog* refusal_log() override { return &refusal_log_; }
  // This server instance's id (16 hex digits), sent on every reply.
  const std::string& instance_id() const override { return instance_id_; }
  // Create's inline `data` larger than this is INVALID_ARGUMENT (use
  // Upload). 0 = no limit beyond the message size.
  void set_max_inline_bytes(uint64_t bytes) { max_inline_bytes_ = bytes; }
  // The server's message limit, reported by GetLimits.
  void set_max_message_bytes(uint64_t bytes) { max_message_bytes_ = bytes; }
  // Every limit a client may plan by (GetLimits, OpenSession's reply).
  v1::Limits Limits() const;

  // Moves between nodes (server/node_transfers.h; borrowed, set before
  // serving). nullptr: GrantTransfer and Import are FAILED_PRECONDITION.
  void set_node_transfers(NodeTransfers* transfers) { transfers_ = transfers; }

  // Raw: the request stream carries tensord.v1.UploadRequest messages, the
  // reply is a tensord.v1.TensorResponse.
  using TensorServiceBase::Upload;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Upload(
      grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) override;
  // Raw: the request is a tensord.v1.FetchRequest, the replies are
  // tensord.v1.FetchChunk messages.
  using TensorServiceBase::Fetch;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Fetch(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) override;
  // Raw: tensord.v1.StreamRequest messages in, tensord.v1.StreamResponse
  // messages out (server/grpc_stream.h).
  using TensorServiceBase::Stream;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Stream(
      grpc::CallbackServerContext* ctx) override;

 private:
  // One row of the unary RPC table: the method's name in tensord.proto and
  // what serves it (UnaryOf or MutatingOf over its typed handler).
  using RawUnary = grpc::ServerUnaryReactor* (
      TensorServiceImpl::*)(grpc::CallbackServerContext* ctx,
                            const char* method, const grpc::ByteBuffer* raw_req,
                            grpc::ByteBuffer* raw_resp);
  struct UnaryRpc {
    const char* method;
    RawUnary serve;
  };
  static const UnaryRpc kUnaryRpcs[];
  template <auto handler>
  grpc::ServerUnaryReactor* UnaryOf(grpc::CallbackServerContext* ctx,
                                    const char* method,
                                    const grpc::ByteBuffer* raw_req,
                                    grpc::ByteBuffer* raw_resp) {
    return Unary(ctx, method, raw_req, raw_resp, handler);
  }
  template <auto handler>
  grpc::ServerUnaryReactor* MutatingOf(grpc::CallbackServerContext* ctx,
                                       const char* method,
                                       const grpc::ByteBuffer* raw_req,
                                       grpc::ByteBuffer* raw_resp) {
    return Mutating(ctx, method, raw_req, raw_resp, handler);
  }

  // A typed handler: validates `req`, calls the Runtime, fills `resp`.
  template <typename Req, typename Resp>
  using Handler = absl::Status (TensorServiceImpl::*)(
      grpc::CallbackServerContext* ctx, const Req& req, Resp* resp);

  // The adapter of a raw unary method to its typed handler. Unless draining
  // or unauthenticated, parses `raw_req` as a Req (INVALID_ARGUMENT naming
  // what is wrong when it is not one), runs `handler` and serializes its
  // Resp into `raw_resp`; finishes the default reactor with the mapped
  // status.
  template <typename Req, typename Resp>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx,
                                  const char* method,
                                  const grpc::ByteBuffer* raw_req,
                                  grpc::ByteBuffer* raw_resp,
                                  Handler<Req, Resp> handler);
  // Unary() for a mutating RPC (Req has a `session`): the handles in the
  // request's `release` list, if it has one, are released first (see
  // ReleaseRequest in tensord.proto); then, with a request id in the
  // metadata, a remembered response of that id in the session is returned
  // without running `handler`, and a successful response is remembered.
  template <typename Req, typename Resp>
  grpc::ServerUnaryReactor* Mutating(grpc::CallbackServerContext* ctx,
                                     const char* method,
                                     const grpc::ByteBuffer* raw_req,
                                     grpc::ByteBuffer* raw_resp,
                                     Handler<Req, Resp> handler);
  // What Unary() and Mutating() share, on the untyped messages `req` and
  // `resp` (owned by the caller): check, parse, `body`, serialize, finish.
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx,
                                  const char* method,
                                  const grpc::ByteBuffer& raw_req,
                                  google::protobuf::Message* req,
                                  grpc::ByteBuffer* raw_resp,
                                  const google::protobuf::Message& resp,
                                  absl::FunctionRef<absl::Status()> body);
  // The lease rule for unary calls (tensord.proto): a request naming a
  // session pins it for the call (renewed when the call begins and ends,
  // never reaped meanwhile). nullptr for requests without a session, or an
  // unknown one (the handler reports that).
  template <typename Req>
  std::unique_ptr<core::Runtime::CallScope> PinSession(const Req& req);
  // Releases what a request's `release` list names (Mutating);
  // INVALID_ARGUMENT past kMaxReleaseHandles, before anything is released.
  template <typename Req>
  absl::Status ReleaseListed(const Req& req);
  // Runs `body` under the request-id dedupe of `session` (see Mutating).
  absl::Status Deduplicated(const grpc::CallbackServerContext& ctx,
                            const std::string& session,
                            google::protobuf::Message* resp,
                            absl::FunctionRef<absl::Status()> body);

  absl::Status ListDevicesImpl(grpc::CallbackServerContext* ctx,
                               const v1::ListDevicesRequest& req,
                               v1::ListDevicesResponse* resp);
  absl::Status OpenSessionImpl(grpc::CallbackServerContext* ctx,
                               const v1::OpenSessionRequest& req,
                               v1::OpenSessionResponse* resp);
  absl::Status GetLimitsImpl(grpc::CallbackServerContext* ctx,
                             const v1::GetLimitsRequest& req, v1::Limits* resp);
  absl::Status CloseSessionImpl(grpc::CallbackServerContext* ctx,
                                const v1::CloseSessionRequest& req,
                                v1::CloseSessionResponse* resp);
  absl::Status KeepAliveImpl(grpc::CallbackServerContext* ctx,
                             const v1::KeepAliveRequest& req,
                             v1::KeepAliveResponse* resp);
  absl::Status CreateImpl(grpc::CallbackServerContext* ctx,
                          const v1::CreateRequest& req,
                          v1::TensorResponse* resp);
  absl::Status ToImpl(grpc::CallbackServerContext* ctx,
                      const v1::ToRequest& req, v1::TensorResponse* resp);
  absl::Status BinaryImpl(grpc::CallbackServerContext* ctx,
                          const v1::BinaryRequest& req,
                          v1::TensorResponse* resp);
  absl::Status MatMulImpl(grpc::CallbackServerContext* ctx,
                          const v1::MatMulRequest& req,
                          v1::TensorResponse* resp);
  absl::Status RunImpl(grpc::CallbackServerContext* ctx,
                       const v1::RunRequest& req, v1::TensorResponse* resp);
  absl::Status ExecuteImpl(grpc::CallbackServerContext* ctx,
                           const v1::ExecuteRequest& req,
                           v1::ExecuteResponse* resp);
  // Execute's work in `session` (req.session() is not read), for the RPC
  // and the stream's `execute` (which may name the kept results' handles:
  // ExecuteRequest.results).
  absl::Status ExecuteList(grpc::CallbackServerContext* ctx,
                           std::string_view session,
                           const v1::ExecuteRequest& req,
                           v1::ExecuteResponse* resp);
  // Programs (tensord.proto's RegisterProgram): the request converted, the
  // Runtime's answer converted back.
  absl::Status RegisterProgramImpl(grpc::CallbackServerContext* ctx,
                                   const v1::RegisterProgramRequest& req,
                                   v1::RegisterProgramResponse* resp);
  absl::Status RunProgramImpl(grpc::CallbackServerContext* ctx,
                              const v1::RunProgramRequest& req,
                              v1::RunProgramResponse* resp) {
    return RunProgramIn(ctx, req.session(), req, resp);
  }
  // RunProgram in `session` (the request's own is not read): the RPC's and
  // the stream's run_program command.
  absl::Status RunProgramIn(grpc::CallbackServerContext* ctx,
                            std::string_view session,
                            const v1::RunProgramRequest& req,
                            v1::RunProgramResponse* resp);
  absl::Status ListProgramsImpl(grpc::CallbackServerContext* ctx,
                                const v1::ListProgramsRequest& req,
                                v1::ListProgramsResponse* resp);
  absl::Status ReleaseProgramImpl(grpc::CallbackServerContext* ctx,
                                  const v1::ReleaseProgramRequest& req,
                                  v1::ReleaseProgramResponse* resp);
  // Collectives (tensord.proto's CreateGroup): thin conversions around the
  // Runtime's groups (core/runtime/collectives.cc).
  absl::Status CreateGroupImpl(grpc::CallbackServerContext* ctx,
                               const v1::CreateGroupRequest& req,
                               v1::CreateGroupResponse* resp);
  absl::Status CollectiveImpl(grpc::CallbackServerContext* ctx,
                              const v1::CollectiveRequest& req,
                              v1::CollectiveResponse* resp) {
    return CollectiveIn(ctx, req.session(), req, resp);
  }
  // Collective in `session` (the request's own is not read): the RPC's
  // and the stream's collective command.
  absl::Status CollectiveIn(grpc::CallbackServerContext* ctx,
                            std::string_view session,
                            const v1::CollectiveRequest& req,
                            v1::CollectiveResponse* resp);
  absl::Status ListGroupsImpl(grpc::CallbackServerContext* ctx,
                              const v1::ListGroupsRequest& req,
                              v1::ListGroupsResponse* resp);
  absl::Status DestroyGroupImpl(grpc::CallbackServerContext* ctx,
                                const v1::DestroyGroupRequest& req,
                                v1::DestroyGroupResponse* resp);
  // Fills `out` with the kept results `kept` (one-element ones with their
  // value, so a step's loss needs no fetch): Execute's and RunProgram's.
  absl::Status FillKept(std::string_view session,
                        const std::vector<core::TensorMeta>& kept,
                        google::protobuf::RepeatedPtrField<v1::TensorInfo>* out);
  absl::Status ReadImpl(grpc::CallbackServerContext* ctx,
                        const v1::ReadRequest& req, v1::FetchChunk* resp);
  absl::Status ReleaseImpl(grpc::CallbackServerContext* ctx,
                           const v1::ReleaseRequest& req,
                           v1::ReleaseResponse* resp);
  absl::Status GetTensorImpl(grpc::CallbackServerContext* ctx,
                             const v1::GetTensorRequest& req,
                             v1::TensorResponse* resp);
  absl::Status ListTensorsImpl(grpc::CallbackServerContext* ctx,
                               const v1::ListTensorsRequest& req,
                               v1::ListTensorsResponse* resp);
  absl::Status ListSessionsImpl(grpc::CallbackServerContext* ctx,
                                const v1::ListSessionsRequest& req,
                                v1::ListSessionsResponse* resp);
  absl::Status ListAllTensorsImpl(grpc::CallbackServerContext* ctx,
                                  const v1::ListAllTensorsRequest& req,
                                  v1::ListAllTensorsResponse* resp);
  absl::Status GetStatsImpl(grpc::CallbackServerContext* ctx,
                            const v1::GetStatsRequest& req,
                            v1::GetStatsResponse* resp);
  // Same-host shared memory: thin wrappers over the Runtime's methods,
  // which map, validate and copy (core/runtime/shared_memory.h).
  absl::Status RegisterSharedMemoryImpl(
      grpc::CallbackServerContext* ctx,
      const v1::RegisterSharedMemoryRequest& req,
      v1::RegisterSharedMemoryResponse* resp);
  absl::Status UnregisterSharedMemoryImpl(
      grpc::CallbackServerContext* ctx,
      const v1::UnregisterSharedMemoryRequest& req,
      v1::UnregisterSharedMemoryResponse* resp);
  absl::Status UploadFromSharedMemoryImpl(
      grpc::CallbackServerContext* ctx,
      const v1::UploadFromSharedMemoryRequest& req, v1::TensorResponse* resp);
  absl::Status FetchToSharedMemoryImpl(
      grpc::CallbackServerContext* ctx,
      const v1::FetchToSharedMemoryRequest& req, v1::TensorResponse* resp);
  absl::Status GrantTransferImpl(grpc::CallbackServerContext* ctx,
                                 const v1::GrantTransferRequest& req,
                                 v1::GrantTransferResponse* resp);
  absl::Status ImportImpl(grpc::CallbackServerContext* ctx,
                          const v1::ImportRequest& req,
                          v1::TensorResponse* resp);
  absl::Status CheckTransfers() const;

  // UNAVAILABLE while draining; UNAUTHENTICATED without a valid token.
  absl::Status CheckServing(
      const grpc::CallbackServerContext* ctx) const override;
  // The rest of what the command stream sees (StreamService).
  bool draining() const override { return draining_.load(); }
  core::Runtime& runtime() override { return *runtime_; }
  StreamLogs& stream_logs() override { return stream_logs_; }
  absl::Status ReleaseListedOf(const v1::CreateRequest& req) override {
    return ReleaseListed(req);
  }
  absl::Status ReleaseListedOf(const v1::ToRequest& req) override {
    return ReleaseListed(req);
  }
  absl::Status ReleaseListedOf(const v1::RunRequest& req) override {
    return ReleaseListed(req);
  }
  absl::Status ReleaseListedOf(const v1::ReleaseRequest& req) override {
    return ReleaseListed(req);
  }
  absl::Status ReleaseListedOf(const v1::ExecuteRequest& req) override {
    return ReleaseListed(req);
  }
  absl::Status ReleaseListedOf(const v1::RunProgramRequest& req) override {
    return ReleaseListed(req);
  }
  absl::Status ReleaseListedOf(const v1::CollectiveRequest& req) override {
    return ReleaseListed(req);
  }
  absl::Status CreateCommand(grpc::CallbackServerContext* ctx,
                             const v1::CreateRequest& req,
                             v1::TensorResponse* resp) override {
    return CreateImpl(ctx, req, resp);
  }
  absl::Status ToCommand(grpc::CallbackServerContext* ctx,
                         const v1::ToRequest& req,
                         v1::TensorResponse* resp) override {
    return ToImpl(ctx, req, resp);
  }
  absl::Status RunCommand(grpc::CallbackServerContext* ctx,
                          const v1::RunRequest& req,
                          v1::TensorResponse* resp) override {
    return RunImpl(ctx, req, resp);
  }
  absl::Status ExecuteCommand(grpc::CallbackServerContext* ctx,
                              std::string_view session,
                              const v1::ExecuteRequest& req,
                              v1::ExecuteResponse* resp) override {
    return ExecuteList(ctx, session, req, resp);
  }
  absl::Status RunProgramCommand(grpc::CallbackServerContext* ctx,
                                 std::string_view session,
                                 const v1::RunProgramRequest& req,
                                 v1::RunProgramResponse* resp) override {
    return RunProgramIn(ctx, session, req, resp);
  }
  absl::Status CollectiveCommand(grpc::CallbackServerContext* ctx,
                                 std::string_view session,
                                 const v1::CollectiveRequest& req,
                                 v1::CollectiveResponse* resp) override {
    return CollectiveIn(ctx, session, req, resp);
  }
  absl::Status ReadCommand(grpc::CallbackServerContext* ctx,
                           const v1::ReadRequest& req,
                           v1::FetchChunk* resp) override {
    return ReadImpl(ctx, req, resp);
  }
  absl::Status ReleaseCommand(grpc::CallbackServerContext* ctx,
                              const v1::ReleaseRequest& req,
                              v1::ReleaseResponse* resp) override {
    return ReleaseImpl(ctx, req, resp);
  }
  uint64_t NextRequestId() override {
    return next_request_id_.fetch_add(1) + 1;
  }
  std::atomic<int64_t>& in_flight_count() override { return in_flight_; }
  Metrics* metrics() override { return metrics_; }

  core::Runtime* runtime_;  // borrowed
  Metrics* metrics_;        // borrowed
  RefusalLog refusal_log_;
  const TokenAuthenticator* auth_;      // borrowed; nullptr = no auth
  NodeTransfers* transfers_ = nullptr;  // borrowed
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_request_id_{0};
  std::atomic<int64_t> in_flight_{0};
  const std::string instance_id_;
  uint64_t max_inline_bytes_ = kDefaultMaxInlineBytes;
  uint64_t max_message_bytes_ = 0;
  const std::chrono::steady_clock::time_point started_ =
      std::chrono::steady_clock::now();
  StreamLogs stream_logs_;  // each session's command stream state

  friend class UploadReactor;
  friend class FetchReactor;
};

}  // namespace tensord::server

#endif  // TENSORD_SERVER_GRPC_SERVICE_H_
