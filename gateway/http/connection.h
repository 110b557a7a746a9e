// One HTTP/1.1 client connection: a coroutine on its own strand that reads requests one after
// another (keep-alive), routes them and writes the responses, plain or as an event stream.
// While a request waits on a backend it also watches the socket, so that a client that goes
// away cancels the backend call. The route table (routes.h) says which handler answers.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "gateway/gateway_context.h"
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
  boost::asio::awaitable<bool> HandleOne();
  boost::asio::awaitable<void> Dispatch(const HttpRequest& request, const RouteMatch& match);
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
};

boost::asio::awaitable<void> ServeConnection(std::shared_ptr<Connection> connection);

}  // namespace tokenmill::gateway
