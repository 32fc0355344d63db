#include "server/server.h"

#include <utility>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/grpc_service.h"
#include "server/metrics.h"
#include "spdlog/spdlog.h"

namespace tensord::server {

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  std::unique_ptr<Server> server(new Server());
  ASSIGN_OR_RETURN(server->runtime_,
                   core::Runtime::Create(std::move(options.runtime)));
  server->metrics_ = std::make_unique<Metrics>();
  server->service_ = std::make_unique<TensorServiceImpl>(
      server->runtime_.get(), server->metrics_.get());

  // Process-wide switches; they apply to servers built after this point.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Tensor payloads stream in chunks, but inline Create may carry up to a
  // few MiB; keep the receive limit generous and explicit.
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  int bound_port = 0;
  if (!options.listen.empty()) {
    builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(),
                             &bound_port);
  }
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr ||
      (!options.listen.empty() && bound_port == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options.listen,
                     "' (address in use, or not a valid host:port)"));
  }
  server->port_ = bound_port;
  server->server_->GetHealthCheckService()->SetServingStatus(
      v1::TensorService::service_full_name(), true);
  if (!options.metrics_listen.empty()) {
    ASSIGN_OR_RETURN(server->metrics_http_,
                     MetricsHttpServer::Start(options.metrics_listen,
                                              server->metrics_.get(),
                                              server->runtime_.get()));
  }
  if (bound_port != 0) {
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
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  return server_->InProcessChannel(args);
}

void Server::Shutdown(std::chrono::milliseconds grace) {
  if (server_ == nullptr) return;
  service_->StartDraining();
  server_->GetHealthCheckService()->SetServingStatus(false);
  server_->Shutdown(std::chrono::system_clock::now() + grace);
}

void Server::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace tensord::server
