// The byte stream of one client connection: a plain TCP socket, or TLS over one when the
// gateway serves HTTPS (--tls-cert). One type for the connection's reads and writes: it is
// an AsyncReadStream and AsyncWriteStream, so Beast's HTTP reads and writes take it as
// they take a socket.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tokenmill::gateway {

// The gateway's TLS server context from PEM files: its certificate chain and key, and, for
// mutual TLS, the CA that must have signed each client's certificate (empty: none asked).
// An error names the flag whose file is wrong.
StatusOr<std::unique_ptr<boost::asio::ssl::context>> MakeServerTlsContext(
    const std::string& cert_file, const std::string& key_file, const std::string& client_ca_file);

class ClientStream {
 public:
  using executor_type = boost::asio::ip::tcp::socket::executor_type;

  // TLS when `tls` is set (it must outlive the stream), else plain TCP.
  ClientStream(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context* tls);
  // The TLS stream refers to socket_: the stream stays where it was made.
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  executor_type get_executor() { return socket_.get_executor(); }
  bool is_tls() const { return tls_.has_value(); }

  // The TLS server handshake (nothing for plain TCP); false when it fails, after logging why.
  boost::asio::awaitable<bool> Handshake();
  // Ends every pending operation with operation_aborted.
  void Cancel();
  // After the client's end of stream: whether it still reads, found by sending `bytes` at once
  // (never blocking, never in part) where nothing sent before waits unacknowledged. A client
  // that closed its socket answers them with a reset, which fails a later probe; one that only
  // half-closed (shutdown(SHUT_WR)) takes them. False: gone. Plain TCP only; true for TLS,
  // and when the probe could not be sent now.
  bool ProbePeer(std::string_view bytes);
  // No more writes: TLS's close_notify (bounded in time), then the TCP half-close.
  boost::asio::awaitable<void> ShutdownSend();
  void Close();

  template <typename Buffers, typename Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<Token>(token));
    return socket_.async_read_some(buffers, std::forward<Token>(token));
  }
  template <typename Buffers, typename Token>
  auto async_write_some(const Buffers& buffers, Token&& token) {
    if (tls_) return tls_->async_write_some(buffers, std::forward<Token>(token));
    return socket_.async_write_some(buffers, std::forward<Token>(token));
  }

 private:
  boost::asio::ip::tcp::socket socket_;
  std::optional<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls_;
};

// While it lives, bounds the stream's operations: once `timeout` passes, they are cancelled
// (ended with operation_aborted). Both on the connection's strand.
class StreamDeadline {
 public:
  StreamDeadline(ClientStream& stream, std::chrono::steady_clock::duration timeout);
  ~StreamDeadline();
  StreamDeadline(const StreamDeadline&) = delete;
  StreamDeadline& operator=(const StreamDeadline&) = delete;

  // Whether the timeout passed (and cancelled the stream's operations).
  bool expired() const { return *expired_; }

 private:
  boost::asio::steady_timer timer_;
  std::shared_ptr<bool> done_;
  std::shared_ptr<bool> expired_;
};

}  // namespace tokenmill::gateway
