#include "server/server.h"

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "server/auth.h"
#include "server/grpc_service.h"
#include "server/metrics.h"
#include "spdlog/spdlog.h"

namespace tensord::server {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the ", what, " file '", path, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " file '", path, "' holds no PEM block"));
  }
  return text.str();
}

// True for addresses only this host can reach: 127.0.0.0/8, ::1,
// localhost, unix sockets.
bool IsLoopback(const std::string& listen) {
  if (listen.rfind("unix:", 0) == 0) return true;
  const std::string host = listen.substr(0, listen.rfind(':'));
  return host.rfind("127.", 0) == 0 || host == "localhost" ||
         host == "[::1]" || host == "::1";
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeCredentials(
    const ServerOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both a certificate (--tls-cert) and its key (--tls-key)");
  }
  if (options.tls_cert_file.empty()) {
    if (!options.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls-client-ca needs TLS: give --tls-cert and --tls-key too");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(options.tls_cert_file, "TLS certificate"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPem(options.tls_key_file, "TLS key"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!options.tls_client_ca_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs,
                     ReadPem(options.tls_client_ca_file, "TLS client CA"));
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// protobuf logs an error line for each request it parses with invalid
// UTF-8 in a string field: client input, answered with INVALID_ARGUMENT
// naming the field, so it must not let a client flood the log at error
// level. Its lines go to spdlog at debug; FATAL stays what it is.
void ProtobufLogToDebug(google::protobuf::LogLevel level, const char* file,
                        int line, const std::string& message) {
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    spdlog::critical("protobuf {}:{}: {}", file, line, message);
    return;
  }
  spdlog::debug("protobuf {}:{}: {}", file, line, message);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  google::protobuf::SetLogHandler(&ProtobufLogToDebug);
  const bool tls = !options.tls_cert_file.empty();
  if (!options.listen.empty() && !IsLoopback(options.listen) &&
      options.auth_token_file.empty() && !tls && !options.insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve ", options.listen,
        " to the network without authentication: give --auth-token-file "
        "and/or --tls-cert/--tls-key, or --insecure to accept anyone who can "
        "reach the port"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   MakeCredentials(options));
  std::unique_ptr<Server> server(new Server());
  if (!options.auth_token_file.empty()) {
    ASSIGN_OR_RETURN(server->auth_,
                     TokenAuthenticator::FromFile(options.auth_token_file));
  }
  if (!options.runtime.on_session_expired) {
    options.runtime.on_session_expired = [](const core::ExpiredSessionInfo& s) {
      spdlog::info(
          "session {} ({}) expired: its lease ran out; freed {} tensors, {} "
          "bytes",
          s.id_prefix, s.client_name.empty() ? "unnamed" : s.client_name,
          s.released_tensors, s.released_bytes);
    };
  }
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError("max_message_bytes must be > 0");
  }
  ASSIGN_OR_RETURN(server->runtime_,
                   core::Runtime::Create(std::move(options.runtime)));
  server->metrics_ = std::make_unique<Metrics>();
  server->service_ = std::make_unique<TensorServiceImpl>(
      server->runtime_.get(), server->metrics_.get(), server->auth_.get());
  if (!options.node_token_file.empty()) {
    NodeTransferOptions transfers;
    transfers.node_token_file = options.node_token_file;
    transfers.peers = options.peers;
    transfers.peer_address_pattern = options.peer_address_pattern;
    ASSIGN_OR_RETURN(server->transfers_,
                     NodeTransfers::Create(server->runtime_.get(), transfers));
    server->node_service_ = std::make_unique<NodeServiceImpl>(
        server->transfers_.get(), server->service_->refusal_log());
    server->service_->set_node_transfers(server->transfers_.get());
  }
  server->service_->set_max_inline_bytes(options.max_inline_bytes);
  server->service_->set_max_message_bytes(
      static_cast<uint64_t>(options.max_message_bytes));
  server->max_message_bytes_ = options.max_message_bytes;

  // Process-wide switches; they apply to servers built after this point.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Tensor payloads stream in chunks, but inline Create may carry up to a
  // few MiB; keep the receive limit generous and explicit.
  // gRPC's reflection service is synchronous; with the default sync-server
  // pollers competing with the callback threads, every TensorService call
  // cost ~3x a bare unary round trip (bench/latency_bench: get_tensor_unary
  // 115 us vs 41 us). One poller for the rarely used sync services brings
  // it back to ~1.0x.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 1);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  int bound_port = 0;
  if (!options.listen.empty()) {
    builder.AddListeningPort(options.listen, credentials, &bound_port);
  }
  builder.RegisterService(server->service_.get());
  if (server->node_service_ != nullptr) {
    builder.RegisterService(server->node_service_.get());
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr ||
      (!options.listen.empty() && bound_port == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options.listen,
                     "' (address in use, or not a valid host:port or unix:PATH)"));
  }
  const bool unix_socket = options.listen.rfind("unix:", 0) == 0;
  server->port_ = unix_socket ? 0 : bound_port;
  server->server_->GetHealthCheckService()->SetServingStatus(
      v1::TensorService::service_full_name(), true);
  if (!options.metrics_listen.empty()) {
    ASSIGN_OR_RETURN(server->metrics_http_,
                     MetricsHttpServer::Start(options.metrics_listen,
                                              server->metrics_.get(),
                                              server->runtime_.get()));
  }
  if (unix_socket) {
    server->address_ = options.listen;  // clients dial the same unix: URI
  } else if (bound_port != 0) {
    // Dial the address we bound; for wildcard binds, loopback reaches it.
    std::string host = options.listen.substr(0, options.listen.rfind(':'));
    if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
    server->address_ = absl::StrCat(host, ":", bound_port);
  }
  return server;
}

Server::~Server() {
  Shutdown();
  Wait();
  metrics_http_.reset();  // it reads the runtime and metrics
}

int Server::metrics_port() const {
  return metrics_http_ == nullptr ? 0 : metrics_http_->port();
}

std::shared_ptr<grpc::Channel> Server::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes_);
  args.SetMaxSendMessageSize(max_message_bytes_);
  return server_->InProcessChannel(args);
}

const std::string& Server::instance_id() const {
  return service_->instance_id();
}

void Server::Shutdown(std::chrono::milliseconds grace) {
  if (server_ == nullptr) return;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  service_->StartDraining();
  server_->GetHealthCheckService()->SetServingStatus(false);
  // Keep the transport open while draining, so that new calls reach the
  // service and get its UNAVAILABLE "server is shutting down" rather than a
  // connection error, and in-flight streams keep flowing. Polling is fine
  // here: it happens once, for at most the grace period.
  while (service_->in_flight() > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(50));
}

void Server::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace tensord::server
