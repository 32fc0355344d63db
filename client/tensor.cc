#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "client/grpc_ops.h"
#include "client/grpc_session.h"
#include "client/host_copy.h"
#include "client/tensor_repr.h"
#include "tensord/client.h"

namespace tensord::client {

using internal::v1::TensorService;

Tensor::Tensor(std::shared_ptr<const internal::TensorState> state)
    : state_(std::move(state)) {}

Tensor::~Tensor() = default;

uint64_t Tensor::handle() const { return state_->handle; }
const Device& Tensor::device() const { return state_->device; }
DType Tensor::dtype() const { return state_->dtype; }
const std::vector<int64_t>& Tensor::shape() const { return state_->shape; }
uint64_t Tensor::nbytes() const { return state_->nbytes; }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : state_->shape) n *= d;
  return n;
}

bool Tensor::is(const Tensor& other) const {
  return state_ == other.state_ || (state_->session == other.state_->session &&
                                    state_->handle == other.state_->handle);
}

Tensor Tensor::to(const Device& device, bool copy) const {
  const std::string& node = state_->session->node_prefix();
  if (const size_t slash = device.str().find('/');
      !node.empty() && slash != std::string::npos &&
      device.str().compare(0, slash + 1, node) != 0) {
    return ToNode(device.str().substr(0, slash), device);
  }
  std::shared_ptr<const internal::TensorState> moved;
  if (state_->session->ToOnStream(*state_, device.str(), copy, &moved)) {
    return moved == nullptr ? *this : Tensor(std::move(moved));
  }
  internal::v1::ToRequest request;
  request.set_handle(state_->handle);
  request.set_device(device.str());
  request.set_copy(copy);
  const internal::v1::TensorInfo info =
      state_->session->Call(&TensorService::Stub::To, std::move(request))
          .tensor();
  // Already there: the server hands back the same handle, which this object
  // owns already (adopting it again would release it twice).
  if (info.handle() == state_->handle) return *this;
  return Tensor(state_->session->Adopt(info));
}

// Another node of the cluster: this node grants the tensor to that one,
// which pulls it from here itself; the client sends two small requests.
Tensor Tensor::ToNode(const std::string& node, const Device& device) const {
  std::shared_ptr<const internal::Session> peer =
      state_->session->PeerSession(node);
  if (peer == nullptr) {
    throw Error(StatusCode::NOT_FOUND,
                "no node '" + node + "' in this tensor's cluster");
  }
  // A node that cannot be reached is named in the error: the client's
  // own connection failed, so no server said which node it was. A server's
  // answer (the destination saying its source is gone, say) names its
  // cause already and goes on unchanged.
  auto unreachable = [](const Error& e, std::string_view which) {
    if (!e.unanswered()) throw;
    throw Error(e.code(), "node '" + std::string(which) + "': " + e.message(),
                true);
  };
  std::string source = state_->session->node_prefix();
  if (!source.empty()) source.pop_back();  // "tensord-0/" -> "tensord-0"
  internal::v1::GrantTransferRequest grant;
  grant.set_handle(state_->handle);
  grant.set_destination_node(node);
  internal::v1::GrantTransferResponse granted;
  try {
    granted = state_->session->Call(&TensorService::Stub::GrantTransfer,
                                    std::move(grant));
  } catch (const Error& e) {
    unreachable(e, source);
  }
  internal::v1::ImportRequest import;
  import.set_source_node(granted.source_node());
  import.set_grant(granted.grant());
  import.set_device(device.str());
  internal::v1::TensorInfo info;
  try {
    info = peer->Call(&TensorService::Stub::Import, std::move(import)).tensor();
  } catch (const Error& e) {
    unreachable(e, node);
  }
  return Tensor(peer->Adopt(info));
}

template <typename T>
requires requires { DTypeOf<T>::value; }
std::vector<T> Tensor::fetch() const {
  CheckElementType(kDTypeOf<T>, "fetch");
  if constexpr (std::is_same_v<T, bool>) {  // vector<bool> is packed
    std::string bytes = fetch_bytes();
    std::vector<T> out(bytes.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = bytes[i] != 0;
    return out;
  } else {
    // Straight into the result: one fresh buffer, its pages mapped in one
    // go before the zeroing resize, no intermediate string.
    const auto n = static_cast<size_t>(numel());
    std::vector<T> out;
    out.reserve(n);
    internal::PrefaultForWrite(out.data(), n * sizeof(T));
    out.resize(n);
    fetch_into(std::as_writable_bytes(std::span<T>(out)));
    return out;
  }
}

template std::vector<float> Tensor::fetch<float>() const;
template std::vector<double> Tensor::fetch<double>() const;
template std::vector<int32_t> Tensor::fetch<int32_t>() const;
template std::vector<int64_t> Tensor::fetch<int64_t>() const;
template std::vector<bool> Tensor::fetch<bool>() const;

std::string Tensor::fetch_bytes() const {
  return state_->session->Fetch(state_->handle, state_->nbytes);
}

void Tensor::CheckElementType(DType requested, std::string_view what) const {
  if (requested != state_->dtype) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                std::string(what) + "<" + std::string(DTypeName(requested)) +
                    ">() on a tensor of dtype " +
                    std::string(DTypeName(state_->dtype)) +
                    "; the element type must match the dtype");
  }
}

void Tensor::CheckSingleElement() const {
  if (numel() != 1) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "a Tensor with " + std::to_string(numel()) +
                    " elements cannot be converted to a scalar");
  }
}

std::string Tensor::str() const {
  const std::string bytes = fetch_bytes();
  return internal::FormatTensor(state_->shape, state_->dtype, bytes,
                                state_->device.str(),
                                internal::AutogradSuffix(*this));
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

}  // namespace tensord::client
