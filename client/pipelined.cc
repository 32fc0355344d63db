// The Session's pipelined path (client/grpc_session.h, "The pipelined
// path"): calls planned here and sent on the command stream.
#include <algorithm>
#include <cstring>
#include <limits>

#include "client/grpc_session.h"
#include "core/base/error_kind.h"
#include "core/base/op_table.h"
#include "core/base/shape.h"
#include "core/planner/op_plan.h"
#include "proto/wire/op_convert.h"

namespace tensord::client::internal {
namespace {

core::DType ToCore(DType dtype) {
  return static_cast<core::DType>(static_cast<int>(dtype));
}

// The Error of a status the local planner returned, with its kind.
[[noreturn]] void ThrowStatus(const absl::Status& status) {
  throw Error(static_cast<StatusCode>(status.code()),
              std::string(status.message()),
              static_cast<ErrorKind>(core::ErrorKindOf(status)));
}

// The element count of `shape` and its bytes in `dtype`, or nullopt when
// the server should judge the shape (negative dims, too high a rank, an
// overflow).
std::optional<uint64_t> BytesOf(const std::vector<int64_t>& shape,
                                DType dtype) {
  const absl::StatusOr<core::Shape> s = core::Shape::Make(shape);
  if (!s.ok()) return std::nullopt;
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / 16 /
                          static_cast<uint64_t>(d)) {
      return std::nullopt;
    }
    n *= static_cast<uint64_t>(d);
  }
  return n * core::DTypeSize(ToCore(dtype));
}

}  // namespace

void Session::LoadDevices() {
  v1::ListDevicesResponse listed;
  try {
    listed = Call(&v1::TensorService::Stub::ListDevices,
                  v1::ListDevicesRequest());
  } catch (const Error&) {
    return;  // no pipelining; the unary calls say what is wrong
  }
  std::vector<DeviceEntry> devices;
  for (const v1::DeviceInfo& d : listed.devices()) {
    // A server without capability tables has no command stream either.
    if (d.capabilities().empty()) return;
    devices.push_back(DeviceEntry{node_prefix_ + d.name(), d.kind(),
                                  wire::FromProto(d.capabilities())});
  }
  devices_ = std::move(devices);
  pipelined_ = !devices_.empty();
}

const Session::DeviceEntry* Session::FindDevice(
    const std::string& device) const {
  for (const DeviceEntry& d : devices_) {
    if (d.name == device) return &d;
  }
  // The aliases the server documents: "" and "cpu" are the first host
  // device, "cpu:0" a lone "cpu", "cuda" is "cuda:0", each with or without
  // this server's node. Anything else the server judges (its message names
  // the problem or the devices it has).
  std::string_view bare = device;
  if (!node_prefix_.empty() && bare.starts_with(node_prefix_)) {
    bare.remove_prefix(node_prefix_.size());
  }
  std::string name(bare);
  if (bare.empty() || bare == "cpu") name = "cpu:0";
  if (bare == "cuda") name = "cuda:0";
  name = node_prefix_ + name;
  const std::string lone_cpu = node_prefix_ + "cpu";
  for (const DeviceEntry& d : devices_) {
    if (d.name == name || (name == node_prefix_ + "cpu:0" && d.name == lone_cpu)) {
      return &d;
    }
  }
  return nullptr;
}

CommandStream* Session::Stream() const {
  if (!pipelined_) return nullptr;
  std::call_once(stream_once_, [this] {
    try {
      stream_ = std::make_unique<CommandStream>(channel_, id_, instance_);
      started_.store(stream_.get());
    } catch (const Error&) {
      // No stream: the unary path.
    }
  });
  return started_.load();
}

void Session::DrainStream() const {
  if (CommandStream* stream = started_.load()) stream->Drain();
}

void Session::Register(const TensorState* state) const {
  if (!pipelined_) return;
  std::lock_guard<std::mutex> lock(registry_mu_);
  registry_[state->handle] = state;
}

void Session::Unregister(uint64_t handle) const {
  if (!pipelined_) return;
  std::lock_guard<std::mutex> lock(registry_mu_);
  registry_.erase(handle);
}

void Session::CheckAlive(uint64_t handle) const {
  if (CommandStream* stream = started_.load()) {
    if (std::optional<Error> why = stream->Dead(handle)) {
      stream->ThrowPendingFailure();  // reported (and cleared) once, here
      throw Error(why->code(), "tensor " + std::to_string(handle) +
                                   " was never made: " + why->message());
    }
  }
}

