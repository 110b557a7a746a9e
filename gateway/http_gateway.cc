#include "gateway/http_gateway.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gateway/gateway_context.h"
#include "gateway/http/client_stream.h"
#include "gateway/http/connection.h"

namespace tokenmill::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

// After --drain-timeout: how long the requests then ended have to write their error.
constexpr std::chrono::seconds kFinalWrites(5);

// Runs on the acceptor's strand, as its closes do (Drain, ~HttpGateway); each connection gets a
// strand of its own on the I/O threads.
asio::awaitable<void> Listen(tcp::acceptor& acceptor, asio::io_context& io,
                             GatewayContext& context) {
  for (;;) {
    auto strand = asio::make_strand(io);
    beast::error_code error;
    tcp::socket socket =
        co_await acceptor.async_accept(strand, asio::redirect_error(asio::use_awaitable, error));
    if (error == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (error) continue;
    socket.set_option(tcp::no_delay(true), error);
    auto connection = std::make_shared<Connection>(std::move(socket), context);
    asio::co_spawn(strand, ServeConnection(connection), asio::detached);
  }
}

}  // namespace

struct HttpGateway::Impl {
  Impl(const GatewayOptions& options, const GatewayLimits& limits, BackendPool& pool,
       GatewayMetrics& metrics, const KeyStore& keys)
      : context(options, limits.max_body_bytes, pool, metrics, keys,
                {.max_bytes = static_cast<size_t>(limits.response_store_bytes),
                 .ttl = std::chrono::seconds(options.response_store_ttl_seconds)},
                static_cast<size_t>(limits.body_buffer_bytes)),
        io(options.io_threads),
        acceptor(asio::make_strand(io)) {}

  // Declared before io so that they outlive it: io's destructor destroys the coroutines still
  // suspended on it (connections mid-request at shutdown), and their frames hold admissions
  // into context's tenant limiter and streams using tls.
  std::unique_ptr<asio::ssl::context> tls;  // HTTPS, or null
  GatewayContext context;
  asio::io_context io;
  tcp::acceptor acceptor;
  int bound_port = 0;
  std::vector<std::thread> threads;
};

StatusOr<std::unique_ptr<HttpGateway>> HttpGateway::Start(const GatewayOptions& options,
                                                          const GatewayLimits& limits,
                                                          BackendPool& pool,
                                                          GatewayMetrics& metrics,
                                                          const KeyStore& keys) {
  auto impl = std::make_unique<Impl>(options, limits, pool, metrics, keys);
  if (!options.tls_cert.empty() || !options.tls_key.empty() || !options.tls_client_ca.empty()) {
    if (options.tls_cert.empty() || options.tls_key.empty()) {
      return InvalidArgumentError(
          "HTTPS needs both --tls-cert and --tls-key (--tls-client-ca adds client certificates)");
    }
    TM_ASSIGN_OR_RETURN(impl->tls, MakeServerTlsContext(options.tls_cert, options.tls_key,
                                                        options.tls_client_ca));
    impl->context.tls = impl->tls.get();
  }
  beast::error_code error;
  const asio::ip::address address = asio::ip::make_address(options.host, error);
  if (error) return InvalidArgumentError("--host '" + options.host + "' is not an IP address");
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  impl->acceptor.open(endpoint.protocol(), error);
  if (!error) impl->acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) impl->acceptor.bind(endpoint, error);
  if (!error) impl->acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) {
    return UnavailableError("cannot listen on " + options.host + ":" +
                            std::to_string(options.port) + ": " + error.message() +
                            " (choose another --port)");
  }
  impl->bound_port = impl->acceptor.local_endpoint(error).port();
  Impl* raw = impl.get();
  asio::co_spawn(raw->acceptor.get_executor(), Listen(raw->acceptor, raw->io, raw->context),
                 asio::detached);
  for (int i = 0; i < options.io_threads; ++i) {
    raw->threads.emplace_back([raw] { raw->io.run(); });
  }
  return std::unique_ptr<HttpGateway>(new HttpGateway(std::move(impl)));
}

HttpGateway::HttpGateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {

// Waits until no request is in flight or `deadline` passes; true when none is.
bool WaitForRequests(const GatewayMetrics& metrics,
                     std::chrono::steady_clock::time_point deadline) {
  while (metrics.in_flight() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

void HttpGateway::Drain(std::chrono::milliseconds timeout) {
  impl_->context.draining = true;
  CloseAcceptor();
  spdlog::info("draining {} requests (up to {} s): they finish, new ones get 503",
               impl_->context.metrics.in_flight(), static_cast<double>(timeout.count()) / 1000.0);
  const auto now = std::chrono::steady_clock::now();
  if (WaitForRequests(impl_->context.metrics, now + timeout)) return;
  spdlog::warn("--drain-timeout: ending {} requests still running",
               impl_->context.metrics.in_flight());
  impl_->context.drain_expired = true;
  impl_->context.calls.CancelAll();
  // Their error events are written on the I/O threads, which must still run meanwhile.
  WaitForRequests(impl_->context.metrics, std::chrono::steady_clock::now() + kFinalWrites);
}

void HttpGateway::CloseAcceptor() {
  // On the acceptor's strand: Drain's close, the destructor's and Listen's accepts would race
  // on the I/O threads otherwise (ThreadSanitizer saw the two closes do).
  asio::post(impl_->acceptor.get_executor(), [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
  });
}

HttpGateway::~HttpGateway() {
  CloseAcceptor();
  // Backend calls report to connection strands: cancel them and let them finish before the
  // I/O threads stop.
  impl_->context.calls.CancelAll();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (impl_->context.calls.open() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  impl_->io.stop();
  for (std::thread& thread : impl_->threads) thread.join();
}

int HttpGateway::port() const { return impl_->bound_port; }

}  // namespace tokenmill::gateway
