// One HTTP/1.1 client connection: a coroutine on its own strand that reads requests one after
// another (keep-alive), routes them and writes the responses, plain or as an event stream.
// Each request's head is checked (request_head.h) and admitted (route, method, API key) before
// a byte of its body is read; the body then has --body-timeout and draws on the gateway's
// --body-buffer-size (body_budget.h). While a request waits on a backend it also watches the
// socket, so that a client that goes away cancels the backend call (one that only half-closed
// is answered). The route table (routes.h) says which handler answers.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gateway/gateway_context.h"
#include "gateway/http/body_budget.h"
#include "gateway/http/client_stream.h"
#include "gateway/http/http_error.h"
#include "gateway/http/http_exchange.h"
#include "gateway/routes.h"

namespace tokenmill::gateway {

class Connection : public HttpExchange, public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, GatewayContext& context);

  boost::asio::awaitable<void> Run();

  // HttpExchange.
  GatewayContext& context() override { return context_; }
  const Tenant& tenant() const override { return tenant_; }
  boost::asio::awaitable<bool> WriteJson(const HttpRequest& request, int status,
                                         const nlohmann::json& body, int retry_after) override;
  boost::asio::awaitable<bool> WriteError(const HttpRequest& request,
                                          const HttpError& error) override;
  boost::asio::awaitable<bool> WriteText(const HttpRequest& request, int status, std::string body,
                                         const std::string& content_type) override;
  boost::asio::awaitable<bool> StartEventStream(const HttpRequest& request) override;
  boost::asio::awaitable<bool> WriteEventChunk(const std::string& data) override;
  boost::asio::awaitable<bool> EndEventStream() override;
  void WatchForClose(std::shared_ptr<EventQueue> events) override;
  boost::asio::awaitable<void> StopWatching() override;
  void CloseAfterResponse() override { keep_alive_ = false; }

 private:
  using RequestParser = boost::beast::http::request_parser<BudgetedBody>;

  boost::asio::awaitable<bool> HandleOne();
  // Reads until buffer_ holds a whole request head (its size into head_bytes); no parsing.
  boost::asio::awaitable<boost::beast::error_code> ReadHeadBytes(size_t& head_bytes);
  // The body of a head that was admitted, within --body-timeout and --body-buffer-size: the
  // error to answer when it is refused; nullopt when it was read, or the client left (the
  // parser is not done).
  boost::asio::awaitable<std::optional<HttpError>> ReadBody(RequestParser& parser);
  // 404, 405 or 401 for a request head, before its body is read; nullopt: admitted (and
  // tenant_ is the key's tenant).
  std::optional<HttpError> Admit(const HttpRequest& head, const RouteMatch& match);
  // A 400 for a request whose framing cannot be trusted; the connection then closes.
  boost::asio::awaitable<void> RefuseMalformed(const std::string& message);
  // After the client's end of stream while a backend works: probes it until StopWatching, and
  // pushes kClientGone to `events` once it proves gone (see WatchForClose).
  void ProbeHalfClosed(std::shared_ptr<EventQueue> events, uint64_t round);
  // Counts the request in the metrics; its seconds.
  double CountFinished(const RouteMatch& match, std::chrono::steady_clock::time_point started);
  boost::asio::awaitable<bool> Write(
      boost::beast::http::response<boost::beast::http::string_body>& response);
  boost::asio::awaitable<void> DiscardInput();
  // Whether the request's key names a tenant (gateway/tenants); it becomes tenant_.
  bool Authorized(const boost::beast::http::request_header<>& request);

  ClientStream stream_;
  GatewayContext& context_;
  Tenant tenant_;  // of the request being answered
  boost::beast::flat_buffer buffer_;
  bool keep_alive_ = true;
  int last_status_ = 0;
  ErrorDialect error_dialect_ = ErrorDialect::kOpenAI;  // of the request being answered
  bool watching_ = false;
  bool stop_requested_ = false;
  boost::asio::steady_timer watch_done_;
  unsigned request_version_ = 11;  // of the request being answered: 10 or 11
  boost::asio::steady_timer probe_timer_;
  uint64_t watch_round_ = 0;  // one per WatchForClose: a stale probe does nothing
};

boost::asio::awaitable<void> ServeConnection(std::shared_ptr<Connection> connection);

}  // namespace tokenmill::gateway
