// The gateway's one route table: for each route its path, the methods it takes, whether it
// needs the API key, its handler, its metrics label (the path pattern) and the dialect of its
// errors. The connection dispatches by it, answers errors in its dialect and counts requests
// under its label; nothing else knows the routes.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <string>
#include <string_view>

#include "gateway/http/http_error.h"
#include "gateway/http/http_exchange.h"

namespace tokenmill::gateway {

// The shape of a route's errors: OpenAI's, or Anthropic's (its clients parse only theirs).
enum class ErrorDialect { kOpenAI, kAnthropic };

// `value`: the percent-decoded {name} part of the path ("" when the pattern has none).
using RouteHandler = boost::asio::awaitable<void> (*)(HttpExchange& exchange,
                                                      const HttpRequest& request,
                                                      const std::string& value);

struct Route {
  // The path, with at most one "{name}" part that matches a non-empty piece of the path; the
  // metrics label of the route.
  std::string_view pattern;
  // The methods it takes (the rest of the array unknown); others are answered 405.
  std::array<boost::beast::http::verb, 2> methods;
  RouteHandler handler;
  ErrorDialect errors = ErrorDialect::kOpenAI;
  bool needs_key = true;               // false: served without the API key (health, metrics)
  bool value_may_hold_slash = false;   // {name} may span segments (a model id "org/model")
};

struct RouteMatch {
  const Route* route = nullptr;  // null: no route has this path
  std::string value;             // the {name} part, percent-decoded
};

// The route of a path (the target without its query).
RouteMatch FindRoute(std::string_view path);
bool Allows(const Route& route, boost::beast::http::verb method);

// The label a request is counted under: its route's pattern, "other" for unknown paths (the
// label set stays bounded).
std::string_view MetricsLabel(const Route* route);

// An error in a dialect: its status (Anthropic's differs for 503) and its JSON body.
struct ErrorResponse {
  int status = 400;
  nlohmann::json body;
};
ErrorResponse RenderError(ErrorDialect dialect, const HttpError& error);

}  // namespace tokenmill::gateway
