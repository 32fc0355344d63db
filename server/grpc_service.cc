#include "server/grpc_service.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include <zlib.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/grpc_convert.h"
#include "server/grpc_status.h"

namespace tensord::server {
namespace {

absl::Status FillTensor(const absl::StatusOr<core::TensorMeta>& meta,
                        v1::TensorResponse* resp) {
  if (!meta.ok()) return meta.status();
  ToProto(*meta, resp->mutable_tensor());
  return absl::OkStatus();
}

}  // namespace

// One RPC's bookkeeping: its request id, its start time, and the one exit
// through which its status is mapped, logged and counted.
class RpcScope {
 public:
  RpcScope(TensorServiceImpl* service, const char* method)
      : service_(service),
        method_(method),
        request_id_(service->NextRequestId()),
        start_(std::chrono::steady_clock::now()) {}

  grpc::Status Finish(const absl::Status& status) {
    grpc::Status mapped = FinishRpc(method_, request_id_, status);
    const double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start_)
                               .count();
    service_->metrics_->RecordRpc(
        method_, absl::StatusCodeToString(status.code()), seconds);
    return mapped;
  }

 private:
  TensorServiceImpl* service_;  // borrowed
  const char* method_;
  const uint64_t request_id_;
  const std::chrono::steady_clock::time_point start_;
};

absl::Status TensorServiceImpl::CheckServing(
    const grpc::CallbackServerContext* ctx) const {
  if (draining_.load()) {
    return absl::UnavailableError("server is shutting down");
  }
  if (auth_ != nullptr) return auth_->Check(ctx->client_metadata());
  return absl::OkStatus();
}

template <typename Body>
grpc::ServerUnaryReactor* TensorServiceImpl::Unary(
    grpc::CallbackServerContext* ctx, const char* method, Body&& body) {
  RpcScope scope(this, method);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::Status status = CheckServing(ctx);
  if (status.ok()) status = body();
  reactor->Finish(scope.Finish(status));
  return reactor;
}

