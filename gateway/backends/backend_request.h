// What every route that calls a backend does with its request before the call: chooses the
// backend and checks the request's size against the backend's gRPC limit.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "gateway/backends/backend_pool.h"
#include "gateway/http/http_error.h"

namespace tokenmill::gateway {

// A Generate request gets its request_id once routed ("chatcmpl-", 32 hex digits, "-63":
// under 64 bytes with its tag and length), and a chat without max_tokens its
// max_tokens_rest_of_context (2 bytes): room is kept for them. Without it a prompt just under
// the limit came back from the server as RESOURCE_EXHAUSTED, a 429 that no retry helps.
inline constexpr size_t kRequestIdBytes = 64;

// tokenmill-server receives gRPC messages up to gRPC's default 4 MiB. A bigger one comes back
// as RESOURCE_EXHAUSTED, which the client would see as a full queue (429: retry), though no
// retry can help: a 413 here.
std::optional<HttpError> TooLargeForBackend(const google::protobuf::MessageLite& message,
                                            size_t bytes_added_later = 0);

// What a Generate request gains once routed: its request_id, and the name of the LoRA adapter
// or other served model it names (GenerateRequest.model).
size_t BytesAddedOnRouting(const std::string& model);

HttpError ModelNotFound(const std::string& model);

// Where a request goes.
struct Route {
  Backend* backend = nullptr;
  // The model that answers by its API name: the LoRA adapter's or other served model's, else
  // the backend's default model's id (BackendPool::ModelNameOf).
  std::string model;
  // The request names one of the backend's LoRA adapters or other models: its call carries
  // `model` (the server's own name for its default model may not be the gateway's).
  bool named = false;
  // The model is the backend's default one (or its adapter): its ModelInfo is the backend's.
  bool default_model = true;
};

// The route of a request, or the error to answer (503 none ready, 404 unknown model). Without
// `adapters` (the calls that run the base model whatever they name: Embed, Rerank) a LoRA
// adapter's name is a 404 that says so.
std::variant<Route, HttpError> PickBackend(BackendPool& pool, const std::string& model,
                                           std::string_view affinity_key, bool adapters);

// Now, for the `created` fields of responses.
int64_t UnixSeconds();

}  // namespace tokenmill::gateway
