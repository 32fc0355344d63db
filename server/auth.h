// Bearer-token authentication for TensorService.
//
// Tokens come from a file (one per line; blank lines and '#' comments
// ignored) so they never appear on a command line or in a process listing.
// A client sends `authorization: Bearer <token>` metadata on every RPC.
// Tokens are compared in constant time (SHA-256 digests compared with
// CRYPTO_memcmp, every configured token checked), and never logged.
// Health and reflection stay unauthenticated so load balancers and
// Kubernetes probes, which cannot send tokens, keep working; they reveal no
// tensor data.
// Thread-safety: immutable after construction; Check() is thread-safe.
#ifndef TENSORD_SERVER_AUTH_H_
#define TENSORD_SERVER_AUTH_H_

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/support/string_ref.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tensord::server {

class TokenAuthenticator {
 public:
  // INVALID_ARGUMENT if the file cannot be read or holds no token.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(
      const std::string& path);
  explicit TokenAuthenticator(const std::vector<std::string>& tokens);

  // OK when `metadata` carries a configured bearer token; UNAUTHENTICATED
  // saying what is wrong (missing, malformed, or not accepted) otherwise.
  absl::Status Check(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;

 private:
  using Digest = std::array<unsigned char, 32>;
  static Digest Sha256(const char* data, size_t size);
  std::vector<Digest> digests_;
};

}  // namespace tensord::server

#endif  // TENSORD_SERVER_AUTH_H_
