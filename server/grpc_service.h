// TensorServiceImpl: the gRPC callback-API adapter over core::Runtime.
//
// Handlers are thin: read the proto, call the Runtime, fill the reply, finish
// through FinishRpc() (the one status mapping). Upload and Fetch are
// reactors that move one chunk at a time, so memory per stream is one chunk.
// Compute runs on gRPC's callback threads for now (ops are short on this
// service's scale; a dedicated executor is a later step).
// Thread-safety: the Runtime is thread-safe; the service holds no other
// mutable state except an atomic request counter and the draining flag.
#ifndef TENSORD_SERVER_GRPC_SERVICE_H_
#define TENSORD_SERVER_GRPC_SERVICE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "core/runtime.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::server {

inline constexpr uint32_t kDefaultFetchChunkBytes = 1 << 20;
inline constexpr uint32_t kMaxFetchChunkBytes = 4 << 20;
// Metadata keys: the server instance id on every reply (trailing), and the
// client's request id on mutating calls (see tensord.proto).
inline constexpr char kInstanceMetadataKey[] = "tensord-instance";
inline constexpr char kRequestIdMetadataKey[] = "tensord-request-id";
inline constexpr uint64_t kDefaultMaxInlineBytes = 4 << 20;

// Upload and Fetch are raw methods: their bulk payload is read from and
// written into gRPC's slices in place (proto/wire/bulk.h), not copied
// through protobuf's std::string fields.
using TensorServiceBase = v1::TensorService::WithRawCallbackMethod_Upload<
    v1::TensorService::WithRawCallbackMethod_Fetch<
        v1::TensorService::CallbackService>>;

class TensorServiceImpl final : public TensorServiceBase {
 public:
  // `runtime`, `metrics` and `auth` (nullptr: no authentication) are
  // borrowed and must outlive the service.
  TensorServiceImpl(core::Runtime* runtime, Metrics* metrics,
                    const TokenAuthenticator* auth = nullptr);

