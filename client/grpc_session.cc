#include "client/grpc_session.h"
#include "client/grpc_enums.h"
#include "client/host_copy.h"

#include <grpcpp/support/sync_stream.h>
#include <isa-l/crc.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "core/base/error_kind.h"
#include "proto/wire/bulk.h"

namespace tensord::client::internal {

namespace {

std::string InstanceOf(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(Session::kInstanceKey);
  if (it == trailers.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

void ThrowStatus(const grpc::Status& status,
                 const grpc::ClientContext& context) {
  if (InstanceOf(context).empty()) {
    throw Error(status.error_code(), status.error_message(),
                /*unanswered=*/true);
  }
  // torch's exception class, where the server named one.
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(Session::kErrorKindKey);
  const core::ErrorKind kind =
      it == trailers.end()
          ? core::ErrorKind::kRuntimeError
          : core::ErrorKindFromName(
                std::string_view(it->second.data(), it->second.size()))
                .value_or(core::ErrorKind::kRuntimeError);
  throw Error(status.error_code(), status.error_message(),
              static_cast<ErrorKind>(kind));
}

namespace {

std::string RandomHex64() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(v));
  return text;
}

}  // namespace

std::shared_ptr<Session> Session::Open(std::shared_ptr<grpc::Channel> channel,
                                       const ClientOptions& options) {
  if (channel == nullptr) {
    throw Error(StatusCode::INVALID_ARGUMENT, "Client: null channel");
  }
  auto stub = v1::TensorService::NewStub(channel);
  std::string id;
  int64_t ttl_ms = 0;
  grpc::ClientContext context;
  grpc::Status status;
  uint32_t max_release_handles = 0;
  if (options.session.empty()) {
    v1::OpenSessionRequest request;
    request.set_client_name("tensord-cpp-client/" + std::string(Version()));
    request.set_ttl_ms(options.ttl.count());
    v1::OpenSessionResponse response;
    status = stub->OpenSession(&context, request, &response);
    id = response.session();
    ttl_ms = response.ttl_ms();
    max_release_handles = response.limits().max_release_handles();
  } else {
    v1::KeepAliveRequest request;
    request.set_session(options.session);
    v1::KeepAliveResponse response;
    status = stub->KeepAlive(&context, request, &response);
    id = options.session;
    ttl_ms = response.ttl_ms();
    if (status.ok()) {
      grpc::ClientContext limits_context;
      v1::Limits limits;
      // Without the limits the client just sends each release on its own.
      if (stub->GetLimits(&limits_context, v1::GetLimitsRequest(), &limits)
              .ok()) {
        max_release_handles = limits.max_release_handles();
      }
    }
  }
  if (!status.ok()) ThrowStatus(status, context);
  // make_shared cannot reach the private constructor.
  std::shared_ptr<Session> session(new Session(
      std::move(channel), std::move(id), std::chrono::milliseconds(ttl_ms),
      options.keepalive, InstanceOf(context),
      std::min(max_release_handles, kMaxCarriedReleases)));
  if (options.qualify_devices) {
    const std::string node =
        session->Call(&v1::TensorService::Stub::ListDevices,
                      v1::ListDevicesRequest())
            .node();
    if (node.empty()) {
      throw Error(StatusCode::FAILED_PRECONDITION,
                  "the server has no node name, so its devices cannot be "
                  "named by node: start it with --node-name (servers before "
                  "0.2 have none)");
    }
    session->node_prefix_ = node + "/";
  }
  if (options.pipeline) session->LoadDevices();
  return session;
}

Session::Session(std::shared_ptr<grpc::ChannelInterface> channel,
                 std::string id, std::chrono::milliseconds ttl, bool keepalive,
                 std::string instance, uint32_t max_release_handles)
    : channel_(std::move(channel)),
      stub_(v1::TensorService::NewStub(channel_)),
      upload_method_("/tensord.v1.TensorService/Upload",
                     grpc::internal::RpcMethod::CLIENT_STREAMING, channel_),
      fetch_method_("/tensord.v1.TensorService/Fetch",
                    grpc::internal::RpcMethod::SERVER_STREAMING, channel_),
      id_(std::move(id)),
      ttl_(ttl),
      instance_(std::move(instance)),
      request_id_prefix_(RandomHex64()),
      max_release_handles_(max_release_handles) {
  const bool send_keepalives = keepalive && ttl_.count() > 0;
  if (send_keepalives || max_release_handles_ > 0) {
    background_ =
        std::thread([this, send_keepalives] { BackgroundLoop(send_keepalives); });
  }
}

void Session::BackgroundLoop(bool keepalive) {
  using Clock = std::chrono::steady_clock;
  const auto period = std::max(ttl_ / 3, std::chrono::milliseconds(1));
  auto next_keepalive = Clock::now() + period;
  std::unique_lock<std::mutex> lock(background_mu_);
  while (!stopping_) {
    std::optional<Clock::time_point> wake = flush_at_;
    if (keepalive && (!wake || next_keepalive < *wake)) wake = next_keepalive;
    if (wake) {
      background_cv_.wait_until(lock, *wake);
    } else {
      background_cv_.wait(lock);
    }
    if (stopping_) break;
    const auto now = Clock::now();
    if (flush_at_ && now >= *flush_at_) {
      flush_at_.reset();
      lock.unlock();
      FlushDropped();
      lock.lock();
    }
    if (keepalive && now >= next_keepalive) {
      lock.unlock();
      keepalive = SendKeepAlive();
      lock.lock();
      next_keepalive = Clock::now() + period;
    }
  }
}

bool Session::SendKeepAlive() {
  grpc::ClientContext context;
  // A renewal later than the lease is useless; do not wait past it.
  context.set_deadline(std::chrono::system_clock::now() + ttl_);
  {
    std::lock_guard<std::mutex> lock(background_mu_);
    if (stopping_) return false;
    keepalive_call_ = &context;
  }
  v1::KeepAliveRequest request;
  request.set_session(id_);
  v1::KeepAliveResponse response;
  const grpc::Status status = stub_->KeepAlive(&context, request, &response);
  {
    std::lock_guard<std::mutex> lock(background_mu_);
    keepalive_call_ = nullptr;
  }
  // The session is gone (expired, closed, or the server restarted): the
  // next call says so; there is nothing left to keep alive.
  if (status.error_code() == StatusCode::NOT_FOUND) return false;
  return instance_.empty() || InstanceOf(context).empty() ||
         InstanceOf(context) == instance_;
}

void Session::CheckInstance(const grpc::ClientContext& context) const {
  const std::string now = InstanceOf(context);
  if (instance_.empty() || now.empty() || now == instance_) return;
  throw Error(StatusCode::FAILED_PRECONDITION,
              "server restarted (instance " + instance_ + " → " + now +
                  "): this session's tensors are gone");
}

bool Session::ShouldRetry(const grpc::Status& status, int attempt) {
  constexpr int kMaxRetries = 3;
  if (status.error_code() != StatusCode::UNAVAILABLE ||
      attempt >= kMaxRetries ||
      status.error_message() == "server is shutting down") {
    return false;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(25 << attempt));
  return true;
}

std::string Session::NextRequestId() const {
  return request_id_prefix_ + "-" +
         std::to_string(next_request_id_.fetch_add(1) + 1);
}

Session::~Session() {
  {
    std::lock_guard<std::mutex> lock(background_mu_);
    stopping_ = true;
    if (keepalive_call_ != nullptr) keepalive_call_->TryCancel();
    if (release_call_ != nullptr) release_call_->TryCancel();
  }
  background_cv_.notify_all();
  if (background_.joinable()) background_.join();
  {
    // CloseSession frees them with the rest.
    std::lock_guard<std::mutex> lock(release_mu_);
    dropped_.clear();
  }
  WaitForReleases();
  // Commands without a reply yet need not run: the close frees everything.
  started_.store(nullptr);
  stream_.reset();
  v1::CloseSessionRequest request;
  request.set_session(id_);
  grpc::ClientContext context;
  v1::CloseSessionResponse response;
  (void)stub_->CloseSession(&context, request, &response);
}

v1::TensorInfo Session::CreateFromBytes(v1::DType dtype,
                                        const std::vector<int64_t>& shape,
                                        std::string_view bytes,
                                        const std::string& device) const {
  if (bytes.size() > kSharedMemoryMinBytes) {
    std::lock_guard<std::mutex> lock(shm_mu_);
    if (auto_region_ != nullptr && bytes.size() <= auto_region_->size()) {
      ParallelCopy(auto_region_->data(), bytes.data(), bytes.size());
      return UploadShared(*auto_region_, 0, dtype, shape, device);
    }
  }
  if (bytes.size() <= kInlineCreateBytes) {
    v1::CreateRequest request;
    request.set_device(device);
    request.set_dtype(dtype);
    request.mutable_shape()->Add(shape.begin(), shape.end());
    request.set_data(bytes.data(), bytes.size());
    return Call(&v1::TensorService::Stub::Create, std::move(request)).tensor();
  }

  // A retried upload carries the same request id: the server answers a
  // finished one with its first result instead of making a second tensor.
  const std::string request_id = NextRequestId();
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext context;
    context.AddMetadata(kRequestIdKey, request_id);
    v1::TensorResponse response;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channel_.get(), upload_method_, &context, &response));
    v1::UploadRequest head;  // the message's fields before `data`
    v1::UploadRequest::Header* header = head.mutable_header();
    header->set_session(id_);
    header->set_device(device);
    header->set_dtype(dtype);
    header->mutable_shape()->Add(shape.begin(), shape.end());
    for (size_t offset = 0; offset < bytes.size();
         offset += kUploadChunkBytes) {
      const size_t n = std::min(kUploadChunkBytes, bytes.size() - offset);
      // The chunk is copied once, into the slice gRPC sends.
      wire::BulkMessageBuilder message(
          head, v1::UploadRequest::kDataFieldNumber, n);
      std::memcpy(message.data(), bytes.data() + offset, n);
      // A failed write means the server ended the stream; Finish() says why.
      if (!writer->Write(message.Finish(v1::UploadRequest()))) break;
      head.clear_header();
    }
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    CheckInstance(context);
    if (status.ok()) return response.tensor();
    if (!ShouldRetry(status, attempt)) ThrowStatus(status, context);
  }
}

