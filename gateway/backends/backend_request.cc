#include "gateway/backends/backend_request.h"

#include <grpc/grpc.h>

#include <chrono>

namespace tokenmill::gateway {

namespace {

constexpr size_t kMaxBackendMessageBytes = GRPC_DEFAULT_MAX_RECV_MESSAGE_LENGTH;

HttpError ModelError(const std::string& message) {
  HttpError error = NotFound(message, "model_not_found");
  error.param = "model";
  return error;
}

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

size_t BytesAddedOnRouting(const std::string& model) {
  return kRequestIdBytes + (model.empty() ? 0 : model.size() + 5);  // field 20: tag 2, length 1-3
}

HttpError ModelNotFound(const std::string& model) {
  return ModelError("The model `" + model +
                    "` does not exist: GET /v1/models lists the models served");
}

std::variant<Route, HttpError> PickBackend(BackendPool& pool, const std::string& model,
                                           std::string_view affinity_key, bool adapters) {
  const BackendChoice choice = pool.Choose(model, affinity_key, adapters);
  if (choice.backend == nullptr) {
    if (!choice.any_healthy) return NoBackend();
    if (!choice.adapter) return ModelNotFound(model);
    return ModelError("The model `" + model +
                      "` is a LoRA adapter: this route runs base models only (GET /v1/models "
                      "names its parent)");
  }
  Route route{.backend = choice.backend,
              .model = model,
              .named = choice.adapter || choice.served,
              .default_model = !choice.served};
  if (!route.named) {
    const std::optional<v1::ModelInfo> info = choice.backend->model_info();
    if (info) route.model = pool.ModelNameOf(*info);
  }
  return route;
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace tokenmill::gateway