  // After this, new RPCs fail with UNAVAILABLE ("server is shutting down").
  void StartDraining() { draining_.store(true); }
  // RPCs that have started and not yet finished.
  int64_t in_flight() const { return in_flight_.load(); }
  // This server instance's id (16 hex digits), sent on every reply.
  const std::string& instance_id() const { return instance_id_; }
  // Create's inline `data` larger than this is INVALID_ARGUMENT (use
  // Upload). 0 = no limit beyond the message size.
  void set_max_inline_bytes(uint64_t bytes) { max_inline_bytes_ = bytes; }

  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* ctx,
                                        const v1::ListDevicesRequest* req,
                                        v1::ListDevicesResponse* resp) override;
  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* ctx,
                                        const v1::OpenSessionRequest* req,
                                        v1::OpenSessionResponse* resp) override;
  grpc::ServerUnaryReactor* CloseSession(
      grpc::CallbackServerContext* ctx, const v1::CloseSessionRequest* req,
      v1::CloseSessionResponse* resp) override;
  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* ctx,
                                      const v1::KeepAliveRequest* req,
                                      v1::KeepAliveResponse* resp) override;
  grpc::ServerUnaryReactor* Create(grpc::CallbackServerContext* ctx,
                                   const v1::CreateRequest* req,
                                   v1::TensorResponse* resp) override;
  // Raw: the request stream carries tensord.v1.UploadRequest messages, the
  // reply is a tensord.v1.TensorResponse.
  using TensorServiceBase::Upload;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Upload(
      grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* To(grpc::CallbackServerContext* ctx,
                               const v1::ToRequest* req,
                               v1::TensorResponse* resp) override;
  grpc::ServerUnaryReactor* Binary(grpc::CallbackServerContext* ctx,
                                   const v1::BinaryRequest* req,
                                   v1::TensorResponse* resp) override;
  grpc::ServerUnaryReactor* MatMul(grpc::CallbackServerContext* ctx,
                                   const v1::MatMulRequest* req,
                                   v1::TensorResponse* resp) override;
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* ctx,
                                const v1::RunRequest* req,
                                v1::TensorResponse* resp) override;
  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* ctx,
                                    const v1::ExecuteRequest* req,
                                    v1::ExecuteResponse* resp) override;
  grpc::ServerUnaryReactor* Read(grpc::CallbackServerContext* ctx,
                                 const v1::ReadRequest* req,
                                 v1::FetchChunk* resp) override;
  // Raw: the request is a tensord.v1.FetchRequest, the replies are
  // tensord.v1.FetchChunk messages.
  using TensorServiceBase::Fetch;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Fetch(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* ctx,
                                    const v1::ReleaseRequest* req,
                                    v1::ReleaseResponse* resp) override;
  grpc::ServerUnaryReactor* GetTensor(grpc::CallbackServerContext* ctx,
                                      const v1::GetTensorRequest* req,
                                      v1::TensorResponse* resp) override;
  grpc::ServerUnaryReactor* ListTensors(
      grpc::CallbackServerContext* ctx, const v1::ListTensorsRequest* req,
      v1::ListTensorsResponse* resp) override;
  grpc::ServerUnaryReactor* ListSessions(
      grpc::CallbackServerContext* ctx, const v1::ListSessionsRequest* req,
      v1::ListSessionsResponse* resp) override;
  grpc::ServerUnaryReactor* ListAllTensors(
      grpc::CallbackServerContext* ctx, const v1::ListAllTensorsRequest* req,
      v1::ListAllTensorsResponse* resp) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx,
                                     const v1::GetStatsRequest* req,
                                     v1::GetStatsResponse* resp) override;
  // Same-host shared memory: thin wrappers over the Runtime's methods,
  // which map, validate and copy (core/shared_memory.h).
  grpc::ServerUnaryReactor* RegisterSharedMemory(
      grpc::CallbackServerContext* ctx,
      const v1::RegisterSharedMemoryRequest* req,
      v1::RegisterSharedMemoryResponse* resp) override;
  grpc::ServerUnaryReactor* UnregisterSharedMemory(
      grpc::CallbackServerContext* ctx,
      const v1::UnregisterSharedMemoryRequest* req,
      v1::UnregisterSharedMemoryResponse* resp) override;
  grpc::ServerUnaryReactor* UploadFromSharedMemory(
      grpc::CallbackServerContext* ctx,
      const v1::UploadFromSharedMemoryRequest* req,
      v1::TensorResponse* resp) override;
  grpc::ServerUnaryReactor* FetchToSharedMemory(
      grpc::CallbackServerContext* ctx,
      const v1::FetchToSharedMemoryRequest* req,
      v1::TensorResponse* resp) override;

 private:
  // Runs `body` (returning absl::Status) unless draining, and finishes the
  // default reactor with the mapped status.
  template <typename Body>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx,
                                  const char* method, Body&& body);
  // Unary() for a mutating RPC: with a request id in the metadata, a
  // remembered response of that id in `session` is returned without running
  // `body`, and a successful `resp` is remembered.
  template <typename Body>
  grpc::ServerUnaryReactor* Mutating(grpc::CallbackServerContext* ctx,
                                     const char* method,
                                     const std::string& session,
                                     google::protobuf::Message* resp,
                                     Body&& body);
  // UNAVAILABLE while draining; UNAUTHENTICATED without a valid token.
  absl::Status CheckServing(const grpc::CallbackServerContext* ctx) const;
  uint64_t NextRequestId() { return next_request_id_.fetch_add(1) + 1; }

  core::Runtime* runtime_;  // borrowed
  Metrics* metrics_;        // borrowed
  const TokenAuthenticator* auth_;  // borrowed; nullptr = no auth
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_request_id_{0};
  std::atomic<int64_t> in_flight_{0};
  const std::string instance_id_;
  uint64_t max_inline_bytes_ = kDefaultMaxInlineBytes;
  const std::chrono::steady_clock::time_point started_ =
      std::chrono::steady_clock::now();

  friend class RpcScope;
  friend class UploadReactor;
  friend class FetchReactor;
};

}  // namespace tensord::server

#endif  // TENSORD_SERVER_GRPC_SERVICE_H_
