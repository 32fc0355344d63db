// Connecting to tensord: address, bearer token and TLS in one place.
//
//   tensord::ConnectOptions opts = tensord::ConnectOptions::FromEnv();
//   opts.token_file = "/run/secrets/tensord_token";
//   tensord::Client client(tensord::MakeChannel(opts));
//
// The token travels as `authorization: Bearer <token>` metadata on every
// call (added by a client interceptor, so every RPC of the library and of
// tools built on the channel carries it). Thread-safety: MakeChannel is
// thread-safe; the returned channel may be shared.
#ifndef TENSORD_CLIENT_TENSORD_CHANNEL_H_
#define TENSORD_CLIENT_TENSORD_CHANNEL_H_

#include <memory>
#include <string>

#include <grpcpp/channel.h>

namespace tensord::client {

struct ConnectOptions {
  std::string address;     // "" = $TENSORD_ADDRESS or 127.0.0.1:50051
  std::string token;       // bearer token ("" = none)
  std::string token_file;  // or read it from this file (first line)
  // TLS: set `tls_ca_file` (PEM roots that signed the server's certificate)
  // or `tls` = true to use the system roots. For mutual TLS add the client
  // certificate chain and key.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Expected server name in its certificate, when it differs from the
  // address's host (e.g. connecting by IP to a cert issued for a name).
  std::string tls_server_name;

  // Options from TENSORD_ADDRESS, TENSORD_TOKEN_FILE, TENSORD_TLS_CA,
  // TENSORD_CLIENT_CERT, TENSORD_CLIENT_KEY (unset variables leave defaults;
  // the client names differ from the daemon's TENSORD_TLS_CERT/KEY so both
  // can live in one environment).
  static ConnectOptions FromEnv();
};

// A channel with the options' credentials. Throws tensord::Error
// (INVALID_ARGUMENT) when a file cannot be read.
std::shared_ptr<grpc::Channel> MakeChannel(const ConnectOptions& options);

}  // namespace tensord::client

namespace tensord {
using client::ConnectOptions;
using client::MakeChannel;
}  // namespace tensord

#endif  // TENSORD_CLIENT_TENSORD_CHANNEL_H_
