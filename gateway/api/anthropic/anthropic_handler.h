// The handlers of Anthropic's Messages API: POST /v1/messages (whole or streamed as
// Anthropic's events) and POST /v1/messages/count_tokens.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>

#include "gateway/http/http_exchange.h"

namespace tokenmill::gateway {

boost::asio::awaitable<void> HandleMessages(HttpExchange& exchange, const HttpRequest& request);
boost::asio::awaitable<void> HandleCountTokens(HttpExchange& exchange,
                                               const HttpRequest& request);

}  // namespace tokenmill::gateway