std::string Session::Fetch(uint64_t handle, uint64_t nbytes) const {
  if (std::optional<std::string> bytes = ReadOnStream(handle, nbytes)) {
    return *std::move(bytes);
  }
  DrainStream();
  CheckAlive(handle);
  if (nbytes > kSharedMemoryMinBytes) {
    std::lock_guard<std::mutex> lock(shm_mu_);
    if (auto_region_ != nullptr && nbytes <= auto_region_->size()) {
      FetchShared(handle, *auto_region_, 0);
      std::string bytes;
      bytes.reserve(nbytes);
      PrefaultForWrite(bytes.data(), nbytes);  // fresh: map its pages at once
      bytes.append(reinterpret_cast<const char*>(auto_region_->data()), nbytes);
      return bytes;
    }
  }
  if (nbytes <= kUploadChunkBytes) {
    v1::ReadRequest request;
    request.set_handle(handle);
    return CheckedData(
        handle, Call(&v1::TensorService::Stub::Read, std::move(request)));
  }
  std::string bytes;
  bytes.reserve(nbytes);
  {
    const PrefaultAhead prefault(bytes.data(), nbytes);  // joined before return
    StreamBytes(handle, nbytes, [&](const uint8_t* data, size_t n) {
      bytes.append(reinterpret_cast<const char*>(data), n);
    });
  }
  return bytes;
}

