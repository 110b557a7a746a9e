// Errors as OpenAI returns them: an HTTP status and {"error": {message, type, param, code}}.
#pragma once

#include <grpcpp/support/status.h>
#include <nlohmann/json.hpp>

#include <string>

namespace tokenmill::gateway {

struct HttpError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  int retry_after_seconds = 0;  // > 0: sent as Retry-After

  nlohmann::json ToJson() const;
};

HttpError MakeError(int status, std::string message, std::string type = "invalid_request_error",
                    std::string param = "", std::string code = "", int retry_after_seconds = 0);
HttpError BadRequest(std::string message, std::string param = "");
HttpError NotFound(std::string message, std::string code = "not_found");
HttpError Unauthorized();
HttpError PayloadTooLarge(long long limit_bytes);
HttpError NoBackend();
// A body that did not arrive within --body-timeout (408; the connection closes).
HttpError BodyTimeout(double timeout_seconds);
// A body that the memory for bodies being read (--body-buffer-size) has no room for (503).
HttpError BodyBufferFull(long long buffer_bytes);

// A backend's failure as the client should see it: INVALID_ARGUMENT -> 400 (param guessed
// from the message), OUT_OF_RANGE (past the context) -> 400 with code
// context_length_exceeded, RESOURCE_EXHAUSTED -> 429 with Retry-After (413 when it is gRPC's
// message size limit), UNAVAILABLE -> 503, ...
HttpError FromGrpcStatus(const grpc::Status& status);

// The request parameter a server message names, when it names one ("temperature: must be
// ...", "top_p ...", "n: ..."): the text before the first ':' or ' ' when it is one of the
// parameters the gateway forwards. Empty otherwise.
std::string ParamNamedBy(const std::string& message);

}  // namespace tokenmill::gateway