grpc::ServerUnaryReactor* TensorServiceImpl::ListDevices(
    grpc::CallbackServerContext* ctx, const v1::ListDevicesRequest* req,
    v1::ListDevicesResponse* resp) {
  return Unary(ctx, "ListDevices", [&] {
    for (const core::DeviceStatus& d : runtime_->ListDevices()) {
      ToProto(d, resp->add_devices());
    }
    resp->set_server_version(TENSORD_VERSION);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::OpenSession(
    grpc::CallbackServerContext* ctx, const v1::OpenSessionRequest* req,
    v1::OpenSessionResponse* resp) {
  return Unary(ctx, "OpenSession", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::string session,
                     runtime_->OpenSession(req->client_name()));
    resp->set_session(std::move(session));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::CloseSession(
    grpc::CallbackServerContext* ctx, const v1::CloseSessionRequest* req,
    v1::CloseSessionResponse* resp) {
  return Unary(ctx, "CloseSession", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(core::SessionCloseStats stats,
                     runtime_->CloseSession(req->session()));
    resp->set_released_tensors(stats.released_tensors);
    resp->set_released_bytes(stats.released_bytes);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::Create(
    grpc::CallbackServerContext* ctx, const v1::CreateRequest* req,
    v1::TensorResponse* resp) {
  return Unary(ctx, "Create", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(core::DType dtype, FromProto(req->dtype()));
    switch (req->source_case()) {
      case v1::CreateRequest::kData: {
        const std::string& data = req->data();
        return FillTensor(
            runtime_->CreateFromData(
                req->session(), req->device(), dtype, Dims(req->shape()),
                {reinterpret_cast<const uint8_t*>(data.data()), data.size()},
                req->tag()),
            resp);
      }
      case v1::CreateRequest::kFill: {
        ASSIGN_OR_RETURN(core::FillSpec fill, FromProto(req->fill()));
        return FillTensor(
            runtime_->CreateFilled(req->session(), req->device(), dtype,
                                   Dims(req->shape()), fill,
                                   req->fill().end(), req->tag()),
            resp);
      }
      default:
        return absl::InvalidArgumentError(
            "Create needs a source: set either `data` or `fill`");
    }
  });
}

// Reads an upload stream: the header allocates the tensor, every message's
// data is appended in place, end of stream registers it. Any error finishes
// the RPC at once; destroying the Upload frees its memory.
class UploadReactor final : public grpc::ServerReadReactor<v1::UploadRequest> {
 public:
  UploadReactor(TensorServiceImpl* service, grpc::CallbackServerContext* ctx,
                v1::TensorResponse* resp)
      : service_(service), resp_(resp), scope_(service, "Upload") {
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
    StartRead(&message_);
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Consume() {
    if (upload_ == nullptr) {
      if (!message_.has_header()) {
        return absl::InvalidArgumentError(
            "the first Upload message must carry the header (session, "
            "device, dtype, shape)");
      }
      const v1::UploadRequest::Header& h = message_.header();
      ASSIGN_OR_RETURN(core::DType dtype, FromProto(h.dtype()));
      ASSIGN_OR_RETURN(upload_, service_->runtime_->BeginUpload(
                                    h.session(), h.device(), dtype,
                                    Dims(h.shape()), h.tag()));
    } else if (message_.has_header()) {
      return absl::InvalidArgumentError(
          "only the first Upload message may carry a header");
    }
    const std::string& data = message_.data();
    return upload_->Append(
        {reinterpret_cast<const uint8_t*>(data.data()), data.size()});
  }

  void Complete() {
    if (upload_ == nullptr) {
      Fail(absl::InvalidArgumentError(
          "Upload stream ended before its header arrived"));
      return;
    }
    absl::Status status = FillTensor(upload_->Finish(), resp_);
    upload_.reset();
    Finish(scope_.Finish(status));
  }

  void Fail(const absl::Status& status) {
    upload_.reset();
    Finish(scope_.Finish(status));
  }

  TensorServiceImpl* service_;  // borrowed
  v1::TensorResponse* resp_;    // owned by gRPC
  RpcScope scope_;
  v1::UploadRequest message_;
  std::unique_ptr<core::Runtime::Upload> upload_;
};

grpc::ServerReadReactor<v1::UploadRequest>* TensorServiceImpl::Upload(
    grpc::CallbackServerContext* ctx, v1::TensorResponse* resp) {
  return new UploadReactor(this, ctx, resp);
}

grpc::ServerUnaryReactor* TensorServiceImpl::To(
    grpc::CallbackServerContext* ctx, const v1::ToRequest* req,
    v1::TensorResponse* resp) {
  return Unary(ctx, "To", [&] {
    return FillTensor(runtime_->To(req->session(), req->handle(),
                                   req->device(), req->copy()),
                      resp);
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::Binary(
    grpc::CallbackServerContext* ctx, const v1::BinaryRequest* req,
    v1::TensorResponse* resp) {
  return Unary(ctx, "Binary", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(core::BinaryOp op, FromProto(req->op()));
    if (!req->has_scalar()) {
      return FillTensor(
          runtime_->Binary(req->session(), op, req->lhs(), req->rhs()), resp);
    }
    core::OpSpec spec;
    spec.kind = core::OpSpec::Kind::kBinary;
    spec.binary = op;
    spec.inputs = {core::Operand::Handle(req->lhs())};
    spec.scalar = FromProto(req->scalar());
    return FillTensor(runtime_->Run(req->session(), spec), resp);
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::MatMul(
    grpc::CallbackServerContext* ctx, const v1::MatMulRequest* req,
    v1::TensorResponse* resp) {
  return Unary(ctx, "MatMul", [&] {
    return FillTensor(runtime_->MatMul(req->session(), req->lhs(), req->rhs()),
                      resp);
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::Run(
    grpc::CallbackServerContext* ctx, const v1::RunRequest* req,
    v1::TensorResponse* resp) {
  return Unary(ctx, "Run", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(core::OpSpec spec, FromProto(req->op()));
    return FillTensor(runtime_->Run(req->session(), spec), resp);
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::Execute(
    grpc::CallbackServerContext* ctx, const v1::ExecuteRequest* req,
    v1::ExecuteResponse* resp) {
  return Unary(ctx, "Execute", [&]() -> absl::Status {
    std::vector<core::OpSpec> ops;
    ops.reserve(req->ops_size());
    for (int i = 0; i < req->ops_size(); ++i) {
      absl::StatusOr<core::OpSpec> spec = FromProto(req->ops(i));
      if (!spec.ok()) {
        return absl::Status(spec.status().code(),
                            absl::StrCat("op #", i, ": ",
                                         spec.status().message()));
      }
      ops.push_back(*std::move(spec));
    }
    ASSIGN_OR_RETURN(
        std::vector<core::TensorMeta> kept,
        runtime_->Execute(req->session(), ops,
                          {req->keep().data(),
                           static_cast<size_t>(req->keep_size())}));
    for (const core::TensorMeta& meta : kept) ToProto(meta, resp->add_kept());
    return absl::OkStatus();
  });
}

// Streams a tensor's bytes from the requested offset in chunks, one write in
// flight at a time. The first chunk carries the metadata; an empty tensor (or
// an offset at the end) still gets that one chunk.
class FetchReactor final : public grpc::ServerWriteReactor<v1::FetchChunk> {
 public:
  FetchReactor(TensorServiceImpl* service, grpc::CallbackServerContext* ctx,
               const v1::FetchRequest& req)
      : scope_(service, "Fetch") {
    absl::Status status = Open(service, ctx, req);
    if (!status.ok()) {
      Finish(scope_.Finish(status));
      return;
    }
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {  // client went away; nothing more to do
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
    ASSIGN_OR_RETURN(reader_,
                     service->runtime_->OpenReader(req.session(), req.handle()));
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
    ToProto(reader_->meta(), chunk_.mutable_tensor());
    return absl::OkStatus();
  }

  void WriteNext() {
    // Metadata rides on the first chunk only. The previous chunk is free to
    // reuse: gRPC is done with it once OnWriteDone has run.
    if (!first_) chunk_.clear_tensor();
    first_ = false;
    const uint64_t n = std::min<uint64_t>(chunk_bytes_, end_ - offset_);
    std::string* data = chunk_.mutable_data();
    data->resize(n);
    auto* bytes = reinterpret_cast<uint8_t*>(data->data());
    absl::Status status = reader_->Read(offset_, {bytes, n});
    if (!status.ok()) {
      Finish(scope_.Finish(status));
      return;
    }
    chunk_.set_offset(offset_);
    chunk_.set_crc32(static_cast<uint32_t>(
        crc32(crc32(0L, Z_NULL, 0), bytes, static_cast<uInt>(n))));
    offset_ += n;
    if (offset_ >= end_) {
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
  bool first_ = true;
  v1::FetchChunk chunk_;
};

grpc::ServerWriteReactor<v1::FetchChunk>* TensorServiceImpl::Fetch(
    grpc::CallbackServerContext* ctx, const v1::FetchRequest* req) {
  return new FetchReactor(this, ctx, *req);
}

grpc::ServerUnaryReactor* TensorServiceImpl::Release(
    grpc::CallbackServerContext* ctx, const v1::ReleaseRequest* req,
    v1::ReleaseResponse* resp) {
  return Unary(ctx, "Release", [&] {
    return runtime_->Release(req->session(), req->handle());
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::GetTensor(
    grpc::CallbackServerContext* ctx, const v1::GetTensorRequest* req,
    v1::TensorResponse* resp) {
  return Unary(ctx, "GetTensor", [&] {
    return FillTensor(runtime_->GetTensor(req->session(), req->handle()), resp);
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::ListTensors(
    grpc::CallbackServerContext* ctx, const v1::ListTensorsRequest* req,
    v1::ListTensorsResponse* resp) {
  return Unary(ctx, "ListTensors", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<core::TensorMeta> tensors,
                     runtime_->ListTensors(req->session()));
    uint64_t total = 0;
    for (const core::TensorMeta& t : tensors) {
      ToProto(t, resp->add_tensors());
      total += t.nbytes;
    }
    resp->set_total_bytes(total);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::ListSessions(
    grpc::CallbackServerContext* ctx, const v1::ListSessionsRequest* req,
    v1::ListSessionsResponse* resp) {
  return Unary(ctx, "ListSessions", [&] {
    for (const core::SessionInfo& s : runtime_->ListSessions()) {
      v1::SessionInfo* out = resp->add_sessions();
      out->set_id_prefix(s.id_prefix);
      out->set_client_name(s.client_name);
      out->set_tensors(s.tensors);
      out->set_bytes(s.bytes);
      out->set_age_ms(s.age_ms);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::ListAllTensors(
    grpc::CallbackServerContext* ctx, const v1::ListAllTensorsRequest* req,
    v1::ListAllTensorsResponse* resp) {
  return Unary(ctx, "ListAllTensors", [&] {
    for (const auto& [prefix, meta] : runtime_->ListAllTensors()) {
      auto* entry = resp->add_tensors();
      entry->set_session_id_prefix(prefix);
      ToProto(meta, entry->mutable_tensor());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorServiceImpl::GetStats(
    grpc::CallbackServerContext* ctx, const v1::GetStatsRequest* req,
    v1::GetStatsResponse* resp) {
  return Unary(ctx, "GetStats", [&] {
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
    return absl::OkStatus();
  });
}

}  // namespace tensord::server
