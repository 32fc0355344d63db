// The value types of the public API: Error, Device, DType.
#include <cstdlib>
#include <ostream>
#include <string>

#include "core/base/error_kind.h"
#include "tensord/client.h"

#ifndef TENSORD_VERSION
#error "TENSORD_VERSION must be defined by the build"
#endif

namespace tensord::client {

std::string_view Version() { return TENSORD_VERSION; }

std::string ResolveAddress(std::string_view address) {
  if (!address.empty()) return std::string(address);
  const char* env = std::getenv("TENSORD_ADDRESS");
  if (env != nullptr && *env != '\0') return env;
  return "127.0.0.1:50051";
}

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::OK:
      return "OK";
    case StatusCode::CANCELLED:
      return "CANCELLED";
    case StatusCode::UNKNOWN:
      return "UNKNOWN";
    case StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case StatusCode::ABORTED:
      return "ABORTED";
    case StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case StatusCode::INTERNAL:
      return "INTERNAL";
    case StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN_CODE";
  }
}

namespace {
std::string WhatOf(StatusCode code, const std::string& message) {
  std::string what(StatusCodeName(code));
  if (what == "UNKNOWN_CODE") {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive)
    // on "literal" + std::string&&.
    what += '(';
    what += std::to_string(static_cast<int>(code));
    what += ')';
  }
  return what + ": " + message;
}
}  // namespace

Error::Error(StatusCode code, std::string message, bool unanswered)
    : std::runtime_error(WhatOf(code, message)),
      code_(code),
      message_(std::move(message)),
      unanswered_(unanswered) {}

Error::Error(StatusCode code, std::string message, ErrorKind kind)
    : Error(code, std::move(message)) {
  kind_ = kind;
}

std::string_view ErrorKindName(ErrorKind kind) {
  // core's names (core/base/error_kind.h); the enums share their values.
  return core::ErrorKindName(static_cast<core::ErrorKind>(kind));
}

std::string_view Device::type() const {
  return std::string_view(name_).substr(0, name_.find(':'));
}

std::ostream& operator<<(std::ostream& os, const Device& device) {
  return os << device.str();
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kBool:
      return 1;
  }
  return 0;
}

std::ostream& operator<<(std::ostream& os, DType dtype) {
  return os << DTypeName(dtype);
}

}  // namespace tensord::client
