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
  Error(StatusCode code, std::string message);

  StatusCode code() const { return code_; }
  // The server's (or the client's) message without the code prefix.
  const std::string& message() const { return message_; }

 private:
  StatusCode code_;
  std::string message_;
};

}  // namespace tensord::client

#endif  // TENSORD_CLIENT_TENSORD_ERRORS_H_
