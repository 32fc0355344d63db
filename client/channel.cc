#include "tensord/channel.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include "tensord/client.h"

namespace tensord::client {
namespace {

std::string ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                std::string("cannot read the ") + what + " file '" + path + "'");
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Adds the bearer token to every call's initial metadata.
class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;  // owned by the factory
};

class TokenInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string token)
      : header_("Bearer " + std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

}  // namespace

ConnectOptions ConnectOptions::FromEnv() {
  ConnectOptions o;
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  o.address = env("TENSORD_ADDRESS");
  o.token_file = env("TENSORD_TOKEN_FILE");
  o.tls_ca_file = env("TENSORD_TLS_CA");
  o.tls_cert_file = env("TENSORD_CLIENT_CERT");
  o.tls_key_file = env("TENSORD_CLIENT_KEY");
  return o;
}

std::shared_ptr<grpc::Channel> MakeChannel(const ConnectOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  if (options.tls || !options.tls_ca_file.empty() ||
      !options.tls_cert_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      ssl.pem_root_certs = ReadFile(options.tls_ca_file, "TLS CA");
    }
    if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
      throw Error(StatusCode::INVALID_ARGUMENT,
                  "a client certificate needs its key, and a key its certificate");
    }
    if (!options.tls_cert_file.empty()) {
      ssl.pem_cert_chain = ReadFile(options.tls_cert_file, "TLS certificate");
      ssl.pem_private_key = ReadFile(options.tls_key_file, "TLS key");
    }
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  std::string token = options.token;
  if (token.empty() && !options.token_file.empty()) {
    std::istringstream lines(ReadFile(options.token_file, "token"));
    std::getline(lines, token);
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) {
      token.pop_back();
    }
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!token.empty()) {
    interceptors.push_back(std::make_unique<TokenInterceptorFactory>(token));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      ResolveAddress(options.address), credentials, args,
      std::move(interceptors));
}

}  // namespace tensord::client
