// PyTorch's exception class for an error, carried beside its status code.
//
// torch raises IndexError for a dimension or index out of range, ValueError
// and TypeError for some argument checks, RuntimeError for everything else.
// tensord keeps the gRPC code it documents (INVALID_ARGUMENT, ...) and adds
// the class as a payload of the absl::Status, so the server can send it
// (trailing metadata `tensord-error-kind` on a unary call, CommandReply's
// error_kind on the stream) and the clients raise the class torch would —
// chosen from this, never by matching the message. A status without the
// payload is a RuntimeError.
//
// Code that rewords a status (the "op #k (...)" prefix inside an Execute)
// keeps the kind with Rewrapped (core/base/status.h).
// Thread-safety: stateless.
#ifndef TENSORD_CORE_BASE_ERROR_KIND_H_
#define TENSORD_CORE_BASE_ERROR_KIND_H_

#include <optional>
#include <string_view>

#include "absl/status/status.h"

namespace tensord::core {

// Values match tensord.v1.ErrorKind on the wire.
enum class ErrorKind {
  kRuntimeError = 0,
  kIndexError = 1,
  kValueError = 2,
  kTypeError = 3,
};

// "RuntimeError", "IndexError", "ValueError", "TypeError": Python's names,
// which the metadata carries.
std::string_view ErrorKindName(ErrorKind kind);
// The kind named `name`; nullopt for a name that is none of them.
std::optional<ErrorKind> ErrorKindFromName(std::string_view name);

// `status` carrying `kind` (OK stays OK; kRuntimeError removes the payload).
absl::Status WithErrorKind(absl::Status status, ErrorKind kind);
// The kind `status` carries; kRuntimeError when it carries none.
ErrorKind ErrorKindOf(const absl::Status& status);

// INVALID_ARGUMENT raised as torch's IndexError / ValueError / TypeError.
absl::Status IndexError(std::string_view message);
absl::Status ValueError(std::string_view message);
absl::Status TypeError(std::string_view message);

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_ERROR_KIND_H_
