// One HTTP/1.1 client connection: a coroutine on its own strand that reads requests one after
// another (keep-alive), routes them and writes the responses, plain or as an event stream.
// While a request waits on a backend it also watches the socket, so that a client that goes
// away cancels the backend call.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <memory>
#include <string>

#include "gateway/api/responses/response_store.h"
#include "gateway/backends/backend_pool.h"
#include "gateway/backends/upstream_call.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_options.h"
#include "gateway/http/client_stream.h"
#include "gateway/http/http_error.h"

namespace tokenmill::gateway {

// What every connection shares; lives as long as the gateway.
struct GatewayContext {
  GatewayContext(const GatewayOptions& o, int64_t max_body, BackendPool& p, GatewayMetrics& m,
                 std::string prefix, ResponseStore::Limits store_limits)
      : options(o),
        max_body_bytes(max_body),
        pool(p),
        metrics(m),
        id_prefix(std::move(prefix)),
        responses(store_limits) {}

  const GatewayOptions& options;
  int64_t max_body_bytes;
  BackendPool& pool;
  GatewayMetrics& metrics;
  std::string id_prefix;  // random per process: response ids do not repeat across restarts
  boost::asio::ssl::context* tls = nullptr;  // HTTPS (--tls-cert), else null: plain HTTP
  std::atomic<uint64_t> next_id{0};
  CallRegistry calls;
  ResponseStore responses;
};

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

// The shape of the errors a route answers: OpenAI's, or Anthropic's on /v1/messages.
enum class ErrorFormat { kOpenAI, kAnthropic };

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, GatewayContext& context);

  boost::asio::awaitable<void> Run();
  GatewayContext& context() { return context_; }
  // A fresh response id: "<prefix>-<process random><counter>".
  std::string NewId(std::string_view prefix);

  // Each returns false when the client is gone (the connection then closes).
  boost::asio::awaitable<bool> WriteJson(const HttpRequest& request, int status,
                                         const nlohmann::json& body, int retry_after = 0);
  boost::asio::awaitable<bool> WriteError(const HttpRequest& request, const HttpError& error);
  boost::asio::awaitable<bool> WriteText(const HttpRequest& request, int status, std::string body,
                                         const std::string& content_type);
  // An SSE response: headers (chunked), then one chunk per event, then the last chunk.
  boost::asio::awaitable<bool> StartEventStream(const HttpRequest& request);
  boost::asio::awaitable<bool> WriteEventChunk(const std::string& data);
  boost::asio::awaitable<bool> EndEventStream();

  // Until StopWatching: a read on the socket that pushes kClientGone to `events` when the
  // client closes the connection.
  void WatchForClose(std::shared_ptr<EventQueue> events);
  boost::asio::awaitable<void> StopWatching();

  // The status of the last response written (for metrics).
  int last_status() const { return last_status_; }
  // The response ends the connection (the client went away, or the body was refused).
  void CloseAfterResponse() { keep_alive_ = false; }

 private:
  boost::asio::awaitable<bool> HandleOne();
  boost::asio::awaitable<void> Dispatch(const HttpRequest& request);
  boost::asio::awaitable<bool> Write(
      boost::beast::http::response<boost::beast::http::string_body>& response);
  boost::asio::awaitable<void> DiscardInput();
  bool Authorized(const HttpRequest& request) const;

  ClientStream stream_;
  GatewayContext& context_;
  boost::beast::flat_buffer buffer_;
  bool keep_alive_ = true;
  int last_status_ = 0;
  ErrorFormat error_format_ = ErrorFormat::kOpenAI;  // of the request being answered
  bool watching_ = false;
  bool stop_requested_ = false;
  boost::asio::steady_timer watch_done_;
};

boost::asio::awaitable<void> ServeConnection(std::shared_ptr<Connection> connection);

}  // namespace tokenmill::gateway
