// The client's autograd calls (tensord/autograd.h and Tensor's): messages
// naming what the server's autograd is to do.
#include "tensord/autograd.h"

#include "client/grpc_ops.h"

namespace tensord::client {
namespace {

thread_local int no_grad_depth = 0;

// `x`'s TensorInfo as the server has it now (after what the stream still
// carries), without adopting it.
v1::TensorInfo InfoOf(const Tensor& x) {
  const auto& state = internal::TensorAccess::State(x);
  state->session->DrainStream();
  v1::GetTensorRequest request;
  request.set_handle(x.handle());
  return state->session->Call(&v1::TensorService::Stub::GetTensor, request)
      .tensor();
}

}  // namespace

NoGradGuard::NoGradGuard() { ++no_grad_depth; }
NoGradGuard::~NoGradGuard() { --no_grad_depth; }
bool NoGradGuard::active() { return no_grad_depth > 0; }

namespace internal {
void MarkGradMode(v1::Op& op) {
  if (NoGradGuard::active()) op.set_no_grad(true);
}

std::string AutogradSuffix(const Tensor& t) {
  const v1::TensorInfo info = InfoOf(t);
  if (!info.grad_fn().empty()) return "grad_fn=<" + info.grad_fn() + ">";
  return info.requires_grad() ? "requires_grad=True" : "";
}
}  // namespace internal

using internal::HandleOperand;

void zero_grad(std::span<const Tensor> tensors) {
  if (tensors.empty()) return;
  v1::Op m;
  for (const Tensor& t : tensors) {
    *m.mutable_zero_grad()->add_tensors() = HandleOperand(t);
  }
  internal::RunOnTarget(tensors[0], std::move(m));
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  v1::Op m;
  *m.mutable_requires_grad()->mutable_x() = HandleOperand(*this);
  m.mutable_requires_grad()->set_requires_grad(requires_grad);
  internal::RunOnTarget(*this, std::move(m));
  return *this;
}

bool Tensor::requires_grad() const { return InfoOf(*this).requires_grad(); }

std::string Tensor::grad_fn() const { return InfoOf(*this).grad_fn(); }

void Tensor::backward(const std::optional<Tensor>& gradient,
                      bool retain_graph) const {
  // On the command stream when the session pipelines, like every other op:
  // the seed's step (zero_grad, forward, backward, step) then costs one
  // round trip, at loss.item(). An error only the server knows (a freed
  // graph, a saved tensor changed in place) surfaces at the next sync
  // point, naming the op; the planner's (a non-scalar root) at this call.
  v1::Op op;
  v1::BackwardArgs* args = op.mutable_backward();
  *args->mutable_root() = HandleOperand(*this);
  if (gradient.has_value()) {
    *args->mutable_gradient() = HandleOperand(*gradient);
  }
  args->set_retain_graph(retain_graph);
  internal::RunOnTarget(*this, std::move(op));
}

std::optional<Tensor> Tensor::grad() const {
  state_->session->DrainStream();
  v1::RunRequest request;
  *request.mutable_op()->mutable_grad()->mutable_x() = HandleOperand(*this);
  try {
    return Tensor(state_->session->MakeTensor(&v1::TensorService::Stub::Run,
                                              std::move(request)));
  } catch (const Error& e) {
    if (e.code() == StatusCode::FAILED_PRECONDITION &&
        std::string_view(e.what()).find("grad is None") !=
            std::string_view::npos) {
      return std::nullopt;
    }
    throw;
  }
}

Tensor Tensor::detach() const {
  v1::Op m;
  *m.mutable_detach()->mutable_x() = HandleOperand(*this);
  return internal::RunOp(*this, std::move(m));
}

}  // namespace tensord::client
