// One chat Generate call for the agent APIs (Anthropic Messages, OpenAI Responses): routed to
// a backend, its responses awaited one by one on the connection's strand, cancelled when the
// client goes away. The APIs differ in their JSON only; this is the call they share.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>

#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "gateway/backends/upstream_call.h"
#include "gateway/http/http_exchange.h"
#include "gateway/http/http_error.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

class ChatGeneration {
 public:
  struct Params {
    v1::GenerateRequest generate;  // a chat; request_id is set here
    std::string model;             // empty: any backend
    std::string affinity_key;
    std::string request_id;
    // The body field that set a structured-output constraint: named in the server's refusal.
    std::string structured_output_param;
  };

  // Routes the request (503 no backend, 404 unknown model), gives a chat without max_tokens
  // the rest of the context and starts the call, watching the client's socket.
  static boost::asio::awaitable<std::variant<std::unique_ptr<ChatGeneration>, HttpError>> Start(
      HttpExchange& exchange, Params params);

  // The backend's name for the model that answers.
  const std::string& model() const { return model_; }

  // The next response; none once the call has ended (failure() and client_gone() say how).
  // A sequence the server aborted (it was shutting down) is a failure: 503, retry.
  boost::asio::awaitable<std::optional<v1::GenerateResponse>> Next();

  // A write to the client failed: the call is cancelled (Next() still runs to its end).
  void ClientGone();
  bool client_gone() const { return client_gone_; }
  // The backend's error, as the client should see it.
  const std::optional<HttpError>& failure() const { return failure_; }

 private:
  ChatGeneration(HttpExchange& exchange, std::string model, std::string structured_output_param)
      : exchange_(exchange),
        model_(std::move(model)),
        structured_output_param_(std::move(structured_output_param)) {}

  HttpExchange& exchange_;
  std::string model_;
  std::string structured_output_param_;
  std::shared_ptr<EventQueue> events_;
  std::shared_ptr<GenerateCall> call_;
  bool open_ = true;
  bool client_gone_ = false;
  std::optional<HttpError> failure_;
};

}  // namespace tokenmill::gateway
