#include "server/grpc_convert.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensord::server {

absl::StatusOr<core::DType> FromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32: return core::DType::kFloat32;
    case v1::FLOAT64: return core::DType::kFloat64;
    case v1::INT32: return core::DType::kInt32;
    case v1::INT64: return core::DType::kInt64;
    case v1::BOOL: return core::DType::kBool;
    case v1::FLOAT16: return core::DType::kFloat16;
    case v1::BFLOAT16: return core::DType::kBFloat16;
    case v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          "dtype is not set; expected one of float32, float64, float16, "
          "bfloat16, int32, int64, bool");
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown dtype ", static_cast<int>(dtype),
          "; expected one of float32, float64, float16, bfloat16, int32, "
          "int64, bool"));
  }
}

v1::DType ToProto(core::DType dtype) {
  switch (dtype) {
    case core::DType::kFloat32: return v1::FLOAT32;
    case core::DType::kFloat64: return v1::FLOAT64;
    case core::DType::kInt32: return v1::INT32;
    case core::DType::kInt64: return v1::INT64;
    case core::DType::kBool: return v1::BOOL;
    case core::DType::kFloat16: return v1::FLOAT16;
    case core::DType::kBFloat16: return v1::BFLOAT16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::StatusOr<core::BinaryOp> FromProto(v1::BinaryOp op) {
  switch (op) {
    case v1::ADD: return core::BinaryOp::kAdd;
    case v1::SUB: return core::BinaryOp::kSub;
    case v1::MUL: return core::BinaryOp::kMul;
    case v1::DIV: return core::BinaryOp::kDiv;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown binary op ", static_cast<int>(op),
          "; expected ADD, SUB, MUL or DIV"));
  }
}

absl::StatusOr<core::FillSpec> FromProto(const v1::Fill& fill) {
  core::FillSpec spec;
  switch (fill.kind()) {
    case v1::Fill::ZEROS: spec.kind = core::FillSpec::Kind::kZeros; break;
    case v1::Fill::ONES: spec.kind = core::FillSpec::Kind::kOnes; break;
    case v1::Fill::FULL:
      spec.kind = core::FillSpec::Kind::kFull;
      spec.value = fill.value();
      break;
    case v1::Fill::ARANGE:
      spec.kind = core::FillSpec::Kind::kArange;
      spec.start = fill.start();
      spec.step = fill.step() == 0 ? 1 : fill.step();
      break;
    case v1::Fill::RAND:
      spec.kind = core::FillSpec::Kind::kRand;
      if (fill.low() != 0 || fill.high() != 0) {
        spec.low = fill.low();
        spec.high = fill.high();
      }
      break;
    case v1::Fill::RANDN:
      spec.kind = core::FillSpec::Kind::kRandn;
      spec.mean = fill.mean();
      spec.stddev = fill.std() == 0 ? 1 : fill.std();
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "fill kind is not set or unknown (", static_cast<int>(fill.kind()),
          "); expected ZEROS, ONES, FULL, ARANGE, RAND or RANDN"));
  }
  if (fill.has_seed()) spec.seed = fill.seed();
  return spec;
}

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
}

}  // namespace tensord::server
