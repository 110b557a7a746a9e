#include "server/grpc/grpc_listener.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

namespace tokenmill::server {
namespace {

// How often the loop looks at its stop flag, and waits after a failed accept before the
// next (no descriptor left: one may free up at any time, and spinning would not help).
constexpr int kPollMs = 100;
constexpr auto kRetryAfterFailure = std::chrono::milliseconds(100);
// Descriptors kept free for what a connection needs inside gRPC once handed over: gRPC 1.51's
// paths for a descriptor it cannot get are unsafe (under UBSan: a call through a freed
// shared_ptr control block), so a connection that would leave fewer is closed at once.
constexpr int kDescriptorReserve = 32;

// The lowest descriptor number that leaves fewer than kDescriptorReserve free (descriptors
// are handed out lowest first, so the number of a new one says how many are left below the
// limit); no limit: never.
int ReserveStart() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return INT32_MAX;
  return static_cast<int>(limit.rlim_cur) - kDescriptorReserve;
}

int BoundPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  return ntohs(address.ss_family == AF_INET6
                   ? reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port
                   : reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

}  // namespace

StatusOr<std::unique_ptr<GrpcListener>> GrpcListener::Bind(const std::string& host, int port) {
  // IPv6 literals in brackets, as gRPC writes addresses.
  const bool ipv6 = host.find(':') != std::string::npos;
  const std::string where = (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int error = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); error != 0) {
    return InvalidArgumentError("--host '" + host + "': " + gai_strerror(error));
  }
  std::string failure = "no address";
  int fd = -1;
  for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // past TIME_WAIT only
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      failure = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return UnavailableError("cannot listen on " + where +
                            ": is the port taken? choose another --port (" + failure + ")");
  }
  return std::unique_ptr<GrpcListener>(new GrpcListener(fd, BoundPort(fd)));
}

void GrpcListener::Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor) {
  acceptor_ = std::move(acceptor);
  thread_ = std::thread([this] { AcceptLoop(); });
}

GrpcListener::~GrpcListener() {
  stopping_.store(true);
  if (thread_.joinable()) thread_.join();
  close(fd_);
}

void GrpcListener::AcceptLoop() {
  const int reserve_start = ReserveStart();
  bool failing = false;
  while (!stopping_.load()) {
    pollfd listening{fd_, POLLIN, 0};
    if (poll(&listening, 1, kPollMs) <= 0) continue;
    const int connection = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (connection < 0 && (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)) continue;
    if (connection < 0 || connection >= reserve_start) {
      const std::string why = connection < 0 ? std::strerror(errno)
                                             : "fewer than " + std::to_string(kDescriptorReserve) +
                                                   " descriptors left (RLIMIT_NOFILE)";
      if (connection >= 0) close(connection);
      if (!failing) {
        spdlog::warn("gRPC port: accept failed: {}; retrying every {} ms", why,
                     kRetryAfterFailure.count());
        failing = true;
      }
      std::this_thread::sleep_for(kRetryAfterFailure);
      continue;
    }
    if (failing) spdlog::info("gRPC port: accepting again");
    failing = false;
    const int one = 1;
    setsockopt(connection, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
    params.listener_fd = fd_;
    params.fd = connection;  // gRPC's from here on, closed by it
    acceptor_->HandleNewConnection(&params);
  }
}

}  // namespace tokenmill::server
