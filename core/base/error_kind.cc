#include "core/base/error_kind.h"

#include <array>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "core/base/absl_compat.h"

namespace tensord::core {
namespace {

// The payload's type URL (absl::Status::SetPayload).
constexpr absl::string_view kPayloadUrl = "type.tensord.dev/error-kind";

constexpr std::array<std::pair<ErrorKind, std::string_view>, 4> kNames = {{
    {ErrorKind::kRuntimeError, "RuntimeError"},
    {ErrorKind::kIndexError, "IndexError"},
    {ErrorKind::kValueError, "ValueError"},
    {ErrorKind::kTypeError, "TypeError"},
}};

}  // namespace

std::string_view ErrorKindName(ErrorKind kind) {
  for (const auto& [k, name] : kNames) {
    if (k == kind) return name;
  }
  return "RuntimeError";
}

std::optional<ErrorKind> ErrorKindFromName(std::string_view name) {
  for (const auto& [k, n] : kNames) {
    if (n == name) return k;
  }
  return std::nullopt;
}

absl::Status WithErrorKind(absl::Status status, ErrorKind kind) {
  if (status.ok()) return status;
  if (kind == ErrorKind::kRuntimeError) {
    status.ErasePayload(kPayloadUrl);
  } else {
    status.SetPayload(kPayloadUrl, absl::Cord(ToAbsl(ErrorKindName(kind))));
  }
  return status;
}

ErrorKind ErrorKindOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kPayloadUrl);  // absl::optional
  if (!payload.has_value()) return ErrorKind::kRuntimeError;
  return ErrorKindFromName(std::string(*payload))
      .value_or(ErrorKind::kRuntimeError);
}

absl::Status IndexError(std::string_view message) {
  return WithErrorKind(absl::InvalidArgumentError(ToAbsl(message)),
                       ErrorKind::kIndexError);
}

absl::Status ValueError(std::string_view message) {
  return WithErrorKind(absl::InvalidArgumentError(ToAbsl(message)),
                       ErrorKind::kValueError);
}

absl::Status TypeError(std::string_view message) {
  return WithErrorKind(absl::InvalidArgumentError(ToAbsl(message)),
                       ErrorKind::kTypeError);
}

}  // namespace tensord::core
