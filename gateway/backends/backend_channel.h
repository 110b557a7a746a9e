// How the gateway reaches its tokenmill-servers: plaintext or TLS (--backend-tls-ca; a client
// certificate for servers with mutual TLS), and the servers' API key on every call
// (--backend-api-key, sent as "authorization: Bearer <key>").
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "gateway/gateway_options.h"

namespace tokenmill::gateway {

struct BackendSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  std::string server_name;  // the name the servers' certificates carry; empty: their host
  std::string api_key;      // empty: none
};

// InvalidArgument naming the flag when the flags do not go together or a file is unreadable.
StatusOr<BackendSecurity> MakeBackendSecurity(const GatewayOptions& options);

std::shared_ptr<grpc::Channel> MakeBackendChannel(const std::string& address,
                                                  const BackendSecurity& security);

}  // namespace tokenmill::gateway
