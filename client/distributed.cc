// ProcessGroup (tensord/distributed.h): CreateGroup once, Collective per
// call, DestroyGroup when the last copy goes.
#include "tensord/distributed.h"

#include <utility>

#include "client/grpc_ops.h"
#include "client/grpc_session.h"
#include "tensord/client.h"

namespace tensord::client {
namespace internal {

struct GroupState {
  std::shared_ptr<const Session> session;
  uint64_t id = 0;
  std::vector<std::string> devices;
  std::string engine;
  ~GroupState() {
    try {
      v1::DestroyGroupRequest request;
      request.set_group(id);
      session->Call(&v1::TensorService::Stub::DestroyGroup, request);
    } catch (const Error&) {
      // The session's end frees it anyway.
    }
  }
};

}  // namespace internal

ProcessGroup Client::new_group(const std::vector<Device>& devices) const {
  v1::CreateGroupRequest request;
  for (const Device& d : devices) request.add_devices(d.str());
  const v1::GroupInfo info =
      session_->Call(&v1::TensorService::Stub::CreateGroup, request).group();
  auto state = std::make_shared<internal::GroupState>();
  state->session = session_;
  state->id = info.group();
  state->devices.assign(info.devices().begin(), info.devices().end());
  state->engine = info.engine();
  return ProcessGroup(std::move(state));
}

uint64_t ProcessGroup::id() const { return state_->id; }
const std::vector<std::string>& ProcessGroup::devices() const {
  return state_->devices;
}
const std::string& ProcessGroup::engine() const { return state_->engine; }

std::vector<Tensor> ProcessGroup::Run(int kind,
                                      const std::vector<Tensor>& tensors,
                                      DistReduceOp op, int root) {
  v1::CollectiveRequest request;
  request.set_group(state_->id);
  request.set_kind(static_cast<v1::CollectiveKind>(kind));
  static_assert(static_cast<int>(DistReduceOp::kMax) == v1::REDUCE_MAX);
  request.set_op(static_cast<v1::CollectiveReduceOp>(op));
  if (root < 0) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "broadcast: root is rank " + std::to_string(root) +
                    "; ranks count from 0");
  }
  request.set_root(static_cast<uint32_t>(root));
  for (const Tensor& t : tensors) {
    if (internal::TensorAccess::State(t)->session != state_->session) {
      throw Error(StatusCode::INVALID_ARGUMENT,
                  "a collective's tensor belongs to another client's "
                  "session");
    }
    request.add_tensors(t.handle());
  }
  const v1::CollectiveResponse response =
      state_->session->Call(&v1::TensorService::Stub::Collective, request);
  std::vector<Tensor> out;
  if (kind == v1::ALL_GATHER || kind == v1::REDUCE_SCATTER) {
    for (const v1::TensorInfo& info : response.tensors()) {
      out.push_back(
          internal::TensorAccess::Make(state_->session->Adopt(info)));
    }
  }
  return out;
}

void ProcessGroup::all_reduce(const std::vector<Tensor>& tensors,
                              DistReduceOp op) {
  Run(v1::ALL_REDUCE, tensors, op, 0);
}
void ProcessGroup::broadcast(const std::vector<Tensor>& tensors, int root) {
  Run(v1::BROADCAST, tensors, DistReduceOp::kSum, root);
}
std::vector<Tensor> ProcessGroup::all_gather(
    const std::vector<Tensor>& tensors) {
  return Run(v1::ALL_GATHER, tensors, DistReduceOp::kSum, 0);
}
std::vector<Tensor> ProcessGroup::reduce_scatter(
    const std::vector<Tensor>& tensors, DistReduceOp op) {
  return Run(v1::REDUCE_SCATTER, tensors, op, 0);
}
void ProcessGroup::barrier() { Run(v1::BARRIER, {}, DistReduceOp::kSum, 0); }

}  // namespace tensord::client