uint64_t Session::SendCommand(v1::Command cmd, bool want_reply) const {
  if (cmd.has_create() || cmd.has_to() || cmd.has_run()) {
    // Releases another thread has taken but not sent yet (the background
    // flush) go first: the memory they free may be what this command needs,
    // and it has nothing of theirs to carry. A stream flush ends its carry
    // as soon as it is sent, so the wait is short.
    std::unique_lock<std::mutex> lock(release_mu_);
    release_cv_.wait(lock, [this] { return pending_releases_ == 0; });
  }
  DroppedHandles carried(*this);
  if (cmd.has_create()) carried.TakeInto(cmd.mutable_create()->mutable_release());
  if (cmd.has_to()) carried.TakeInto(cmd.mutable_to()->mutable_release());
  if (cmd.has_run()) carried.TakeInto(cmd.mutable_run()->mutable_release());
  const uint64_t seq = Stream()->Send(std::move(cmd), want_reply);
  carried.Sent();  // ordered before anything sent later
  return seq;
}

std::shared_ptr<const TensorState> Session::NewState(
    uint64_t handle, const DeviceEntry& device, DType dtype,
    std::vector<int64_t> shape) const {
  auto state = std::make_shared<TensorState>();
  state->session = shared_from_this();
  state->handle = handle;
  state->device = Device(device.name);
  state->dtype = dtype;
  state->nbytes = BytesOf(shape, dtype).value_or(0);
  state->shape = std::move(shape);
  Register(state.get());
  return state;
}

bool Session::RunOnStream(const v1::Op& op,
                          std::shared_ptr<const TensorState>* result) const {
  if (Stream() == nullptr) return false;
  const absl::StatusOr<core::OpSpec> spec = wire::FromProto(op);
  if (!spec.ok()) return false;  // the server says what is malformed
  // The operands' metadata, in the planner's order.
  std::vector<core::Shape> shapes;
  std::vector<std::string> devices;
  std::vector<DType> dtypes;
  shapes.reserve(spec->inputs.size());
  {
    std::lock_guard<std::mutex> lock(registry_mu_);
    for (const core::Operand& operand : spec->inputs) {
      auto it = registry_.find(operand.handle);
      if (operand.is_result || it == registry_.end()) return false;
      const absl::StatusOr<core::Shape> shape =
          core::Shape::Make(it->second->shape);
      if (!shape.ok()) return false;
      shapes.push_back(*shape);
      devices.push_back(it->second->device.str());
      dtypes.push_back(it->second->dtype);
    }
  }
  for (const core::Operand& operand : spec->inputs) CheckAlive(operand.handle);
  std::vector<core::OpInput> inputs;
  inputs.reserve(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    inputs.push_back(core::OpInput{ToCore(dtypes[i]), shapes[i], devices[i]});
  }
  const DeviceEntry* device =
      devices.empty() ? nullptr : FindDevice(devices.front());
  if (device == nullptr) return false;
  const absl::StatusOr<core::OpResult> planned =
      core::PlanOp(*spec, inputs, core::Target{device->caps, device->name});
  if (!planned.ok()) ThrowStatus(planned.status());

  v1::Command cmd;
  *cmd.mutable_run()->mutable_op() = op;
  if (planned->in_place) {
    SendCommand(std::move(cmd));
    *result = nullptr;
    return true;
  }
  const uint64_t handle = Stream()->NewHandle();
  cmd.set_result(handle);
  const auto& dims = planned->shape.dims();
  *result = NewState(handle, *device,
                     static_cast<DType>(static_cast<int>(planned->dtype)),
                     std::vector<int64_t>(dims.begin(), dims.end()));
  SendCommand(std::move(cmd));
  return true;
}

