#include <ostream>
#include <string>
#include <utility>

#include "client/grpc_session.h"
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

Tensor Tensor::Binary(int op, const Tensor& rhs) const {
  internal::v1::BinaryRequest request;
  request.set_op(static_cast<internal::v1::BinaryOp>(op));
  request.set_lhs(state_->handle);
  request.set_rhs(rhs.state_->handle);
  return Tensor(
      state_->session->MakeTensor(&TensorService::Stub::Binary, request));
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return a.Binary(internal::v1::ADD, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return a.Binary(internal::v1::SUB, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return a.Binary(internal::v1::MUL, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return a.Binary(internal::v1::DIV, b);
}

Tensor Tensor::matmul(const Tensor& other) const {
  internal::v1::MatMulRequest request;
  request.set_lhs(state_->handle);
  request.set_rhs(other.state_->handle);
  return Tensor(
      state_->session->MakeTensor(&TensorService::Stub::MatMul, request));
}

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
  return internal::FormatTensor(state_->shape, state_->dtype, fetch_bytes(),
                                state_->device.str());
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

}  // namespace tensord::client
