#include "tensord/client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <string>
#include <utility>

#include "client/grpc_session.h"

namespace tensord::client {

using internal::v1::TensorService;
namespace v1 = internal::v1;

Client::Client(std::string address)
    : Client(grpc::CreateChannel(ResolveAddress(address),
                                 grpc::InsecureChannelCredentials())) {}

Client::Client(std::shared_ptr<grpc::Channel> channel,
               const ClientOptions& options)
    : session_(internal::Session::Open(std::move(channel), options)) {}

Client Client::Attach(std::shared_ptr<grpc::Channel> channel,
                      std::string session_id) {
  if (session_id.empty()) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "Client::Attach: the session id is empty");
  }
  ClientOptions options;
  options.session = std::move(session_id);
  return Client(std::move(channel), options);
}

const std::string& Client::session() const { return session_->id(); }

std::chrono::milliseconds Client::session_ttl() const {
  return session_->ttl();
}

const std::string& Client::server_instance() const {
  return session_->instance();
}

Tensor Client::attach_tensor(uint64_t handle) const {
  v1::GetTensorRequest request;
  request.set_handle(handle);
  return Tensor(session_->MakeTensor(&TensorService::Stub::GetTensor,
                                     std::move(request)));
}

namespace {

DeviceInfo FromProto(const v1::DeviceInfo& d) {
  DeviceInfo out;
  out.name = d.name();
  out.kind = d.kind();
  out.model = d.model();
  out.total_memory = d.total_memory();
  out.free_memory = d.free_memory();
  out.held_memory = d.held_memory();
  out.memory_budget = d.memory_budget();
  out.compute_capability_major = d.compute_capability_major();
  out.compute_capability_minor = d.compute_capability_minor();
  out.multiprocessor_count = d.multiprocessor_count();
  out.live_tensors = d.live_tensors();
  return out;
}

TensorInfo FromProto(const v1::TensorInfo& t) {
  TensorInfo out;
  out.handle = t.handle();
  out.device = t.device();
  out.dtype = internal::DTypeFromProto(t.dtype());
  out.shape.assign(t.shape().begin(), t.shape().end());
  out.nbytes = t.nbytes();
  out.tag = t.tag();
  out.age_ms = t.age_ms();
  out.idle_ms = t.idle_ms();
  return out;
}

}  // namespace

std::vector<DeviceInfo> Client::devices() const {
  const v1::ListDevicesResponse response = session_->Call(
      &TensorService::Stub::ListDevices, v1::ListDevicesRequest());
  std::vector<DeviceInfo> out;
  for (const v1::DeviceInfo& d : response.devices()) {
    out.push_back(FromProto(d));
    out.back().name = session_->node_prefix() + out.back().name;
    out.back().node = response.node();
  }
  return out;
}

std::string Client::server_version() const {
  return session_
      ->Call(&TensorService::Stub::ListDevices, v1::ListDevicesRequest())
      .server_version();
}

int Client::device_count() const {
  int n = 0;
  for (const DeviceInfo& d : devices()) n += d.kind == "cuda";
  return n;
}

Device Client::try_gpu(int i) const {
  const std::string& node = session_->node_prefix();
  if (i >= 0 && device_count() >= i + 1) {
    return node + "cuda:" + std::to_string(i);
  }
  return node + "cpu";
}

std::vector<Device> Client::try_all_gpus() const {
  std::vector<Device> out;
  for (const DeviceInfo& d : devices()) {
    if (d.kind == "cuda") out.emplace_back(d.name);
  }
  if (out.empty()) out.emplace_back(session_->node_prefix() + "cpu");
  return out;
}

Tensor Client::FromBytes(DType dtype, std::vector<int64_t> shape,
                         std::string_view bytes, const Device& device) const {
  if (bytes.size() <= internal::Session::kInlineCreateBytes) {
    v1::CreateRequest request;
    request.set_device(device.str());
    request.set_dtype(internal::DTypeToProto(dtype));
    request.mutable_shape()->Add(shape.begin(), shape.end());
    request.set_data(bytes.data(), bytes.size());
    std::shared_ptr<const internal::TensorState> made;
    if (session_->CreateOnStream(std::move(request), &made)) {
      return Tensor(std::move(made));
    }
  }
  return Tensor(session_->Adopt(session_->CreateFromBytes(
      internal::DTypeToProto(dtype), shape, bytes, device.str())));
}

