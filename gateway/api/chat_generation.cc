#include "gateway/api/chat_generation.h"

#include <spdlog/spdlog.h>

#include "gateway/api/openai/structured_output.h"
#include "gateway/backends/backend_request.h"
#include "gateway/gateway_context.h"

namespace tokenmill::gateway {

namespace asio = boost::asio;

asio::awaitable<std::variant<std::unique_ptr<ChatGeneration>, HttpError>> ChatGeneration::Start(
    HttpExchange& exchange, Params params) {
  GatewayContext& context = exchange.context();
  std::variant<Backend*, HttpError> routed =
      PickBackend(context.pool, params.model, params.affinity_key);
  if (auto* refused = std::get_if<HttpError>(&routed)) co_return std::move(*refused);
  Backend& backend = *std::get<Backend*>(routed);
  const std::optional<v1::ModelInfo> info = backend.model_info();
  std::unique_ptr<ChatGeneration> generation(new ChatGeneration(
      exchange, info ? context.pool.ModelNameOf(*info) : params.model,
      std::move(params.structured_output_param)));
  if (!params.generate.has_max_tokens()) {
    co_await DefaultChatMaxTokens(backend, params.generate);
  }
  params.generate.set_request_id(params.request_id);
  const auto executor = co_await asio::this_coro::executor;
  generation->events_ = std::make_shared<EventQueue>(executor, context.metrics);
  generation->call_ = GenerateCall::Start(backend, std::move(params.generate),
                                          generation->events_, 0, context.calls);
  exchange.WatchForClose(generation->events_);
  co_return std::move(generation);
}

asio::awaitable<std::optional<v1::GenerateResponse>> ChatGeneration::Next() {
  while (open_) {
    UpstreamEvent event = co_await events_->Next();
    switch (event.kind) {
      case UpstreamEvent::Kind::kClientGone:
        ClientGone();
        break;
      case UpstreamEvent::Kind::kDone:
        open_ = false;
        if (!event.status.ok() && !client_gone_) {
          failure_ = FromGrpcStatus(event.status);
          // The server names the constraint's kind; the client knows the field it used.
          if (failure_->status == 400 &&
              failure_->message.starts_with(kStructuredOutputError)) {
            failure_->param = structured_output_param_;
          }
        }
        break;
      case UpstreamEvent::Kind::kResponse:
        if (client_gone_ || failure_) break;
        // Neither API has a finish reason for it: the client retries.
        if (event.response.finish_reason() == v1::FINISH_REASON_ABORT) {
          failure_ = MakeError(503, "the server aborted the request (it is shutting down); retry",
                               "server_error", "", "aborted");
          break;
        }
        co_return std::move(event.response);
    }
  }
  co_await exchange_.StopWatching();
  if (client_gone_) exchange_.CloseAfterResponse();
  co_return std::nullopt;
}

void ChatGeneration::ClientGone() {
  if (!client_gone_) spdlog::debug("client went away; cancelling");
  client_gone_ = true;
  call_->Cancel();
}

}  // namespace tokenmill::gateway
