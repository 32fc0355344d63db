#include "client/grpc_session.h"

#include <grpcpp/support/sync_stream.h>
#include <zlib.h>

#include <algorithm>
#include <string>
#include <utility>

namespace tensord::client::internal {

void ThrowStatus(const grpc::Status& status) {
  throw Error(status.error_code(), status.error_message());
}

std::shared_ptr<Session> Session::Open(std::shared_ptr<grpc::Channel> channel) {
  if (channel == nullptr) {
    throw Error(StatusCode::INVALID_ARGUMENT, "Client: null channel");
  }
  auto stub = v1::TensorService::NewStub(channel);
  v1::OpenSessionRequest request;
  request.set_client_name("tensord-cpp-client/" + std::string(Version()));
  grpc::ClientContext context;
  v1::OpenSessionResponse response;
  grpc::Status status = stub->OpenSession(&context, request, &response);
  if (!status.ok()) ThrowStatus(status);
  // make_shared cannot reach the private constructor.
  return std::shared_ptr<Session>(
      new Session(std::move(stub), response.session()));
}

Session::~Session() {
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
  if (bytes.size() <= kUploadChunkBytes) {
    v1::CreateRequest request;
    request.set_device(device);
    request.set_dtype(dtype);
    request.mutable_shape()->Add(shape.begin(), shape.end());
    request.set_data(bytes.data(), bytes.size());
    return Call(&v1::TensorService::Stub::Create, std::move(request)).tensor();
  }

  grpc::ClientContext context;
  v1::TensorResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadRequest>> writer =
      stub_->Upload(&context, &response);
  v1::UploadRequest message;
  v1::UploadRequest::Header* header = message.mutable_header();
  header->set_session(id_);
  header->set_device(device);
  header->set_dtype(dtype);
  header->mutable_shape()->Add(shape.begin(), shape.end());
  for (size_t offset = 0; offset < bytes.size(); offset += kUploadChunkBytes) {
    const size_t n = std::min(kUploadChunkBytes, bytes.size() - offset);
    message.set_data(bytes.data() + offset, n);
    // A failed write means the server ended the stream; Finish() says why.
    if (!writer->Write(message)) break;
    message.clear_header();
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) ThrowStatus(status);
  return response.tensor();
}

std::string Session::Fetch(uint64_t handle) const {
  constexpr int kMaxResumes = 3;
  std::string bytes;
  std::optional<uint64_t> nbytes;  // known from the first chunk
  for (int attempt = 0;; ++attempt) {
    v1::FetchRequest request;
    request.set_session(id_);
    request.set_handle(handle);
    request.set_offset(bytes.size());
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::FetchChunk>> reader =
        stub_->Fetch(&context, request);
    v1::FetchChunk chunk;
    while (reader->Read(&chunk)) {
      if (chunk.has_tensor() && !nbytes.has_value()) {
        nbytes = chunk.tensor().nbytes();
        bytes.reserve(*nbytes);
      }
      if (chunk.offset() != bytes.size()) {
        context.TryCancel();
        throw Error(StatusCode::DATA_LOSS,
                    "Fetch of tensor " + std::to_string(handle) +
                        ": chunk at offset " + std::to_string(chunk.offset()) +
                        " does not continue the " +
                        std::to_string(bytes.size()) + " bytes received");
      }
      const std::string& data = chunk.data();
      const uLong crc = crc32(crc32(0L, Z_NULL, 0),
                              reinterpret_cast<const Bytef*>(data.data()),
                              static_cast<uInt>(data.size()));
      if (crc != chunk.crc32()) {
        context.TryCancel();
        throw Error(StatusCode::DATA_LOSS,
                    "Fetch of tensor " + std::to_string(handle) +
                        ": chunk at offset " + std::to_string(chunk.offset()) +
                        " failed its CRC-32 check (computed " +
                        std::to_string(crc) + ", sent " +
                        std::to_string(chunk.crc32()) + ")");
      }
      bytes.append(data);
    }
    grpc::Status status = reader->Finish();
    if (status.ok()) break;
    // Resume an interrupted stream from what already arrived intact.
    if (status.error_code() != StatusCode::UNAVAILABLE || bytes.empty() ||
        attempt == kMaxResumes) {
      ThrowStatus(status);
    }
  }
  if (!nbytes.has_value() || bytes.size() != *nbytes) {
    throw Error(StatusCode::DATA_LOSS,
                "Fetch of tensor " + std::to_string(handle) + ": received " +
                    std::to_string(bytes.size()) + " bytes, expected " +
                    (nbytes ? std::to_string(*nbytes) : "a size header"));
  }
  return bytes;
}

void Session::ReleaseQuietly(uint64_t handle) const noexcept {
  try {
    v1::ReleaseRequest request;
    request.set_handle(handle);
    Call(&v1::TensorService::Stub::Release, std::move(request));
  } catch (...) {
    // The tensor dies with the session anyway.
  }
}

std::shared_ptr<const TensorState> Session::Adopt(
    const v1::TensorInfo& info) const {
  auto state = std::make_shared<TensorState>();
  state->session = shared_from_this();
  state->handle = info.handle();
  state->device = Device(info.device());
  state->dtype = DTypeFromProto(info.dtype());
  state->shape.assign(info.shape().begin(), info.shape().end());
  state->nbytes = info.nbytes();
  return state;
}

TensorState::~TensorState() {
  if (session != nullptr) session->ReleaseQuietly(handle);
}

v1::DType DTypeToProto(DType dtype) { return static_cast<v1::DType>(dtype); }

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
