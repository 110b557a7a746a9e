#include "gateway/routes.h"

#include "gateway/api/anthropic/anthropic_handler.h"
#include "gateway/api/anthropic/anthropic_messages.h"
#include "gateway/api/openai/completion_handler.h"
#include "gateway/api/openai/embeddings.h"
#include "gateway/api/openai/rerank.h"
#include "gateway/api/responses/responses_handler.h"
#include "gateway/gateway_context.h"
#include "common/url_query.h"

namespace tokenmill::gateway {

namespace asio = boost::asio;
using boost::beast::http::verb;
using nlohmann::json;

namespace {

asio::awaitable<void> Health(HttpExchange& exchange, const HttpRequest& request,
                             const std::string&) {
  // (GCC 12 miscompiles braced JSON literals inside a co_await expression.)
  const bool ready = exchange.context().pool.AnyHealthy();
  const json status = {{"status", ready ? "ok" : "no backend is ready"}};
  co_await exchange.WriteJson(request, ready ? 200 : 503, status, ready ? 0 : 1);
}

asio::awaitable<void> Metrics(HttpExchange& exchange, const HttpRequest& request,
                              const std::string&) {
  GatewayContext& context = exchange.context();
  co_await exchange.WriteText(request, 200, context.metrics.Render(context.pool),
                              "text/plain; version=0.0.4; charset=utf-8");
}

asio::awaitable<void> Completions(HttpExchange& exchange, const HttpRequest& request,
                                  const std::string&) {
  co_await HandleCompletion(exchange, request, Endpoint::kCompletions);
}

asio::awaitable<void> ChatCompletions(HttpExchange& exchange, const HttpRequest& request,
                                      const std::string&) {
  co_await HandleCompletion(exchange, request, Endpoint::kChatCompletions);
}

asio::awaitable<void> Models(HttpExchange& exchange, const HttpRequest& request,
                             const std::string&) {
  co_await HandleModels(exchange, request, "");
}

asio::awaitable<void> Model(HttpExchange& exchange, const HttpRequest& request,
                            const std::string& model) {
  co_await HandleModels(exchange, request, model);
}

// Handlers that take no path value.
template <asio::awaitable<void> (*handler)(HttpExchange&, const HttpRequest&)>
asio::awaitable<void> Plain(HttpExchange& exchange, const HttpRequest& request,
                            const std::string&) {
  co_await handler(exchange, request);
}

constexpr std::array<verb, 2> kGet = {verb::get, verb::unknown};
constexpr std::array<verb, 2> kPost = {verb::post, verb::unknown};

const std::array<Route, 18> kRoutes = {{
    {"/health", kGet, Health, ErrorDialect::kOpenAI, /*needs_key=*/false},
    {"/metrics", kGet, Metrics, ErrorDialect::kOpenAI, /*needs_key=*/false},
    {"/v1/completions", kPost, Completions},
    {"/v1/chat/completions", kPost, ChatCompletions},
    {"/v1/embeddings", kPost, Plain<HandleEmbeddings>},
    // llama-server serves the first three, vLLM /rerank and both versioned paths.
    {"/v1/rerank", kPost, Plain<HandleRerank>},
    {"/rerank", kPost, Plain<HandleRerank>},
    {"/v1/reranking", kPost, Plain<HandleRerank>},
    {"/v2/rerank", kPost, Plain<HandleRerank>},
    {"/v1/models", kGet, Models},
    {"/v1/models/{model}", kGet, Model, ErrorDialect::kOpenAI, true,
     /*value_may_hold_slash=*/true},
    {"/tokenize", kPost, Plain<HandleTokenize>},
    {"/detokenize", kPost, Plain<HandleDetokenize>},
    {"/v1/responses", kPost, Plain<HandleResponses>},
    {"/v1/responses/{id}", {verb::get, verb::delete_}, HandleStoredResponse},
    {"/v1/responses/{id}/input_items", kGet, HandleInputItems},
    {"/v1/messages", kPost, Plain<HandleMessages>, ErrorDialect::kAnthropic},
    {"/v1/messages/count_tokens", kPost, Plain<HandleCountTokens>, ErrorDialect::kAnthropic},
}};

// Whether `path` matches `route`'s pattern; its {name} part into `value`.
bool Matches(const Route& route, std::string_view path, std::string_view& value) {
  const std::string_view pattern = route.pattern;
  const size_t open = pattern.find('{');
  if (open == std::string_view::npos) return path == pattern;
  const std::string_view prefix = pattern.substr(0, open);
  const std::string_view suffix = pattern.substr(pattern.find('}', open) + 1);
  if (path.size() <= prefix.size() + suffix.size() || !path.starts_with(prefix) ||
      !path.ends_with(suffix)) {
    return false;
  }
  value = path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
  return route.value_may_hold_slash || value.find('/') == std::string_view::npos;
}

}  // namespace

RouteMatch FindRoute(std::string_view path) {
  for (const Route& route : kRoutes) {
    std::string_view value;
    if (Matches(route, path, value)) return {&route, PercentDecode(value)};
  }
  return {};
}

bool Allows(const Route& route, verb method) {
  for (const verb allowed : route.methods) {
    if (allowed != verb::unknown && allowed == method) return true;
  }
  return false;
}

std::string_view MetricsLabel(const Route* route) {
  return route != nullptr ? route->pattern : "other";
}

ErrorResponse RenderError(ErrorDialect dialect, const HttpError& error) {
  if (dialect == ErrorDialect::kAnthropic) {
    AnthropicError anthropic = ToAnthropicError(error);
    return {anthropic.status, std::move(anthropic.body)};
  }
  return {error.status, error.ToJson()};
}

}  // namespace tokenmill::gateway