void Client::ThrowRaggedRows() {
  throw Error(StatusCode::INVALID_ARGUMENT,
              "tensor(): rows of a 2-D initializer must all have the same "
              "length");
}

namespace {

// A create on the session's command stream when it can go there, else the
// unary Create.
std::shared_ptr<const internal::TensorState> Make(
    const internal::Session& session, v1::CreateRequest request) {
  std::shared_ptr<const internal::TensorState> made;
  if (session.CreateOnStream(request, &made)) return made;
  return session.MakeTensor(&TensorService::Stub::Create, std::move(request));
}

v1::CreateRequest FillRequest(const std::vector<int64_t>& shape, DType dtype,
                              const Device& device, v1::Fill::Kind kind) {
  v1::CreateRequest request;
  request.set_device(device.str());
  request.set_dtype(internal::DTypeToProto(dtype));
  request.mutable_shape()->Add(shape.begin(), shape.end());
  request.mutable_fill()->set_kind(kind);
  return request;
}

}  // namespace

Tensor Client::zeros(std::vector<int64_t> shape, DType dtype,
                     Device device) const {
  return Tensor(
      Make(*session_, FillRequest(shape, dtype, device, v1::Fill::ZEROS)));
}

Tensor Client::ones(std::vector<int64_t> shape, DType dtype,
                    Device device) const {
  return Tensor(
      Make(*session_, FillRequest(shape, dtype, device, v1::Fill::ONES)));
}

Tensor Client::full(std::vector<int64_t> shape, double value, DType dtype,
                    Device device) const {
  v1::CreateRequest request = FillRequest(shape, dtype, device, v1::Fill::FULL);
  request.mutable_fill()->set_value(value);
  return Tensor(Make(*session_, std::move(request)));
}

Tensor Client::arange(double start, double end, double step, DType dtype,
                      Device device) const {
  v1::CreateRequest request = FillRequest({}, dtype, device, v1::Fill::ARANGE);
  request.mutable_fill()->set_start(start);
  request.mutable_fill()->set_end(end);
  request.mutable_fill()->set_step(step);
  return Tensor(Make(*session_, std::move(request)));
}

Tensor Client::rand(std::vector<int64_t> shape, Device device,
                    std::optional<uint64_t> seed) const {
  v1::CreateRequest request =
      FillRequest(shape, DType::kFloat32, device, v1::Fill::RAND);
  if (seed) request.mutable_fill()->set_seed(*seed);
  return Tensor(Make(*session_, std::move(request)));
}

Tensor Client::randn(std::vector<int64_t> shape, Device device,
                     std::optional<uint64_t> seed) const {
  v1::CreateRequest request =
      FillRequest(shape, DType::kFloat32, device, v1::Fill::RANDN);
  if (seed) request.mutable_fill()->set_seed(*seed);
  return Tensor(Make(*session_, std::move(request)));
}

void Client::synchronize() const { session_->DrainStream(); }

std::vector<TensorInfo> Client::tensors() const {
  std::vector<TensorInfo> out;
  v1::ListTensorsRequest request;  // paginated: every page, in handle order
  do {
    const v1::ListTensorsResponse page =
        session_->Call(&TensorService::Stub::ListTensors, request);
    for (const v1::TensorInfo& t : page.tensors()) out.push_back(FromProto(t));
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  return out;
}

std::vector<TensorInfo> Client::held() const {
  v1::ListTensorsRequest request;
  request.set_page_size(1);  // `held` rides the first page, whole
  const v1::ListTensorsResponse page =
      session_->Call(&TensorService::Stub::ListTensors, request);
  std::vector<TensorInfo> out;
  for (const v1::TensorInfo& t : page.held()) out.push_back(FromProto(t));
  return out;
}

}  // namespace tensord::client
