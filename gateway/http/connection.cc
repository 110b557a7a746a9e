#include "gateway/http/connection.h"

#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/api/openai/response_format.h"
#include "gateway/http/request_head.h"

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
// A request head is read in pieces of this size until its empty line.
constexpr size_t kHeadReadBytes = 4096;
// A client that half-closed while its answer is prepared is probed this often with an interim
// response: every HTTP/1.1 client skips those before the final one.
constexpr auto kHalfClosedProbeInterval = std::chrono::seconds(1);
constexpr std::string_view kInterimResponse = "HTTP/1.1 100 Continue\r\n\r\n";

std::string_view Path(const HttpRequest& request) {
  const std::string_view target(request.target().data(), request.target().size());
  return target.substr(0, target.find('?'));
}

ErrorDialect DialectOf(const RouteMatch& match) {
  return match.route != nullptr ? match.route->errors : ErrorDialect::kOpenAI;
}

// The client closed or reset the connection, or a deadline cancelled the read: nothing to answer.
bool IsDisconnect(const beast::error_code& error) {
  return error == http::error::end_of_stream || error == asio::error::connection_reset ||
         error == asio::error::eof || error == asio::error::operation_aborted;
}

}  // namespace

Connection::Connection(tcp::socket socket, GatewayContext& context)
    : stream_(std::move(socket), context.tls),
      context_(context),
      watch_done_(stream_.get_executor()),
      probe_timer_(stream_.get_executor()) {}

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
  RequestParser parser;
  parser.header_limit(kHeaderLimit);
  parser.body_limit(static_cast<uint64_t>(context_.max_body_bytes));
  beast::error_code error;
  std::optional<std::string> malformed;
  {
    StreamDeadline deadline(stream_, kRequestHeadTimeout);
    size_t head_bytes = 0;
    error = co_await ReadHeadBytes(head_bytes);
    if (!error) {
      // Beast unfolds folded lines: they are seen only in the raw bytes.
      malformed = FoldedLineProblem(
          std::string_view(static_cast<const char*>(buffer_.data().data()), head_bytes));
    }
    if (!error && !malformed) {
      co_await http::async_read_header(stream_, buffer_, parser,
                                       asio::redirect_error(asio::use_awaitable, error));
    }
  }
  const auto started = std::chrono::steady_clock::now();
  if (!error && !malformed) malformed = FramingProblem(parser.get(), parser.get().version());
  if (!malformed && error && error != http::error::body_limit && !IsDisconnect(error)) {
    malformed = "malformed HTTP request: " + error.message();  // garbage that is not HTTP
  }
  if (malformed) {
    co_await RefuseMalformed(*malformed);
    co_return false;
  }
  if (error && error != http::error::body_limit) co_return false;
  // The head decides before any byte of the body is read: route, method, key, size.
  context_.metrics.RequestStarted();
  last_status_ = 0;
  HttpRequest head{HttpRequest::header_type(parser.get().base())};
  keep_alive_ = head.keep_alive();
  request_version_ = head.version();
  const RouteMatch match = FindRoute(Path(head));
  error_dialect_ = DialectOf(match);
  std::optional<HttpError> refusal;
  if (error == http::error::body_limit) {
    refusal = PayloadTooLarge(context_.max_body_bytes);
  } else {
    refusal = Admit(head, match);
    if (!refusal && !parser.is_done()) refusal = co_await ReadBody(parser);
  }
  if (!parser.is_done()) keep_alive_ = false;  // what is left of the body is not read
  if (refusal) {
    co_await WriteError(head, *refusal);
    if (!parser.is_done()) co_await DiscardInput();
  }
  if (refusal || !parser.is_done()) {
    CountFinished(match, started);
    co_return keep_alive_;
  }
  HttpRequest request(std::move(parser.get().base()), std::move(parser.get().body().text));
  // A handler's bug must not drop the connection without a word: answer 500 (when nothing
  // was sent yet), log it and close.
  std::string failure;
  try {
    co_await match.route->handler(*this, request, match.value);
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
  const double seconds = CountFinished(match, started);
  spdlog::debug("{} {} -> {} in {:.3f} s", std::string(request.method_string()),
                std::string(Path(request)), last_status_, seconds);
  co_return keep_alive_;
}

double Connection::CountFinished(const RouteMatch& match,
                                 std::chrono::steady_clock::time_point started) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  context_.metrics.RequestFinished(std::string(MetricsLabel(match.route)), last_status_,
                                   seconds);
  return seconds;
}

asio::awaitable<beast::error_code> Connection::ReadHeadBytes(size_t& head_bytes) {
  beast::error_code error;
  for (;;) {
    const std::string_view data(static_cast<const char*>(buffer_.data().data()),
                                buffer_.size());
    if (const size_t end = data.find("\r\n\r\n"); end != std::string_view::npos) {
      head_bytes = end + 4;
      co_return error;
    }
    if (data.size() >= kHeaderLimit) co_return http::error::header_limit;
    const size_t n = co_await stream_.async_read_some(
        buffer_.prepare(kHeadReadBytes), asio::redirect_error(asio::use_awaitable, error));
    buffer_.commit(n);
    if (error == asio::error::eof && buffer_.size() > 0) co_return http::error::partial_message;
    if (error) co_return error;
  }
}

