// The gRPC port's transport security from the flags: plaintext, TLS (--tls-cert, --tls-key)
// or mutual TLS (--tls-client-ca as well).
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "common/status.h"
#include "server/grpc/server_options.h"

namespace tokenmill::server {

// InvalidArgument naming the flag when the flags do not go together or a file is unreadable
// or no PEM.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options);

}  // namespace tokenmill::server
