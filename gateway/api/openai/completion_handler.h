// The handlers of the routes that reach a backend: completions and chat completions
// (streamed or not), models, tokenize and detokenize.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>

#include <string>

#include "gateway/api/openai/request_mapping.h"
#include "gateway/http/http_exchange.h"

namespace tokenmill::gateway {

boost::asio::awaitable<void> HandleCompletion(HttpExchange& exchange, const HttpRequest& request,
                                              Endpoint endpoint);
// `model_id` empty: the list; otherwise that model or 404.
boost::asio::awaitable<void> HandleModels(HttpExchange& exchange, const HttpRequest& request,
                                          std::string model_id);
boost::asio::awaitable<void> HandleTokenize(HttpExchange& exchange, const HttpRequest& request);
boost::asio::awaitable<void> HandleDetokenize(HttpExchange& exchange,
                                              const HttpRequest& request);

}  // namespace tokenmill::gateway