std::string Session::CheckedData(uint64_t handle, v1::FetchChunk chunk) {
  std::string data = std::move(*chunk.mutable_data());
  const uint32_t crc = crc32_gzip_refl(
      0, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  if (crc != chunk.crc32() || data.size() != chunk.tensor().nbytes()) {
    throw Error(StatusCode::DATA_LOSS,
                "Read of tensor " + std::to_string(handle) + ": " +
                    std::to_string(data.size()) + " bytes (tensor has " +
                    std::to_string(chunk.tensor().nbytes()) +
                    ") with CRC-32 " + std::to_string(crc) + " (sent " +
                    std::to_string(chunk.crc32()) + ")");
  }
  return data;
}

std::optional<std::string> Session::ReadOnStream(uint64_t handle,
                                                 uint64_t nbytes) const {
  CommandStream* stream = started_.load();
  if (stream == nullptr || nbytes > kUploadChunkBytes) return std::nullopt;
  CheckAlive(handle);
  v1::Command cmd;
  cmd.mutable_read()->set_handle(handle);
  v1::CommandReply reply = stream->Wait(stream->Send(std::move(cmd), true));
  if (reply.code() != 0) {
    throw Error(static_cast<StatusCode>(reply.code()), reply.message(),
                FromProto(reply.error_kind()));
  }
  return CheckedData(handle, std::move(*reply.mutable_chunk()));
}

std::optional<v1::ExecuteResponse> Session::ExecuteOnStream(
    const v1::ExecuteRequest& request) const {
  CommandStream* stream = started_.load();
  if (stream == nullptr || request.ByteSizeLong() > kUploadChunkBytes) {
    return std::nullopt;
  }
  v1::Command cmd;
  *cmd.mutable_execute() = request;
  cmd.mutable_execute()->clear_session();
  v1::CommandReply reply = stream->Wait(stream->Send(std::move(cmd), true));
  if (reply.code() != 0) {  // refused: a failure before it was thrown
    throw Error(static_cast<StatusCode>(reply.code()), reply.message(),
                FromProto(reply.error_kind()));
  }
  v1::ExecuteResponse response;
  response.mutable_kept()->Swap(reply.mutable_kept());
  return response;
}

void Session::StreamBytes(
    uint64_t handle, uint64_t nbytes,
    const std::function<void(const uint8_t*, size_t)>& append) const {
  constexpr int kMaxResumes = 3;
  uint64_t received = 0;
  std::optional<uint64_t> size;  // the tensor's, from the first chunk
  auto fail = [&](grpc::ClientContext& context, const std::string& what) {
    context.TryCancel();
    throw Error(StatusCode::DATA_LOSS,
                "Fetch of tensor " + std::to_string(handle) + ": " + what);
  };
  for (int attempt = 0;; ++attempt) {
    v1::FetchRequest request;
    request.set_session(id_);
    request.set_handle(handle);
    request.set_offset(received);
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            channel_.get(), fetch_method_, &context, request));
    grpc::ByteBuffer message;
    while (reader->Read(&message)) {
      v1::FetchChunk chunk;  // every field but `data`
      wire::BulkField data;
      std::string error;
      if (!wire::ScanBulkMessage(&message, v1::FetchChunk::kDataFieldNumber,
                                 &chunk, &data, &error) ||
          data.count > 1) {
        fail(context, "a chunk is not one tensord.v1.FetchChunk (" +
                          (error.empty() ? "`data` repeated" : error) + ")");
      }
      if (chunk.has_tensor() && !size.has_value()) {
        size = chunk.tensor().nbytes();
        if (*size != nbytes) {
          fail(context, "the tensor has " + std::to_string(*size) +
                            " bytes, expected " + std::to_string(nbytes));
        }
      }
      if (chunk.offset() != received || data.bytes > nbytes - received) {
        fail(context, "chunk of " + std::to_string(data.bytes) +
                          " bytes at offset " + std::to_string(chunk.offset()) +
                          " does not continue the " + std::to_string(received) +
                          " bytes received (of " + std::to_string(nbytes) + ")");
      }
      uint32_t crc = 0;
      (void)wire::ForEachBulkPiece(
          &message, v1::FetchChunk::kDataFieldNumber,
          [&](const uint8_t* piece, size_t n) {
            crc = crc32_gzip_refl(crc, piece, n);
            append(piece, n);
            return true;
          },
          &error);  // the scan above read the same bytes: no error here
      if (crc != chunk.crc32()) {
        fail(context, "chunk at offset " + std::to_string(chunk.offset()) +
                          " failed its CRC-32 check (computed " +
                          std::to_string(crc) + ", sent " +
                          std::to_string(chunk.crc32()) + ")");
      }
      received += data.bytes;
    }
    grpc::Status status = reader->Finish();
    CheckInstance(context);
    if (status.ok()) break;
    // Resume an interrupted stream from what already arrived intact.
    if (status.error_code() != StatusCode::UNAVAILABLE || received == 0 ||
        attempt == kMaxResumes) {
      ThrowStatus(status, context);
    }
  }
  if (!size.has_value() || received != nbytes) {
    throw Error(StatusCode::DATA_LOSS,
                "Fetch of tensor " + std::to_string(handle) + ": received " +
                    std::to_string(received) + " bytes, expected " +
                    std::to_string(nbytes));
  }
}

