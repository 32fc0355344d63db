// tensord::Error: how every failed call of the client library is reported:
// a gRPC status code, the server's message, unchanged, and the class of
// exception PyTorch raises for the same error (kind()).
// Part of the client library (tensord/client.h includes every part).
// Thread-safety: value types.
#ifndef TENSORD_CLIENT_TENSORD_ERRORS_H_
#define TENSORD_CLIENT_TENSORD_ERRORS_H_

#include <grpcpp/support/status_code_enum.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace tensord::client {

// ---------------------------------------------------------------------------
// Errors

using StatusCode = grpc::StatusCode;

// The Python exception class torch raises for an error (the server sends it
// beside the code; proto ErrorKind): IndexError for a dimension or index out
// of range, ValueError and TypeError for some argument checks, RuntimeError
// for every other error, and for every error not about an op's arguments.
enum class ErrorKind {
  kRuntimeError = 0,
  kIndexError = 1,
  kValueError = 2,
  kTypeError = 3,
};

// "RuntimeError", "IndexError", "ValueError", "TypeError".
std::string_view ErrorKindName(ErrorKind kind);

// "INVALID_ARGUMENT", "NOT_FOUND", ...; "UNKNOWN_CODE(<n>)" for codes gRPC
// does not define.
std::string_view StatusCodeName(StatusCode code);

// A failed call. what() is "<CODE_NAME>: <message>", e.g.
// "FAILED_PRECONDITION: Expected all tensors to be on the same device, ...".
class Error : public std::runtime_error {
 public:
  // `unanswered`: no tensord server answered the call (see unanswered()).
  Error(StatusCode code, std::string message, bool unanswered = false);
  // An error the server (or the local planner) classed as `kind`.
  Error(StatusCode code, std::string message, ErrorKind kind);

  StatusCode code() const { return code_; }
  // The server's (or the client's) message without the code prefix.
  const std::string& message() const { return message_; }
  // True when the call failed without an answer from a tensord server: the
  // client's connection was refused, broke or timed out (gRPC's own
  // UNAVAILABLE or DEADLINE_EXCEEDED), so no server's message names what
  // failed. False for every answer a server gave and for the client's own
  // checks.
  bool unanswered() const { return unanswered_; }
  // The class torch raises for this error (kRuntimeError unless the server
  // said otherwise).
  ErrorKind kind() const { return kind_; }

 private:
  StatusCode code_;
  std::string message_;
  bool unanswered_;
  ErrorKind kind_ = ErrorKind::kRuntimeError;
};

}  // namespace tensord::client

#endif  // TENSORD_CLIENT_TENSORD_ERRORS_H_
