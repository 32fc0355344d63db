#include "server/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/refusal.h"

namespace tensord::server {

absl::StatusOr<std::unique_ptr<TokenAuthenticator>>
TokenAuthenticator::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the auth token file '", path, "'"));
  }
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    const std::string token(absl::StripAsciiWhitespace(line));
    if (token.empty() || token[0] == '#') continue;
    tokens.push_back(token);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the auth token file '", path, "' holds no token (one per line)"));
  }
  return std::make_unique<TokenAuthenticator>(tokens);
}

TokenAuthenticator::TokenAuthenticator(const std::vector<std::string>& tokens) {
  for (const std::string& t : tokens) {
    digests_.push_back(Sha256(t.data(), t.size()));
  }
}

TokenAuthenticator::Digest TokenAuthenticator::Sha256(const char* data,
                                                      size_t size) {
  Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(data), size, digest.data());
  return digest;
}

absl::Status TokenAuthenticator::Check(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return core::MarkRefusal(
        absl::UnauthenticatedError(
            "missing credentials: this server requires 'authorization: "
            "Bearer <token>' metadata"),
        core::Refusal::kNoToken);
  }
  const std::string_view value(it->second.data(), it->second.size());
  constexpr std::string_view kScheme = "Bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(std::string(value.substr(0, kScheme.size())),
                              std::string(kScheme))) {
    return core::MarkRefusal(
        absl::UnauthenticatedError(
            "malformed authorization metadata: expected 'Bearer <token>'"),
        core::Refusal::kBadToken);
  }
  const std::string_view token = value.substr(kScheme.size());
  // Hashing first makes every comparison the same length; checking every
  // digest without an early exit keeps the time independent of which (if
  // any) token matched.
  const Digest presented = Sha256(token.data(), token.size());
  int matches = 0;
  for (const Digest& d : digests_) {
    matches |= CRYPTO_memcmp(d.data(), presented.data(), d.size()) == 0;
  }
  if (matches == 0) {
    return core::MarkRefusal(
        absl::UnauthenticatedError("the bearer token is not accepted"),
        core::Refusal::kBadToken);
  }
  return absl::OkStatus();
}

}  // namespace tensord::server