void Session::FetchInto(uint64_t handle, uint64_t nbytes,
                        std::span<std::byte> dst) const {
  if (dst.size() != nbytes) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "fetch_into: the destination is " + std::to_string(dst.size()) +
                    " bytes but tensor " + std::to_string(handle) + " has " +
                    std::to_string(nbytes));
  }
  if (std::optional<std::string> bytes = ReadOnStream(handle, nbytes)) {
    if (nbytes != 0) std::memcpy(dst.data(), bytes->data(), nbytes);
    return;
  }
  DrainStream();
  CheckAlive(handle);
  if (nbytes > kSharedMemoryMinBytes) {
    std::lock_guard<std::mutex> lock(shm_mu_);
    if (auto_region_ != nullptr && nbytes <= auto_region_->size()) {
      FetchShared(handle, *auto_region_, 0);
      ParallelCopy(dst.data(), auto_region_->data(), nbytes);
      return;
    }
  }
  if (nbytes <= kUploadChunkBytes) {
    const std::string bytes = Fetch(handle, nbytes);  // one unary Read
    if (nbytes != 0) std::memcpy(dst.data(), bytes.data(), nbytes);
    return;
  }
  size_t at = 0;  // Stream() checks that the pieces add up to nbytes
  StreamBytes(handle, nbytes, [&](const uint8_t* data, size_t n) {
    std::memcpy(dst.data() + at, data, n);
    at += n;
  });
}

