#include "gateway/http/connection.h"

#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <string>

#include "gateway/api/openai/response_format.h"

namespace tokenmill::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

namespace {

constexpr size_t kHeaderLimit = 64 * 1024;
// A refused body is read and dropped up to this much, so the client sees the 413 rather
// than a reset connection.
constexpr size_t kDiscardLimit = 64 * 1024 * 1024;
constexpr auto kDiscardTimeout = std::chrono::seconds(5);
// A connection that sends no complete request head for this long is closed (idle keep-alive
// connections and clients that trickle bytes hold a coroutine each).
constexpr auto kRequestHeadTimeout = std::chrono::seconds(120);

std::string_view Path(const HttpRequest& request) {
  const std::string_view target(request.target().data(), request.target().size());
  return target.substr(0, target.find('?'));
}

ErrorDialect DialectOf(const RouteMatch& match) {
  return match.route != nullptr ? match.route->errors : ErrorDialect::kOpenAI;
}

}  // namespace

Connection::Connection(tcp::socket socket, GatewayContext& context)
    : stream_(std::move(socket), context.tls),
      context_(context),
      watch_done_(stream_.get_executor()) {}

asio::awaitable<void> ServeConnection(std::shared_ptr<Connection> connection) {
  // An exception outside a handler (e.g. std::bad_alloc while reading a body) would end the
  // process from the I/O thread: it ends this connection only.
  try {
    co_await connection->Run();
  } catch (const std::exception& e) {
    spdlog::error("closing a connection after an unexpected error: {}", e.what());
  }
}

asio::awaitable<void> Connection::Run() {
  const bool secured = co_await stream_.Handshake();
  if (secured) {
    while (keep_alive_) {
      if (!co_await HandleOne()) break;
    }
    co_await stream_.ShutdownSend();
  }
  stream_.Close();
}

