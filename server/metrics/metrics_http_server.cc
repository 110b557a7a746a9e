#include "server/metrics/metrics_http_server.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace tokenmill::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

using Pages = std::vector<MetricsHttpServer::Page>;

http::response<http::string_body> Respond(const http::request<http::string_body>& request,
                                          const Pages& pages) {
  http::response<http::string_body> response;
  response.version(request.version());
  response.keep_alive(false);
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const auto page = std::find_if(pages.begin(), pages.end(),
                                 [&](const MetricsHttpServer::Page& p) { return p.path == path; });
  std::string paths;
  for (const MetricsHttpServer::Page& p : pages) paths += (paths.empty() ? "" : ", ") + p.path;
  if (request.method() != http::verb::get && request.method() != http::verb::head) {
    response.result(http::status::method_not_allowed);
    response.set(http::field::allow, "GET, HEAD");
    response.body() = "only GET " + paths + "\n";
  } else if (page == pages.end()) {
    response.result(http::status::not_found);
    response.body() = "not found: try " + paths + "\n";
  } else {
    response.result(http::status::ok);
    response.set(http::field::content_type, page->content_type);
    response.body() = page->render();
  }
  if (response.result() != http::status::ok) {
    response.set(http::field::content_type, "text/plain; charset=utf-8");
  }
  response.prepare_payload();
  if (request.method() == http::verb::head) response.body().clear();
  return response;
}

asio::awaitable<void> Serve(tcp::socket socket, const Pages& pages) {
  beast::flat_buffer buffer;
  http::request_parser<http::string_body> parser;
  parser.body_limit(64 * 1024);  // scrapes send no body
  beast::error_code error;
  co_await http::async_read(socket, buffer, parser,
                            asio::redirect_error(asio::use_awaitable, error));
  if (error) co_return;  // a client that went away or sent garbage: nothing to answer
  http::response<http::string_body> response = Respond(parser.get(), pages);
  co_await http::async_write(socket, response, asio::redirect_error(asio::use_awaitable, error));
  socket.shutdown(tcp::socket::shutdown_send, error);
}

asio::awaitable<void> Listen(tcp::acceptor& acceptor, const Pages& pages) {
  for (;;) {
    beast::error_code error;
    tcp::socket socket =
        co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, error));
    if (error == asio::error::operation_aborted) co_return;
    if (error) continue;
    asio::co_spawn(acceptor.get_executor(), Serve(std::move(socket), pages), asio::detached);
  }
}

}  // namespace

struct MetricsHttpServer::Impl {
  explicit Impl(Pages p) : pages(std::move(p)), acceptor(io) {}

  Pages pages;
  asio::io_context io{1};
  tcp::acceptor acceptor;
  int bound_port = 0;
  std::thread thread;
};

StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& host,
                                                                      int port,
                                                                      std::vector<Page> pages) {
  auto impl = std::make_unique<Impl>(std::move(pages));
  beast::error_code error;
  const asio::ip::address address = asio::ip::make_address(host, error);
  if (error) return InvalidArgumentError("--host '" + host + "' is not an IP address");
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  impl->acceptor.open(endpoint.protocol(), error);
  if (!error) impl->acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) impl->acceptor.bind(endpoint, error);
  if (!error) impl->acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) {
    return UnavailableError("cannot serve metrics on " + host + ":" + std::to_string(port) +
                            ": " + error.message() + " (choose another --metrics-port)");
  }
  impl->bound_port = impl->acceptor.local_endpoint(error).port();
  Impl* raw = impl.get();
  asio::co_spawn(raw->io, Listen(raw->acceptor, raw->pages), asio::detached);
  raw->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsHttpServer::~MetricsHttpServer() {
  impl_->io.stop();
  impl_->thread.join();
}

int MetricsHttpServer::port() const { return impl_->bound_port; }

}  // namespace tokenmill::server
