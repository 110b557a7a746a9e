#include "gateway/backends/backend_channel.h"

#include <grpcpp/support/client_interceptor.h>

#include <fstream>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

namespace tokenmill::gateway {
namespace {

StatusOr<std::string> ReadFile(const std::string& path, const std::string& flag) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) return InvalidArgumentError(flag + " " + path + ": cannot read the file");
  return text.str();
}

// Adds the API key to every call's metadata (call credentials would need TLS; a key also
// guards a plaintext port on a private network).
class BearerInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string& authorization) : authorization_(authorization) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", authorization_);
    }
    methods->Proceed();
  }

 private:
  const std::string& authorization_;
};

class BearerInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& key) : authorization_("Bearer " + key) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerInterceptor(authorization_);
  }

 private:
  const std::string authorization_;
};

}  // namespace

StatusOr<BackendSecurity> MakeBackendSecurity(const GatewayOptions& o) {
  BackendSecurity security;
  security.api_key = o.backend_api_key;
  const bool client_cert = !o.backend_tls_cert.empty() || !o.backend_tls_key.empty();
  if (o.backend_tls_ca.empty()) {
    if (client_cert || !o.backend_tls_server_name.empty()) {
      return InvalidArgumentError("--backend-tls-cert, --backend-tls-key and "
                                  "--backend-tls-server-name need --backend-tls-ca (the CA that "
                                  "signed the servers' certificates)");
    }
    return security;
  }
  if (client_cert && (o.backend_tls_cert.empty() || o.backend_tls_key.empty())) {
    return InvalidArgumentError("a client certificate needs both --backend-tls-cert and "
                                "--backend-tls-key");
  }
  grpc::SslCredentialsOptions ssl;
  for (const auto& [path, flag, field] :
       {std::tuple{o.backend_tls_ca, "--backend-tls-ca", &ssl.pem_root_certs},
        std::tuple{o.backend_tls_cert, "--backend-tls-cert", &ssl.pem_cert_chain},
        std::tuple{o.backend_tls_key, "--backend-tls-key", &ssl.pem_private_key}}) {
    if (path.empty()) continue;
    StatusOr<std::string> text = ReadFile(path, flag);
    if (!text.ok()) return text.status();
    *field = std::move(*text);
  }
  security.credentials = grpc::SslCredentials(ssl);
  security.server_name = o.backend_tls_server_name;
  return security;
}

std::shared_ptr<grpc::Channel> MakeBackendChannel(const std::string& address,
                                                  const BackendSecurity& security) {
  grpc::ChannelArguments arguments;
  if (!security.server_name.empty()) arguments.SetSslTargetNameOverride(security.server_name);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!security.api_key.empty()) {
    interceptors.push_back(std::make_unique<BearerInterceptorFactory>(security.api_key));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, security.credentials, arguments, std::move(interceptors));
}

}  // namespace tokenmill::gateway
