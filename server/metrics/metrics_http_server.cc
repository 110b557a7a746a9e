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

#include "common/bearer_token.h"

namespace tokenmill::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

using Pages = std::vector<MetricsHttpServer::Page>;
using Limits = MetricsHttpLimits;
// After a failed accept (EMFILE: no descriptor left): wait this long before the next try
// instead of spinning on a listener that stays readable.
constexpr std::chrono::milliseconds kAcceptRetryDelay(100);

// What every connection shares; the I/O thread's alone.
struct Shared {
  Pages pages;
  Limits limits;
  size_t open_connections = 0;
};

http::response<http::string_body> Plain(http::status status, unsigned version,
                                        std::string body) {
  http::response<http::string_body> response{status, version};
  response.keep_alive(false);
  response.set(http::field::content_type, "text/plain; charset=utf-8");
  response.body() = std::move(body);
  return response;
}

// What follows '?' in a request target; empty without one.
std::string_view QueryOf(std::string_view target) {
  const size_t question = target.find('?');
  return question == std::string_view::npos ? std::string_view() : target.substr(question + 1);
}

std::string_view AuthorizationOf(const http::request<http::string_body>& request) {
  const beast::string_view value = request[http::field::authorization];
  return {value.data(), value.size()};
}

http::response<http::string_body> Respond(const http::request<http::string_body>& request,
                                          const Shared& shared) {
  const Pages& pages = shared.pages;
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const auto page = std::find_if(pages.begin(), pages.end(),
                                 [&](const MetricsHttpServer::Page& p) { return p.path == path; });
  std::string paths;
  for (const MetricsHttpServer::Page& p : pages) paths += (paths.empty() ? "" : ", ") + p.path;
  http::response<http::string_body> response;
  const bool post = page != pages.end() && page->post;
  const bool method_ok = post ? request.method() == http::verb::post
                              : request.method() == http::verb::get ||
                                    request.method() == http::verb::head;
  if (page == pages.end()) {
    response = Plain(http::status::not_found, request.version(), "not found: try " + paths + "\n");
  } else if (!method_ok) {
    response = Plain(http::status::method_not_allowed, request.version(),
                     std::string(post ? "only POST " : "only GET ") + std::string(path) + "\n");
    response.set(http::field::allow, post ? "POST" : "GET, HEAD");
  } else if (post && shared.limits.api_key.empty()) {
    response = Plain(http::status::forbidden, request.version(),
                     std::string(path) + " is an admin action: start the server with --api-key "
                     "and send 'authorization: Bearer <key>'\n");
  } else if (page->needs_api_key && !shared.limits.api_key.empty() &&
             !BearerTokenMatches(AuthorizationOf(request), shared.limits.api_key)) {
    response = Plain(http::status::unauthorized, request.version(),
                     std::string(path) + " holds prompt data: send 'authorization: Bearer <key>' "
                     "with the server's --api-key\n");
    response.set(http::field::www_authenticate, "Bearer");
  } else if (page->available && !page->available()) {
    response = Plain(http::status::service_unavailable, request.version(),
                     "not serving: the model is loading or the server is draining\n");
  } else if (post) {
    MetricsHttpServer::ActionResult result = page->post(QueryOf(target), request.body());
    response = Plain(static_cast<http::status>(result.status), request.version(),
                     std::move(result.body));
    response.set(http::field::content_type, page->content_type);
  } else {
    response.result(http::status::ok);
    response.version(request.version());
    response.keep_alive(false);
    response.set(http::field::content_type, page->content_type);
    response.body() = page->render(QueryOf(target));
  }
  return response;
}

// `socket` was counted in shared.open_connections when accepted; Serve uncounts it.
asio::awaitable<void> Serve(tcp::socket socket, Shared& shared) {
  struct Release {
    size_t& open;
    ~Release() { --open; }
  } release{shared.open_connections};
  beast::tcp_stream stream(std::move(socket));
  // One deadline over reading the request and writing the answer: an idle or slow client
  // (or one that never reads a large /kv_events/state) holds its descriptor no longer.
  stream.expires_after(shared.limits.request_timeout);
  beast::flat_buffer buffer(shared.limits.max_header_bytes + shared.limits.max_body_bytes);
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(shared.limits.max_header_bytes));
  parser.body_limit(shared.limits.max_body_bytes);
  beast::error_code error;
  co_await http::async_read(stream, buffer, parser,
                            asio::redirect_error(asio::use_awaitable, error));
  http::response<http::string_body> response;
  if (error == http::error::header_limit) {
    response = Plain(http::status::request_header_fields_too_large, 11,
                     "request headers over " + std::to_string(shared.limits.max_header_bytes) +
                         " bytes\n");
  } else if (error == http::error::body_limit) {
    response = Plain(http::status::payload_too_large, 11,
                     "request body over " + std::to_string(shared.limits.max_body_bytes) +
                         " bytes: GET takes none\n");
  } else if (error) {
    co_return;  // gone, garbage or too slow: nothing to answer
  } else {
    response = Respond(parser.get(), shared);
  }
  response.prepare_payload();
  if (!error && parser.get().method() == http::verb::head) response.body().clear();
  co_await http::async_write(stream, response, asio::redirect_error(asio::use_awaitable, error));
  stream.socket().shutdown(tcp::socket::shutdown_send, error);
}

asio::awaitable<void> Listen(tcp::acceptor& acceptor, Shared& shared) {
  asio::steady_timer retry(acceptor.get_executor());
  for (;;) {
    beast::error_code error;
    tcp::socket socket =
        co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, error));
    if (error == asio::error::operation_aborted) co_return;
    if (error) {  // out of descriptors: let them free up, without spinning the thread
      spdlog::debug("metrics: accept failed: {}", error.message());
      retry.expires_after(kAcceptRetryDelay);
      co_await retry.async_wait(asio::redirect_error(asio::use_awaitable, error));
      continue;
    }
    if (shared.open_connections >= shared.limits.max_connections) {
      socket.close(error);  // over the cap: the descriptor comes back at once
      continue;
    }
    ++shared.open_connections;
    asio::co_spawn(acceptor.get_executor(), Serve(std::move(socket), shared), asio::detached);
  }
}

}  // namespace

struct MetricsHttpServer::Impl {
  Impl(Pages pages, Limits limits) : shared{std::move(pages), std::move(limits)}, acceptor(io) {}

  Shared shared;
  asio::io_context io{1};
  tcp::acceptor acceptor;
  int bound_port = 0;
  std::thread thread;
};

StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& host,
                                                                      int port,
                                                                      std::vector<Page> pages,
                                                                      MetricsHttpLimits limits) {
  auto impl = std::make_unique<Impl>(std::move(pages), std::move(limits));
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
  asio::co_spawn(raw->io, Listen(raw->acceptor, raw->shared), asio::detached);
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