asio::awaitable<bool> Connection::HandleOne() {
  http::request_parser<http::string_body> parser;
  parser.header_limit(kHeaderLimit);
  parser.body_limit(static_cast<uint64_t>(context_.max_body_bytes));
  beast::error_code error;
  {
    StreamDeadline deadline(stream_, kRequestHeadTimeout);
    co_await http::async_read_header(stream_, buffer_, parser,
                                     asio::redirect_error(asio::use_awaitable, error));
  }
  const auto started = std::chrono::steady_clock::now();
  if (!error && parser.get()[http::field::expect] == "100-continue" && !parser.is_done()) {
    http::response<http::empty_body> go_on(http::status::continue_, parser.get().version());
    co_await http::async_write(stream_, go_on, asio::redirect_error(asio::use_awaitable, error));
  }
  if (!error && !parser.is_done()) {
    co_await http::async_read(stream_, buffer_, parser,
                              asio::redirect_error(asio::use_awaitable, error));
  }
  if (error == http::error::body_limit) {
    context_.metrics.RequestStarted();
    keep_alive_ = false;
    HttpRequest head = parser.release();
    const RouteMatch match = FindRoute(Path(head));
    error_dialect_ = DialectOf(match);
    co_await WriteError(head, PayloadTooLarge(context_.max_body_bytes));
    co_await DiscardInput();
    context_.metrics.RequestFinished(std::string(MetricsLabel(match.route)), 413,
                                     std::chrono::duration<double>(
                                         std::chrono::steady_clock::now() - started)
                                         .count());
    co_return false;
  }
  if (error) {
    if (error != http::error::end_of_stream && error != asio::error::connection_reset &&
        error != asio::error::eof && error != asio::error::operation_aborted) {
      // Garbage that is not HTTP: say so once and close.
      spdlog::debug("closing a connection after a bad request: {}", error.message());
      http::response<http::string_body> response(http::status::bad_request, 11);
      response.set(http::field::content_type, "application/json");
      response.body() = DumpJson(BadRequest("malformed HTTP request: " + error.message()).ToJson());
      response.keep_alive(false);
      response.prepare_payload();
      co_await http::async_write(stream_, response, asio::redirect_error(asio::use_awaitable, error));
    }
    co_return false;
  }
  HttpRequest request = parser.release();
  keep_alive_ = request.keep_alive();
  context_.metrics.RequestStarted();
  last_status_ = 0;
  const RouteMatch match = FindRoute(Path(request));
  error_dialect_ = DialectOf(match);
  // A handler's bug must not drop the connection without a word: answer 500 (when nothing
  // was sent yet), log it and close.
  std::string failure;
  try {
    co_await Dispatch(request, match);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty()) {
    spdlog::error("{} {} failed: {}", std::string(request.method_string()),
                  std::string(Path(request)), failure);
    keep_alive_ = false;
    if (last_status_ == 0) {
      co_await WriteError(request, MakeError(500, "the gateway failed on this request",
                                             "server_error", "", "internal_error"));
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  context_.metrics.RequestFinished(std::string(MetricsLabel(match.route)), last_status_,
                                   seconds);
  spdlog::debug("{} {} -> {} in {:.3f} s", std::string(request.method_string()),
                std::string(Path(request)), last_status_, seconds);
  co_return keep_alive_;
}

bool Connection::Authorized(const http::request_header<>& request) {
  std::optional<Tenant> tenant = context_.keys.Authenticate(request);
  tenant_ = tenant ? std::move(*tenant) : Tenant{};
  return tenant.has_value();
}

asio::awaitable<void> Connection::Dispatch(const HttpRequest& request, const RouteMatch& match) {
  const std::string_view path = Path(request);
  if (match.route == nullptr) {
    co_await WriteError(request, NotFound("Unknown route: " + std::string(request.method_string()) +
                                              " " + std::string(path),
                                          "unknown_route"));
    co_return;
  }
  if (!Allows(*match.route, request.method())) {
    co_await WriteError(request, MakeError(405,
                                           "method " + std::string(request.method_string()) +
                                               " is not allowed on " + std::string(path),
                                           "invalid_request_error", "", "method_not_allowed"));
    co_return;
  }
  if (match.route->needs_key && !Authorized(request)) {
    co_await WriteError(request, Unauthorized());
    co_return;
  }
  co_await match.route->handler(*this, request, match.value);
}

asio::awaitable<bool> Connection::Write(http::response<http::string_body>& response) {
  last_status_ = static_cast<int>(response.result_int());
  response.keep_alive(keep_alive_);
  response.prepare_payload();
  beast::error_code error;
  co_await http::async_write(stream_, response, asio::redirect_error(asio::use_awaitable, error));
  if (error) keep_alive_ = false;
  co_return !error;
}

asio::awaitable<bool> Connection::WriteText(const HttpRequest& request, int status,
                                            std::string body, const std::string& content_type) {
  http::response<http::string_body> response(static_cast<http::status>(status),
                                             request.version());
  response.set(http::field::content_type, content_type);
  response.body() = std::move(body);
  co_return co_await Write(response);
}

asio::awaitable<bool> Connection::WriteJson(const HttpRequest& request, int status,
                                            const json& body, int retry_after) {
  http::response<http::string_body> response(static_cast<http::status>(status),
                                             request.version());
  response.set(http::field::content_type, "application/json");
  if (retry_after > 0) response.set(http::field::retry_after, std::to_string(retry_after));
  response.body() = DumpJson(body);
  co_return co_await Write(response);
}

asio::awaitable<bool> Connection::WriteError(const HttpRequest& request, const HttpError& error) {
  if (error.status >= 500) {
    spdlog::warn("{} {}: {} {}", std::string(request.method_string()),
                 std::string(Path(request)), error.status, error.message);
  }
  const ErrorResponse response = RenderError(error_dialect_, error);
  co_return co_await WriteJson(request, response.status, response.body, error.retry_after_seconds);
}

asio::awaitable<bool> Connection::StartEventStream(const HttpRequest& request) {
  http::response<http::empty_body> response(http::status::ok, request.version());
  response.set(http::field::content_type, "text/event-stream; charset=utf-8");
  response.set(http::field::cache_control, "no-cache");
  response.keep_alive(keep_alive_);
  response.chunked(true);
  last_status_ = 200;
  http::response_serializer<http::empty_body> serializer(response);
  beast::error_code error;
  co_await http::async_write_header(stream_, serializer,
                                    asio::redirect_error(asio::use_awaitable, error));
  if (error) keep_alive_ = false;
  co_return !error;
}

asio::awaitable<bool> Connection::WriteEventChunk(const std::string& data) {
  beast::error_code error;
  co_await asio::async_write(stream_, http::make_chunk(asio::buffer(data)),
                             asio::redirect_error(asio::use_awaitable, error));
  if (error) keep_alive_ = false;
  co_return !error;
}

asio::awaitable<bool> Connection::EndEventStream() {
  beast::error_code error;
  co_await asio::async_write(stream_, http::make_chunk_last(),
                             asio::redirect_error(asio::use_awaitable, error));
  if (error) keep_alive_ = false;
  co_return !error;
}

void Connection::WatchForClose(std::shared_ptr<EventQueue> events) {
  watching_ = true;
  stop_requested_ = false;
  // Runs on the socket's executor, the connection's strand.
  stream_.async_read_some(
      buffer_.prepare(4096),
      [self = shared_from_this(), events](const beast::error_code& error, size_t bytes) {
        self->watching_ = false;
        if (!error) {
          self->buffer_.commit(bytes);  // the next request, sent early: kept for the parser
        } else if (!self->stop_requested_) {
          self->keep_alive_ = false;
          UpstreamEvent gone;
          gone.kind = UpstreamEvent::Kind::kClientGone;
          events->PushOnStrand(std::move(gone));
        }
        self->watch_done_.cancel();
      });
}

asio::awaitable<void> Connection::StopWatching() {
  if (!watching_) co_return;
  stop_requested_ = true;
  stream_.Cancel();
  beast::error_code ignored;
  while (watching_) {
    watch_done_.expires_at(asio::steady_timer::time_point::max());
    co_await watch_done_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
}

asio::awaitable<void> Connection::DiscardInput() {
  beast::error_code error;
  // Plain TCP: half-close so the client sees the response end while we drain. TLS sends its
  // close_notify when the connection closes (the reads below need the TLS stream open).
  if (!stream_.is_tls()) co_await stream_.ShutdownSend();
  StreamDeadline deadline(stream_, kDiscardTimeout);
  std::vector<char> sink(64 * 1024);
  size_t total = 0;
  while (total < kDiscardLimit) {
    const size_t n = co_await stream_.async_read_some(
        asio::buffer(sink), asio::redirect_error(asio::use_awaitable, error));
    if (error) break;
    total += n;
  }
}

}  // namespace tokenmill::gateway
