// The handler of OpenAI's Responses API: POST /v1/responses, whole or streamed as the
// Responses events, continuing stored conversations (previous_response_id) and storing its own.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>

#include "server/openai/connection.h"

namespace tokenmill::gateway {

boost::asio::awaitable<void> HandleResponses(Connection& connection, const HttpRequest& request);

}  // namespace tokenmill::gateway
