// What a route handler sees of the connection it answers on: the response written whole (JSON,
// text or an error in the route's dialect) or as an event stream, and the client's going away
// watched while a backend works. The connection (connection.h) implements it; the handlers
// know nothing else of it.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "gateway/http/http_error.h"
#include "gateway/tenants/key_table.h"

namespace tokenmill::gateway {

struct GatewayContext;
class EventQueue;

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  virtual GatewayContext& context() = 0;
  // The tenant the request's key names ("" on a gateway without keys).
  virtual const Tenant& tenant() const = 0;

  // Each returns false when the client is gone (the connection then closes).
  virtual boost::asio::awaitable<bool> WriteJson(const HttpRequest& request, int status,
                                                 const nlohmann::json& body,
                                                 int retry_after = 0) = 0;
  // In the error dialect of the request's route (OpenAI's, or Anthropic's on /v1/messages).
  virtual boost::asio::awaitable<bool> WriteError(const HttpRequest& request,
                                                  const HttpError& error) = 0;
  virtual boost::asio::awaitable<bool> WriteText(const HttpRequest& request, int status,
                                                 std::string body,
                                                 const std::string& content_type) = 0;
  // An SSE response: headers (chunked), then one chunk per event, then the last chunk.
  virtual boost::asio::awaitable<bool> StartEventStream(const HttpRequest& request) = 0;
  virtual boost::asio::awaitable<bool> WriteEventChunk(const std::string& data) = 0;
  virtual boost::asio::awaitable<bool> EndEventStream() = 0;

  // Until StopWatching: a read on the socket that pushes kClientGone to `events` when the
  // client closes the connection.
  virtual void WatchForClose(std::shared_ptr<EventQueue> events) = 0;
  virtual boost::asio::awaitable<void> StopWatching() = 0;
  // The response ends the connection (the client went away, or the body was refused).
  virtual void CloseAfterResponse() = 0;
};

}  // namespace tokenmill::gateway
