#include "server/grpc_convert.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/status.h"

namespace tensord::server {

void ToProto(const core::TensorMeta& meta, v1::TensorInfo* out) {
  out->set_handle(meta.handle);
  out->set_device(meta.device);
  out->set_dtype(ToProto(meta.dtype));
  out->mutable_shape()->Assign(meta.shape.dims().begin(),
                               meta.shape.dims().end());
  out->set_nbytes(meta.nbytes);
  out->set_tag(meta.tag);
  out->set_age_ms(meta.age_ms);
  out->set_idle_ms(meta.idle_ms);
  out->set_requires_grad(meta.requires_grad);
  out->set_grad_fn(meta.grad_fn);
}

void ToProto(const core::DeviceStatus& device, v1::DeviceInfo* out) {
  out->set_name(device.name);
  out->set_kind(std::string(core::DeviceKindName(device.kind)));
  out->set_model(device.properties.model);
  out->set_total_memory(device.properties.total_memory);
  out->set_free_memory(device.properties.free_memory);
  out->set_held_memory(device.held_bytes);
  out->set_memory_budget(device.budget_bytes);
  out->set_compute_capability_major(device.properties.compute_capability_major);
  out->set_compute_capability_minor(device.properties.compute_capability_minor);
  out->set_multiprocessor_count(device.properties.multiprocessor_count);
  out->set_live_tensors(device.live_tensors);
  ToProto(device.capabilities, out->mutable_capabilities());
}

}  // namespace tensord::server