void Session::ReleaseQuietly(uint64_t handle) const noexcept {
  try {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(release_mu_);
      if (max_release_handles_ == 0) {
        ++pending_releases_;
      } else {
        first = dropped_.empty();
        dropped_.push_back(handle);
      }
    }
    if (max_release_handles_ == 0) {
      try {
        SendRelease(handle);
      } catch (...) {
        std::vector<uint64_t> counted{handle};
        EndCarry(&counted, /*sent=*/true);
      }
    } else if (first) {
      ArmFlush();
    }
  } catch (...) {
    // The tensor dies with the session anyway.
  }
}

void Session::ArmFlush() const {
  std::lock_guard<std::mutex> lock(background_mu_);
  // Wake the background thread only to set its timer: when one is set
  // already it will wake then and send whatever is still waiting. (A wake
  // per dropped tensor cost a loop of unary matmuls about 2% at n = 512: a
  // third thread on a 2-core machine, in the round trip.)
  if (!flush_at_) {
    flush_at_ = std::chrono::steady_clock::now() + kReleaseFlushDelay;
    background_cv_.notify_all();
  }
}

void Session::TakeDropped(std::vector<uint64_t>* out) const {
  std::lock_guard<std::mutex> lock(release_mu_);
  const size_t n = std::min<size_t>(dropped_.size(), max_release_handles_);
  out->assign(dropped_.begin(), dropped_.begin() + n);
  dropped_.erase(dropped_.begin(), dropped_.begin() + n);
  if (n != 0) ++pending_releases_;
}

void Session::EndCarry(std::vector<uint64_t>* taken, bool sent) const noexcept {
  if (taken->empty()) return;
  {
    std::lock_guard<std::mutex> lock(release_mu_);
    if (!sent) {
      try {
        dropped_.insert(dropped_.begin(), taken->begin(), taken->end());
      } catch (...) {
        // The tensors die with the session anyway.
      }
    }
    taken->clear();
    if (--pending_releases_ == 0) release_cv_.notify_all();
  }
  // Handles put back go within the flush delay too, even if no call and no
  // later drop comes (a drop finds the list non-empty and sets no timer).
  if (!sent) {
    try {
      ArmFlush();
    } catch (...) {
      // They wait for the next call, or die with the session.
    }
  }
}