bool Session::ExecuteOnStreamPlanned(
    v1::ExecuteRequest* list,
    std::vector<std::shared_ptr<const TensorState>>* kept) const {
  const v1::ExecuteRequest& request = *list;
  if (Stream() == nullptr || request.ByteSizeLong() > kUploadChunkBytes) {
    return false;
  }
  // Each op's result as the planner returned it, on its device (reserved:
  // the planner's inputs point into it).
  struct Planned {
    core::DType dtype;
    core::Shape shape;
    const DeviceEntry* device;
  };
  std::vector<Planned> planned;
  planned.reserve(static_cast<size_t>(request.ops_size()));
  std::vector<uint64_t> handles;  // the session's tensors the list names
  for (int i = 0; i < request.ops_size(); ++i) {
    const absl::StatusOr<core::OpSpec> spec = wire::FromProto(request.ops(i));
    if (!spec.ok()) return false;
    const core::OpRow& row = core::RowOf(*spec);
    if (row.returns_input || row.autograd_state) return false;
    std::vector<core::Shape> shapes;  // the handles' (reserved: see above)
    std::vector<std::string> devices;
    shapes.reserve(spec->inputs.size());
    devices.reserve(spec->inputs.size());
    std::vector<core::OpInput> inputs;
    inputs.reserve(spec->inputs.size());
    for (const core::Operand& operand : spec->inputs) {
      if (operand.is_result) {
        if (operand.result_of >= planned.size()) return false;
        const Planned& p = planned[operand.result_of];
        inputs.push_back(core::OpInput{p.dtype, p.shape, p.device->name});
        continue;
      }
      std::lock_guard<std::mutex> lock(registry_mu_);
      auto it = registry_.find(operand.handle);
      if (it == registry_.end()) return false;
      const absl::StatusOr<core::Shape> shape =
          core::Shape::Make(it->second->shape);
      if (!shape.ok()) return false;
      shapes.push_back(*shape);
      devices.push_back(it->second->device.str());
      inputs.push_back(core::OpInput{ToCore(it->second->dtype), shapes.back(),
                                     devices.back()});
      handles.push_back(operand.handle);
    }
    const DeviceEntry* device =
        inputs.empty() ? nullptr : FindDevice(std::string(inputs[0].device));
    if (device == nullptr) return false;
    const absl::StatusOr<core::OpResult> plan =
        core::PlanOp(*spec, inputs, core::Target{device->caps, device->name});
    if (!plan.ok()) return false;
    planned.push_back({plan->dtype, plan->shape, device});
  }
  std::vector<bool> seen(planned.size(), false);
  for (uint32_t k : request.keep()) {
    if (k >= planned.size() || seen[k]) return false;
    seen[k] = true;
  }
  for (uint64_t handle : handles) CheckAlive(handle);
  kept->clear();
  for (uint32_t k : request.keep()) {
    const uint64_t handle = Stream()->NewHandle();
    list->add_results(handle);
    const Planned& p = planned[k];
    const auto& dims = p.shape.dims();
    kept->push_back(NewState(handle, *p.device,
                             static_cast<DType>(static_cast<int>(p.dtype)),
                             std::vector<int64_t>(dims.begin(), dims.end())));
  }
  v1::Command cmd;
  list->clear_session();
  cmd.mutable_execute()->Swap(list);
  SendCommand(std::move(cmd));
  return true;
}

bool Session::CreateOnStream(v1::CreateRequest request,
                             std::shared_ptr<const TensorState>* result) const {
  if (Stream() == nullptr) return false;
  const DeviceEntry* device = FindDevice(request.device());
  if (device == nullptr || !request.tag().empty()) return false;
  const absl::StatusOr<core::DType> core_dtype =
      wire::FromProto(request.dtype());
  if (!core_dtype.ok()) return false;
  const DType dtype = static_cast<DType>(static_cast<int>(*core_dtype));
  std::vector<int64_t> shape(request.shape().begin(), request.shape().end());
  const std::optional<uint64_t> nbytes = BytesOf(shape, dtype);
  if (!nbytes.has_value()) return false;
  if (request.has_fill()) {
    const v1::Fill::Kind kind = request.fill().kind();
    const bool random = kind == v1::Fill::RAND || kind == v1::Fill::RANDN;
    // arange's length is the server's to compute; a fill the device lacks
    // is the server's to refuse.
    if (kind == v1::Fill::ARANGE ||
        !device->caps.Has(random ? core::OpKind::kRandomFill
                                 : core::OpKind::kFill,
                          *core_dtype)) {
      return false;
    }
  } else if (request.has_data()) {
    const std::string& data = request.data();
    if (data.size() != *nbytes) return false;
    if (dtype == DType::kBool &&
        std::any_of(data.begin(), data.end(),
                    [](char c) { return c != 0 && c != 1; })) {
      return false;
    }
  } else {
    return false;
  }
  const uint64_t handle = Stream()->NewHandle();
  v1::Command cmd;
  cmd.set_result(handle);
  request.set_device(device->name);
  *cmd.mutable_create() = std::move(request);
  *result = NewState(handle, *device, dtype, std::move(shape));
  SendCommand(std::move(cmd));
  return true;
}

bool Session::ToOnStream(const TensorState& x, const std::string& device,
                         bool copy,
                         std::shared_ptr<const TensorState>* result) const {
  if (Stream() == nullptr) return false;
  const DeviceEntry* target = FindDevice(device);
  if (target == nullptr) return false;
  CheckAlive(x.handle);
  if (target->name == x.device.str() && !copy) {
    *result = nullptr;  // x itself, as PyTorch's `z.cuda(1) is z`
    return true;
  }
  const uint64_t handle = Stream()->NewHandle();
  v1::Command cmd;
  cmd.set_result(handle);
  cmd.mutable_to()->set_handle(x.handle);
  cmd.mutable_to()->set_device(target->name);
  *result = NewState(handle, *target, x.dtype, x.shape);
  SendCommand(std::move(cmd));
  return true;
}

}  // namespace tensord::client::internal
