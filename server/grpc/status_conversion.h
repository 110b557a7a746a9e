// tokenmill Status -> grpc::Status, code for code.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace tokenmill::server {

grpc::Status ToGrpcStatus(const Status& status);

}  // namespace tokenmill::server