bool Session::FlushDropped() const noexcept {
  bool sent = false;
  for (;;) {
    std::vector<uint64_t> batch;
    try {
      TakeDropped(&batch);
      if (batch.empty()) return sent;
      sent = true;
      if (CommandStream* stream = started_.load()) {
        // In order with the commands that used them, no RPC of its own.
        v1::Command release;
        release.mutable_release()->mutable_release()->Add(batch.begin(),
                                                          batch.end());
        try {
          stream->Send(std::move(release));
        } catch (const Error&) {
          // A broken stream: the session's end frees them.
        }
        EndCarry(&batch, /*sent=*/true);
        continue;
      }
      // A blocking call: this runs on the background thread, or in
      // WaitForReleases, which would wait for it anyway. (An asynchronous
      // one would start gRPC's callback threads in this process for good;
      // they then take part in polling and read the replies of this
      // client's unary calls, waking the calling thread: one more thread
      // hop in every round trip.)
      ReleaseNow(batch);
      EndCarry(&batch, /*sent=*/true);
    } catch (...) {
      // The tensors die with the session anyway.
      EndCarry(&batch, /*sent=*/true);
      return sent;
    }
  }
}

void Session::SendRelease(uint64_t handle) const {
  struct PendingRelease {
    grpc::ClientContext context;
    v1::ReleaseRequest request;
    v1::ReleaseResponse response;
  };
  auto call = std::make_unique<PendingRelease>();
  call->request.set_session(id_);
  call->request.set_handle(handle);
  call->context.AddMetadata(kRequestIdKey, NextRequestId());
  call->context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(30));
  PendingRelease* raw = call.release();
  // `this` outlives the call: ~Session waits for pending releases.
  stub_->async()->Release(&raw->context, &raw->request, &raw->response,
                          [this, raw](const grpc::Status&) {
                            delete raw;
                            std::lock_guard<std::mutex> lock(release_mu_);
                            if (--pending_releases_ == 0) {
                              release_cv_.notify_all();
                            }
                          });
}

void Session::ReleaseNow(const std::vector<uint64_t>& listed) const {
  grpc::ClientContext context;
  context.AddMetadata(kRequestIdKey, NextRequestId());
  // Not longer than a KeepAlive period: on the background thread it holds
  // up the next renewal of the lease.
  std::chrono::milliseconds limit = std::chrono::seconds(30);
  if (ttl_.count() > 0) {
    limit = std::min(limit,
                     std::max(ttl_ / 3, std::chrono::milliseconds(1000)));
  }
  context.set_deadline(std::chrono::system_clock::now() + limit);
  v1::ReleaseRequest request;
  request.set_session(id_);
  request.mutable_release()->Add(listed.begin(), listed.end());
  v1::ReleaseResponse response;
  bool cancellable = false;  // ~Session cancels it: the close frees them
  {
    std::lock_guard<std::mutex> lock(background_mu_);
    if (stopping_) return;
    if (release_call_ == nullptr) {
      release_call_ = &context;
      cancellable = true;
    }
  }
  (void)stub_->Release(&context, request, &response);  // failures ignored
  if (cancellable) {
    std::lock_guard<std::mutex> lock(background_mu_);
    release_call_ = nullptr;
  }
}

bool Session::WaitForReleases() const {
  const bool streamed = FlushDropped() && started_.load() != nullptr;
  // Releases sent on the stream have run once it drains.
  if (streamed) DrainStream();
  std::unique_lock<std::mutex> lock(release_mu_);
  if (pending_releases_ == 0) return streamed;
  release_cv_.wait(lock, [this] { return pending_releases_ == 0; });
  return true;
}

std::shared_ptr<const TensorState> Session::Adopt(
    const v1::TensorInfo& info) const {
  auto state = std::make_shared<TensorState>();
  state->session = shared_from_this();
  state->handle = info.handle();
  state->device = Device(node_prefix_ + info.device());
  state->dtype = DTypeFromProto(info.dtype());
  state->shape.assign(info.shape().begin(), info.shape().end());
  state->nbytes = info.nbytes();
  Register(state.get());
  return state;
}

TensorState::~TensorState() {
  if (session == nullptr) return;
  session->Unregister(handle);
  session->ReleaseQuietly(handle);
}

v1::DType DTypeToProto(DType dtype) { return ToProto(dtype); }

DType DTypeFromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
    case v1::FLOAT64:
    case v1::INT32:
    case v1::INT64:
    case v1::BOOL:
    case v1::FLOAT16:
    case v1::BFLOAT16:
      return static_cast<DType>(dtype);
    default:
      throw Error(StatusCode::INTERNAL,
                  "server sent dtype " +
                      std::to_string(static_cast<int>(dtype)) +
                      ", which this client does not know");
  }
}

}  // namespace tensord::client::internal
