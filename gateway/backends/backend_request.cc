#include "gateway/backends/backend_request.h"

#include <grpc/grpc.h>

#include <chrono>

namespace tokenmill::gateway {

namespace {

constexpr size_t kMaxBackendMessageBytes = GRPC_DEFAULT_MAX_RECV_MESSAGE_LENGTH;

}  // namespace

std::optional<HttpError> TooLargeForBackend(const google::protobuf::MessageLite& message,
                                            size_t bytes_added_later) {
  const size_t bytes = message.ByteSizeLong() + bytes_added_later;
  if (bytes <= kMaxBackendMessageBytes) return std::nullopt;
  return MakeError(413,
                   "the request is " + std::to_string(bytes) +
                       " bytes as a gRPC message; tokenmill-server takes at most " +
                       std::to_string(kMaxBackendMessageBytes) + ": shorten the prompt",
                   "invalid_request_error", "", "request_too_large");
}

HttpError ModelNotFound(const std::string& model) {
  HttpError error = NotFound("The model `" + model +
                                 "` does not exist: GET /v1/models lists the models served",
                             "model_not_found");
  error.param = "model";
  return error;
}

std::variant<Backend*, HttpError> PickBackend(BackendPool& pool, const std::string& model,
                                              std::string_view affinity_key) {
  const BackendChoice choice = pool.Choose(model, affinity_key);
  if (choice.backend != nullptr) return choice.backend;
  if (!choice.any_healthy) return NoBackend();
  return ModelNotFound(model);
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace tokenmill::gateway
