#include "gateway/http/client_stream.h"

#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>

namespace tokenmill::gateway {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

// A client that opens TCP but never finishes the handshake holds a coroutine this long.
constexpr auto kHandshakeTimeout = std::chrono::seconds(30);
// close_notify waits for the client's answer no longer than this before the TCP close.
constexpr auto kTlsShutdownTimeout = std::chrono::seconds(2);

}  // namespace

StreamDeadline::StreamDeadline(ClientStream& stream, std::chrono::steady_clock::duration timeout)
    : timer_(stream.get_executor()),
      done_(std::make_shared<bool>(false)),
      expired_(std::make_shared<bool>(false)) {
  timer_.expires_after(timeout);
  // The handler may run after this object is gone (cancelled): `done` says so.
  timer_.async_wait(
      [&stream, done = done_, expired = expired_](const boost::system::error_code& error) {
        if (error || *done) return;
        *expired = true;
        stream.Cancel();
      });
}

StreamDeadline::~StreamDeadline() {
  *done_ = true;
  timer_.cancel();
}

StatusOr<std::unique_ptr<ssl::context>> MakeServerTlsContext(const std::string& cert_file,
                                                             const std::string& key_file,
                                                             const std::string& client_ca_file) {
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                       ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  boost::system::error_code error;
  context->use_certificate_chain_file(cert_file, error);
  if (error) {
    return InvalidArgumentError("--tls-cert '" + cert_file +
                                "' is not a PEM certificate chain: " + error.message());
  }
  context->use_private_key_file(key_file, ssl::context::pem, error);
  if (error) {
    return InvalidArgumentError("--tls-key '" + key_file +
                                "' is not the PEM private key of --tls-cert: " + error.message());
  }
  if (!client_ca_file.empty()) {
    context->load_verify_file(client_ca_file, error);
    if (error) {
      return InvalidArgumentError("--tls-client-ca '" + client_ca_file +
                                  "' is not a PEM CA certificate: " + error.message());
    }
    context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return context;
}

ClientStream::ClientStream(tcp::socket socket, ssl::context* tls) : socket_(std::move(socket)) {
  if (tls != nullptr) tls_.emplace(socket_, *tls);
}

asio::awaitable<bool> ClientStream::Handshake() {
  if (!tls_) co_return true;
  boost::system::error_code error;
  {
    StreamDeadline deadline(*this, kHandshakeTimeout);
    co_await tls_->async_handshake(ssl::stream_base::server,
                                   asio::redirect_error(asio::use_awaitable, error));
  }
  // A plain-HTTP client on the HTTPS port, an unknown CA or no client certificate: the
  // client learns it from the handshake, we log it only for debugging.
  if (error) spdlog::debug("TLS handshake failed: {}", error.message());
  co_return !error;
}

void ClientStream::Cancel() {
  boost::system::error_code ignored;
  socket_.cancel(ignored);
}

asio::awaitable<void> ClientStream::ShutdownSend() {
  boost::system::error_code ignored;
  if (tls_) {
    StreamDeadline deadline(*this, kTlsShutdownTimeout);
    co_await tls_->async_shutdown(asio::redirect_error(asio::use_awaitable, ignored));
  }
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
}

bool ClientStream::ProbePeer(std::string_view bytes) {
  if (tls_) return true;
  const int fd = socket_.native_handle();
  // A reset from the client (the answer to an earlier probe) closed the socket.
  tcp_info info{};
  socklen_t info_size = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_size) == 0 &&
      info.tcpi_state == TCP_CLOSE) {
    return false;
  }
  int unacknowledged = 0;
  if (ioctl(fd, SIOCOUTQ, &unacknowledged) != 0 || unacknowledged != 0) return true;
  // An empty send queue takes a few bytes whole. MSG_NOSIGNAL: a reset peer is EPIPE, not
  // SIGPIPE.
  const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent >= 0) return static_cast<size_t>(sent) == bytes.size();
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

void ClientStream::Close() {
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace tokenmill::gateway
