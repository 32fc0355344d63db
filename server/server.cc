#include "server/server.h"

#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/grpc_service.h"
#include "spdlog/spdlog.h"

namespace tensord::server {

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  std::unique_ptr<Server> server(new Server());
  ASSIGN_OR_RETURN(server->runtime_,
                   core::Runtime::Create(std::move(options.runtime)));
  server->service_ = std::make_unique<TensorServiceImpl>(server->runtime_.get());

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
  server_->Shutdown(std::chrono::system_clock::now() + grace);
}

void Server::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace tensord::server
