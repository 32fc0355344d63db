// tensord::Error: how every failed call of the client library is reported:
// a gRPC status code and the server's message, unchanged.
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

// "INVALID_ARGUMENT", "NOT_FOUND", ...; "UNKNOWN_CODE(<n>)" for codes gRPC
// does not define.
std::string_view StatusCodeName(StatusCode code);

// A failed call. what() is "<CODE_NAME>: <message>", e.g.
// "FAILED_PRECONDITION: Expected all tensors to be on the same device, ...".
class Error : public std::runtime_error {
 public:
  // `unanswered`: no tensord server answered the call (see unanswered()).
  Error(StatusCode code, std::string message, bool unanswered = false);

  StatusCode code() const { return code_; }
  // The server's (or the client's) message without the code prefix.
  const std::string& message() const { return message_; }
  // True when the call failed without an answer from a tensord server: the
  // client's connection was refused, broke or timed out (gRPC's own
  // UNAVAILABLE or DEADLINE_EXCEEDED), so no server's message names what
  // failed. False for every answer a server gave and for the client's own
  // checks.
  bool unanswered() const { return unanswered_; }

 private:
  StatusCode code_;
  std::string message_;
  bool unanswered_;
};

}  // namespace tensord::client

#endif  // TENSORD_CLIENT_TENSORD_ERRORS_H_
