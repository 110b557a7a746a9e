// The routes that make one unary call to a backend (/tokenize, /detokenize, Anthropic's
// count_tokens, /v1/embeddings, /v1/rerank): the body parsed and mapped to its call, checked
// for size, routed by model, sent for the request's tenant (counted against its
// --tenant-max-concurrent and, where the route says, charged its tokens), and the reply turned
// into the route's JSON; every refusal in the route's error shape.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "gateway/backends/backend_request.h"
#include "gateway/gateway_context.h"
#include "gateway/http/http_error.h"
#include "gateway/http/http_exchange.h"
#include "gateway/http/request_body.h"

namespace tokenmill::gateway {

// What a route's answer is made of.
template <typename Call, typename Response>
struct UnaryReply {
  Backend& backend;
  const std::string& model;  // the model that answers by its API name (Route::model)
  const Call& call;
  const Response& response;
};

// What a route does around its call. `Call` has the body's `model` and the gRPC `request`.
template <typename Call, typename Response>
struct UnaryCall {
  using Request = decltype(Call::request);
  std::optional<HttpError> (*parse)(const nlohmann::json& body, Call& call);
  boost::asio::awaitable<grpc::Status> (*send)(Backend& backend, CallRegistry& calls,
                                               std::string_view tenant, const Request& request,
                                               Response& response);
  nlohmann::json (*answer)(const UnaryReply<Call, Response>& reply);
  // The body's field a server's 400 is about, where the body names it otherwise than the
  // server does ("tokens" for its token_ids); empty: as the server says.
  const char* refused_param = "";
  // Set: called with the body parsed again keeping key order (nlohmann::json sorts keys), for
  // what the template prints in the client's order (tools).
  void (*keep_order)(const nlohmann::ordered_json& body, Call& call) = nullptr;
  // Set: a refusal of the call by the model it was routed to, before sending (where the
  // backend's ModelInfo is that model's: its default model or an adapter of it).
  std::optional<HttpError> (*check)(const v1::ModelInfo& info, const Call& call) = nullptr;
  // Set: a refusal by the reply, for what `check` could not see (another served model's).
  std::optional<HttpError> (*check_reply)(const Call& call, const Response& response) = nullptr;
  // Set: the tokens the call used (by its reply), charged to the tenant's
  // --tenant-tokens-per-minute as a generation's prompt tokens are.
  int64_t (*tokens_used)(const Response& response) = nullptr;
  // Set: the request's request_id, a fresh GatewayContext::NewId(id_prefix), for an answer
  // that has an id (a server's own ids are numbered per server, not unique over backends).
  const char* id_prefix = nullptr;
  // Set: the call runs the base model whatever the body names (Embed and Rerank take no
  // adapter): a LoRA adapter's name is refused (404) rather than routed.
  bool base_model_only = false;
};

template <typename Call, typename Response>
boost::asio::awaitable<void> HandleUnaryCall(HttpExchange& exchange, const HttpRequest& request,
                                             UnaryCall<Call, Response> route) {
  Call call;
  {
    nlohmann::json body;
    std::optional<HttpError> error = ParseRequestBody(request.body(), body);
    if (!error) error = route.parse(body, call);
    if constexpr (requires { call.request.set_request_id(std::string()); }) {
      if (!error && route.id_prefix != nullptr) {
        call.request.set_request_id(exchange.context().NewId(route.id_prefix));
      }
    }
    if (!error && route.keep_order != nullptr) {
      nlohmann::ordered_json ordered;
      if (!ParseRequestBody(request.body(), ordered)) route.keep_order(ordered, call);
    }
    if (!error) error = TooLargeForBackend(call.request);
    if (error) {
      co_await exchange.WriteError(request, *error);
      co_return;
    }
  }
  std::variant<Route, HttpError> routed =
      PickBackend(exchange.context().pool, call.model, "", !route.base_model_only);
  if (auto* refused = std::get_if<HttpError>(&routed)) {
    co_await exchange.WriteError(request, *refused);
    co_return;
  }
  const Route& routed_to = std::get<Route>(routed);
  Backend& backend = *routed_to.backend;
  const std::string& model = routed_to.model;
  if (routed_to.named) call.request.set_model(model);
  GatewayContext& context = exchange.context();
  const std::optional<v1::ModelInfo> info = backend.model_info();
  if (route.check != nullptr && info && routed_to.default_model) {
    if (const std::optional<HttpError> refused = route.check(*info, call)) {
      co_await exchange.WriteError(request, *refused);
      co_return;
    }
  }
  std::variant<TenantLimiter::Admission, HttpError> admitted =
      context.limiter.Admit(exchange.tenant(), 0, TenantLimiter::Clock::now());
  if (auto* refused = std::get_if<HttpError>(&admitted)) {
    co_await exchange.WriteError(request, *refused);
    co_return;
  }
  Response response;
  const grpc::Status status = co_await route.send(
      backend, context.calls, context.TenantForBackend(exchange.tenant()), call.request,
      response);
  if (!status.ok()) {
    HttpError refused = FromGrpcStatus(status);
    if (refused.status == 400 && *route.refused_param != '\0') {
      refused.param = route.refused_param;
    }
    co_await exchange.WriteError(request, refused);
    co_return;
  }
  if (route.tokens_used != nullptr) {
    std::get<TenantLimiter::Admission>(admitted).Used(route.tokens_used(response));
  }
  if (route.check_reply != nullptr) {
    if (const std::optional<HttpError> refused = route.check_reply(call, response)) {
      co_await exchange.WriteError(request, *refused);
      co_return;
    }
  }
  const nlohmann::json answer =
      route.answer(UnaryReply<Call, Response>{backend, model, call, response});
  co_await exchange.WriteJson(request, 200, answer);
}

}  // namespace tokenmill::gateway
