// The handler of OpenAI's Responses API: POST /v1/responses, whole or streamed as the
// Responses events, continuing stored conversations (previous_response_id) and storing its own;
// GET and DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items on those stored.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>

#include "gateway/http/http_exchange.h"

namespace tokenmill::gateway {

boost::asio::awaitable<void> HandleResponses(HttpExchange& exchange, const HttpRequest& request);
// GET: the stored response object as it was sent; DELETE: forgets it. A 404 in OpenAI's shape
// for an id the store does not hold (never stored, expired, dropped for room or deleted).
boost::asio::awaitable<void> HandleStoredResponse(HttpExchange& exchange,
                                                  const HttpRequest& request,
                                                  const std::string& id);
// GET: one page of the stored response's input items (the query's after, limit, order), the 404
// of HandleStoredResponse for an id the store does not hold.
boost::asio::awaitable<void> HandleInputItems(HttpExchange& exchange, const HttpRequest& request,
                                              const std::string& id);

}  // namespace tokenmill::gateway