asio::awaitable<std::optional<HttpError>> Connection::ReadBody(RequestParser& parser) {
  BodyCharge charge(context_.body_reads);
  parser.get().body().charge = &charge;
  beast::error_code error;
  bool expired = false;
  {
    StreamDeadline deadline(
        stream_, std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(context_.options.body_timeout_seconds)));
    if (parser.get()[http::field::expect] == "100-continue") {
      http::response<http::empty_body> go_on(http::status::continue_, parser.get().version());
      co_await http::async_write(stream_, go_on,
                                 asio::redirect_error(asio::use_awaitable, error));
    }
    if (!error) {
      co_await http::async_read(stream_, buffer_, parser,
                                asio::redirect_error(asio::use_awaitable, error));
    }
    expired = deadline.expired();
  }
  parser.get().body().charge = nullptr;
  if (!error) co_return std::nullopt;
  if (error == http::error::body_limit) co_return PayloadTooLarge(context_.max_body_bytes);
  if (charge.refused()) {
    co_return BodyBufferFull(static_cast<long long>(context_.body_reads.max_bytes()));
  }
  if (expired) co_return BodyTimeout(context_.options.body_timeout_seconds);
  if (IsDisconnect(error)) co_return std::nullopt;
  co_return BadRequest("malformed HTTP request: " + error.message());
}

asio::awaitable<void> Connection::RefuseMalformed(const std::string& message) {
  spdlog::debug("closing a connection after a bad request: {}", message);
  http::response<http::string_body> response(http::status::bad_request, 11);
  response.set(http::field::content_type, "application/json");
  response.body() = DumpJson(BadRequest(message).ToJson());
  response.keep_alive(false);
  response.prepare_payload();
  beast::error_code error;
  co_await http::async_write(stream_, response, asio::redirect_error(asio::use_awaitable, error));
  // What the client sent after the head would reset the connection, and the 400 with it.
  if (!error) co_await DiscardInput();
}

bool Connection::Authorized(const http::request_header<>& request) {
  std::optional<Tenant> tenant = context_.keys.Authenticate(request);
  tenant_ = tenant ? std::move(*tenant) : Tenant{};
  return tenant.has_value();
}

std::optional<HttpError> Connection::Admit(const HttpRequest& head,
                                           const RouteMatch& match) {
  const std::string_view path = Path(head);
  if (match.route == nullptr) {
    return NotFound("Unknown route: " + std::string(head.method_string()) + " " +
                        std::string(path),
                    "unknown_route");
  }
  if (!Allows(*match.route, head.method())) {
    return MakeError(405,
                     "method " + std::string(head.method_string()) + " is not allowed on " +
                         std::string(path),
                     "invalid_request_error", "", "method_not_allowed");
  }
  if (match.route->needs_key && !Authorized(head)) return Unauthorized();
  if (context_.draining.load(std::memory_order_relaxed)) {
    keep_alive_ = false;
    return MakeError(503, "the gateway is shutting down; retry (another replica answers)",
                     "server_error", "", "shutting_down");
  }
  return std::nullopt;
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
  const uint64_t round = ++watch_round_;
  // Runs on the socket's executor, the connection's strand.
  stream_.async_read_some(
      buffer_.prepare(4096),
      [self = shared_from_this(), events, round](const beast::error_code& error, size_t bytes) {
        self->watching_ = false;
        if (!error) {
          self->buffer_.commit(bytes);  // the next request, sent early: kept for the parser
        } else if (!self->stop_requested_) {
          self->keep_alive_ = false;
          // The end of the client's stream is a close or a half-close (shutdown(SHUT_WR)
          // after the request, still reading): on plain HTTP/1.1 a probe tells which. Over
          // TLS or HTTP/1.0 (no interim responses) it counts as gone.
          if (error == asio::error::eof && !self->stream_.is_tls() &&
              self->request_version_ >= 11) {
            self->ProbeHalfClosed(events, round);
          } else {
            UpstreamEvent gone;
            gone.kind = UpstreamEvent::Kind::kClientGone;
            events->PushOnStrand(std::move(gone));
          }
        }
        self->watch_done_.cancel();
      });
}

void Connection::ProbeHalfClosed(std::shared_ptr<EventQueue> events, uint64_t round) {
  if (stop_requested_ || round != watch_round_) return;
  // Once the response began its own writes find a closed client; before, nothing but an
  // interim response may go out.
  if (last_status_ != 0) return;
  if (!stream_.ProbePeer(kInterimResponse)) {
    UpstreamEvent gone;
    gone.kind = UpstreamEvent::Kind::kClientGone;
    events->PushOnStrand(std::move(gone));
    return;
  }
  probe_timer_.expires_after(kHalfClosedProbeInterval);
  probe_timer_.async_wait(
      [self = shared_from_this(), events, round](const beast::error_code& error) {
        if (!error) self->ProbeHalfClosed(events, round);
      });
}

asio::awaitable<void> Connection::StopWatching() {
  stop_requested_ = true;
  probe_timer_.cancel();
  if (!watching_) co_return;
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
