#include "gateway/api/generation.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <variant>

#include "gateway/api/openai/structured_output.h"
#include "gateway/backends/backend_request.h"
#include "gateway/gateway_context.h"

namespace tokenmill::gateway {

namespace asio = boost::asio;

namespace {

// 403 when a request asks to run ahead of the default and its key may not.
std::optional<HttpError> CheckPriority(const std::vector<v1::GenerateRequest>& generates,
                                       const Tenant& tenant) {
  if (tenant.may_prioritize) return std::nullopt;
  for (const v1::GenerateRequest& generate : generates) {
    if (generate.priority() >= 0) continue;
    return MakeError(403,
                     "priority " + std::to_string(generate.priority()) +
                         " would run ahead of the default (0): only keys marked 'priority' in "
                         "the gateway's --api-key-file may use a priority below 0",
                     "permission_error", "priority", "priority_not_allowed");
  }
  return std::nullopt;
}

// The generated tokens a request may use at most, as far as it says (max_tokens per
// sequence; nothing for a chat that runs to the end of its context).
int64_t ReservedTokens(const std::vector<v1::GenerateRequest>& generates) {
  int64_t tokens = 0;
  for (const v1::GenerateRequest& generate : generates) {
    if (!generate.has_max_tokens()) continue;
    const int64_t sequences = generate.has_n() ? std::max<int64_t>(generate.n(), 1) : 1;
    tokens += static_cast<int64_t>(generate.max_tokens()) * sequences;
  }
  return tokens;
}

}  // namespace

asio::awaitable<std::unique_ptr<Generation>> Generation::Start(HttpExchange& exchange,
                                                               const HttpRequest& request,
                                                               Params params) {
  GatewayContext& context = exchange.context();
  const Tenant& tenant = exchange.tenant();
  if (std::optional<HttpError> refused = CheckPriority(params.generates, tenant)) {
    co_await exchange.WriteError(request, *refused);
    co_return nullptr;
  }
  std::variant<TenantLimiter::Admission, HttpError> admitted = context.limiter.Admit(
      tenant, ReservedTokens(params.generates), TenantLimiter::Clock::now());
  if (auto* refused = std::get_if<HttpError>(&admitted)) {
    co_await exchange.WriteError(request, *refused);
    co_return nullptr;
  }
  std::variant<Route, HttpError> routed =
      PickBackend(context.pool, params.model, params.affinity_key, /*adapters=*/true);
  if (auto* refused = std::get_if<HttpError>(&routed)) {
    co_await exchange.WriteError(request, *refused);
    co_return nullptr;
  }
  Route& route = std::get<Route>(routed);
  Backend& backend = *route.backend;
  std::unique_ptr<Generation> generation(new Generation(
      exchange, backend, route.model, std::move(params.structured_output_param)));
  generation->admission_ = std::move(std::get<TenantLimiter::Admission>(admitted));
  if (route.named) generation->called_model_ = route.model;
  for (v1::GenerateRequest& generate : params.generates) {
    // A chat without max_tokens may use the rest of its context, as OpenAI's do: the server
    // counts the templated prompt's tokens.
    if (generate.has_chat() && !generate.has_max_tokens()) {
      generate.set_max_tokens_rest_of_context(true);
    }
    // The server's own name for its default model may not be the gateway's (its
    // --served-model-name): only an adapter or another model is named.
    if (route.named) generate.set_model(route.model);
  }
  const auto executor = co_await asio::this_coro::executor;
  generation->events_ = std::make_shared<EventQueue>(executor, context.metrics);
  const size_t count = params.generates.size();
  generation->prompt_tokens_.assign(count, 0);
  const std::string_view backend_tenant = context.TenantForBackend(tenant);
  for (size_t i = 0; i < count; ++i) {
    params.generates[i].set_request_id(
        count == 1 ? params.request_id : params.request_id + "-" + std::to_string(i));
    generation->calls_.push_back(GenerateCall::Start(backend, backend_tenant,
                                                     std::move(params.generates[i]),
                                                     generation->events_, i, context.calls));
  }
  generation->open_calls_ = count;
  exchange.WatchForClose(generation->events_);
  co_return std::move(generation);
}

asio::awaitable<std::optional<Generation::Output>> Generation::Next() {
  while (open_calls_ > 0) {
    UpstreamEvent event = co_await events_->Next();
    switch (event.kind) {
      case UpstreamEvent::Kind::kClientGone:
        ClientGone();
        break;
      case UpstreamEvent::Kind::kDone:
        --open_calls_;
        if (!event.status.ok() && !client_gone_) {
          HttpError error =
              exchange_.context().drain_expired.load(std::memory_order_relaxed)
                  ? MakeError(503,
                              "the gateway shut down before the request finished "
                              "(--drain-timeout); retry",
                              "server_error", "", "aborted")
                  : FromGrpcStatus(event.status);
          // The server names the constraint's kind; the client knows the field it used.
          if (error.status == 400 && error.message.starts_with(kStructuredOutputError)) {
            error.param = structured_output_param_;
          }
          Fail(std::move(error));
        }
        break;
      case UpstreamEvent::Kind::kResponse:
        Count(event.call_index, event.response);
        if (client_gone_ || failure_) break;
        // No API has a finish reason that tells the client to retry: an error that does.
        if (event.response.finish_reason() == v1::FINISH_REASON_ABORT) {
          Fail(MakeError(503, "the server aborted the request (it is shutting down); retry",
                         "server_error", "", "aborted"));
          break;
        }
        co_return Output{event.call_index, std::move(event.response)};
    }
  }
  co_await exchange_.StopWatching();
  if (client_gone_) exchange_.CloseAfterResponse();
  co_return std::nullopt;
}

void Generation::Count(size_t call_index, const v1::GenerateResponse& response) {
  if (call_index < prompt_tokens_.size()) {
    prompt_tokens_[call_index] =
        std::max<int64_t>(prompt_tokens_[call_index], response.usage().prompt_tokens());
  }
  generated_tokens_ += response.token_ids_size();
  int64_t used = generated_tokens_;
  for (const int64_t prompt : prompt_tokens_) used += prompt;
  admission_.Used(used);
}

void Generation::Fail(HttpError error) {
  if (failure_) return;  // the first failure is the one the client sees
  failure_ = std::move(error);
  CancelAll();
}

void Generation::ClientGone() {
  if (!client_gone_) spdlog::debug("client went away; cancelling");
  client_gone_ = true;
  CancelAll();
}

void Generation::CancelAll() {
  for (const std::shared_ptr<GenerateCall>& call : calls_) call->Cancel();
}

}  // namespace tokenmill::gateway
