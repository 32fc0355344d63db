// tensord::server::Server: the gRPC TensorService bound to a Runtime.
//
// Used by the `tensord` daemon, by tests (in-process channel or loopback)
// and by benchmarks. Start() builds the Runtime, registers TensorService,
// the standard gRPC health service (grpc.health.v1; NOT_SERVING once
// draining) and server reflection, binds the listen address and, if asked,
// the metrics endpoint; the server serves until Shutdown().
// Thread-safety: Shutdown() and Wait() may be called from any thread.
#ifndef TENSORD_SERVER_SERVER_H_
#define TENSORD_SERVER_SERVER_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/runtime/runtime.h"

namespace grpc {
class Channel;
class Server;
}  // namespace grpc

namespace tensord::server {

struct ServerOptions {
  // "host:port" (port 0 picks a free one), "unix:/path/to/socket" (a
  // unix-domain socket: same-host clients, less overhead than TCP), or ""
  // for no listening socket (in-process channel only).
  std::string listen = "127.0.0.1:50051";
  core::RuntimeOptions runtime;
  // "host:port" for Prometheus metrics over HTTP (GET /metrics); "" = off.
  std::string metrics_listen;

  // Security. A file of bearer tokens (one per line): every TensorService
  // RPC must carry one (server/auth.h). "" = no token check.
  std::string auth_token_file;
  // TLS: PEM certificate chain and private key. Both or neither.
  std::string tls_cert_file;
  std::string tls_key_file;
  // With TLS: PEM CA bundle; clients must present a certificate it signed
  // (mutual TLS).
  std::string tls_client_ca_file;
  // Secure by default: listening beyond loopback with neither a token nor
  // TLS is refused unless this is set.
  bool insecure = false;

  // Limits. The largest gRPC message either way (Fetch and Upload stream
  // in chunks, so this bounds only one message), and the largest inline
  // `data` Create accepts (larger: INVALID_ARGUMENT, use Upload; 0 = only
  // the message limit). Session TTL, quotas, max sessions and max tensor
  // bytes are in `runtime`.
  int max_message_bytes = 64 << 20;
  uint64_t max_inline_bytes = 4 << 20;

  // Moves between nodes (server/node_transfers.h): on when a node token
  // file is given (the runtime then needs a node_name). "NAME TOKEN" lines;
  // the peers this node may pull from, by name (NAME=ADDRESS,...) and/or
  // by an address pattern with {node}.
  std::string node_token_file;
  std::string peers;
  std::string peer_address_pattern;
};

class TensorServiceImpl;
class TokenAuthenticator;
class NodeTransfers;
class NodeServiceImpl;
class Metrics;
class MetricsHttpServer;

class Server {
 public:
  // Starts serving. INVALID_ARGUMENT for bad options (unreadable TLS or
  // token files, a key without a cert), FAILED_PRECONDITION for a
  // non-loopback address without a token or TLS and without `insecure`,
  // UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();  // Shutdown() with no grace, then frees everything.

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound TCP port (0 when not listening).
  int port() const { return port_; }
  // The bound metrics port (0 when metrics are off).
  int metrics_port() const;
  // "127.0.0.1:<port>" style address (or the "unix:" URI) a client on this
  // host can dial.
  const std::string& address() const { return address_; }
  // This server's instance id (16 hex digits), sent on every reply.
  const std::string& instance_id() const;
  // A channel to this server that bypasses the network stack.
  std::shared_ptr<grpc::Channel> InProcessChannel();
  core::Runtime& runtime() { return *runtime_; }

  // Graceful shutdown: marks health NOT_SERVING and refuses new RPCs with
  // UNAVAILABLE "server is shutting down" at once, lets in-flight RPCs
  // (streams included) finish within `grace`, then cancels the rest and
  // stops. Idempotent. The tensors are freed when the Server is destroyed.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(0));
  // Blocks until the server has shut down.
  void Wait();

 private:
  Server() = default;
  std::unique_ptr<core::Runtime> runtime_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<TokenAuthenticator> auth_;
  std::unique_ptr<NodeTransfers> transfers_;  // null: moves between nodes off
  std::unique_ptr<NodeServiceImpl> node_service_;
  std::unique_ptr<TensorServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  int port_ = 0;
  int max_message_bytes_ = 64 << 20;
  std::string address_;
};

}  // namespace tensord::server

#endif  // TENSORD_SERVER_SERVER_H_
