#include "gateway/http/http_error.h"

#include <array>
#include <cstdio>
#include <string_view>

namespace tokenmill::gateway {

nlohmann::json HttpError::ToJson() const {
  nlohmann::json error = {{"message", message}, {"type", type}, {"param", nullptr},
                          {"code", nullptr}};
  if (!param.empty()) error["param"] = param;
  if (!code.empty()) error["code"] = code;
  return {{"error", error}};
}

HttpError MakeError(int status, std::string message, std::string type, std::string param,
                    std::string code, int retry_after_seconds) {
  HttpError error;
  error.status = status;
  error.message = std::move(message);
  error.type = std::move(type);
  error.param = std::move(param);
  error.code = std::move(code);
  error.retry_after_seconds = retry_after_seconds;
  return error;
}

HttpError BadRequest(std::string message, std::string param) {
  return MakeError(400, std::move(message), "invalid_request_error", std::move(param));
}

HttpError NotFound(std::string message, std::string code) {
  return MakeError(404, std::move(message), "invalid_request_error", "", std::move(code));
}

HttpError Unauthorized() {
  return MakeError(401,
                   "Incorrect or missing API key: send 'Authorization: Bearer <key>' (or "
                   "'x-api-key: <key>') with a key of the gateway's --api-key or --api-key-file",
                   "authentication_error", "", "invalid_api_key");
}

HttpError PayloadTooLarge(long long limit_bytes) {
  return MakeError(413,
                   "request body larger than the gateway's --max-body-size (" +
                       std::to_string(limit_bytes) + " bytes)",
                   "invalid_request_error", "", "request_too_large");
}

HttpError NoBackend() {
  return MakeError(503, "no tokenmill-server backend is ready; retry later", "server_error", "",
                   "no_backend", 1);
}

HttpError BodyTimeout(double timeout_seconds) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", timeout_seconds);
  return MakeError(408,
                   std::string("the request body did not arrive within the gateway's "
                               "--body-timeout (") +
                       seconds + " s): send the whole body at once",
                   "invalid_request_error", "", "request_timeout");
}

HttpError BodyBufferFull(long long buffer_bytes) {
  return MakeError(503,
                   "the gateway is receiving as many request bodies as its --body-buffer-size (" +
                       std::to_string(buffer_bytes) + " bytes) holds; retry later",
                   "server_error", "", "body_buffer_full", 1);
}

std::string ParamNamedBy(const std::string& message) {
  static constexpr std::array<std::string_view, 28> kParams = {
      "temperature",        "top_p",            "top_k",             "min_p",
      "repetition_penalty", "presence_penalty", "frequency_penalty", "seed",
      "logit_bias",         "min_tokens",       "max_tokens",        "stop",
      "stop_token_ids",     "ignore_eos",       "logprobs",          "top_logprobs",
      "n",                  "cache_salt",       "prompt",            "messages",
      "tools",              "priority",         "tool_choice",       "continue_final_message",
      "prediction",         "length_penalty",   "query",             "documents"};
  // "sampling.temperature must be ...", "stop[0] is empty", "n = 3 ...", "chat.tools_json".
  std::string_view head = message;
  head = head.substr(0, head.find_first_of(" :[="));
  if (const size_t dot = head.find('.'); dot != std::string_view::npos) {
    const std::string_view first = head.substr(0, dot);
    head = head.substr(dot + 1);
    if (first == "token_ids") return "prompt";
  }
  if (head == "text" || head == "token_ids") return "prompt";
  if (head == "tools_json") return "tools";
  if (head == "template_kwargs_json") return "chat_template_kwargs";
  if (head == "beam_search") return "use_beam_search";
  for (const std::string_view param : kParams) {
    if (head == param) return std::string(param);
  }
  return "";
}

HttpError FromGrpcStatus(const grpc::Status& status) {
  HttpError error;
  error.message = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
      error.status = 400;
      error.param = ParamNamedBy(error.message);
      break;
    case grpc::StatusCode::OUT_OF_RANGE:
      // The server's answer to a prompt (plus max_tokens) past the context; OpenAI's error
      // carries this code and clients branch on it (to trim the conversation).
      error.status = 400;
      error.param = ParamNamedBy(error.message);
      error.code = "context_length_exceeded";
      break;
    case grpc::StatusCode::NOT_FOUND:
      error.status = 404;
      error.code = "not_found";
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      // gRPC's own message-size limit ("Received message larger than max (N vs. 4194304)"),
      // most often an answer (a /tokenize of megabytes) over what the gateway receives: no
      // retry helps, unlike a full queue.
      if (error.message.find("larger than max") != std::string::npos) {
        error = MakeError(413,
                          "a message between the gateway and tokenmill-server is over gRPC's "
                          "size limit (" + error.message +
                              " bytes): send a shorter input",
                          "invalid_request_error", "", "request_too_large");
        break;
      }
      error.status = 429;
      error.type = "rate_limit_error";
      error.code = "queue_full";
      error.retry_after_seconds = 1;
      break;
    case grpc::StatusCode::UNAVAILABLE:
      error.status = 503;
      error.type = "server_error";
      error.code = "backend_unavailable";
      error.retry_after_seconds = 1;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      error.status = 504;
      error.type = "server_error";
      break;
    case grpc::StatusCode::UNIMPLEMENTED:
      error.status = 501;
      error.type = "server_error";
      break;
    default:
      error.status = 500;
      error.type = "server_error";
      break;
  }
  if (error.message.empty()) error.message = "backend error " +
                                             std::to_string(static_cast<int>(status.error_code()));
  return error;
}

}  // namespace tokenmill::gateway
