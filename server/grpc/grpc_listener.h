// The gRPC port's listening socket and accept loop, ours instead of gRPC's: gRPC 1.51's own
// stops accepting for good after one failed accept4 (EMFILE, the process out of descriptors:
// "Failed accept4: Too many open files", and the port refuses every later client). Ours waits
// and retries until descriptors free up, and hands each connection to the server through
// ServerBuilder's external connection acceptor (TLS and everything else stay gRPC's).
#pragma once

#include <grpcpp/server_builder.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace tokenmill::server {

class GrpcListener {
 public:
  // Binds host:port (port 0: any free port), without SO_REUSEPORT: a port another process
  // holds is Unavailable naming it.
  static StatusOr<std::unique_ptr<GrpcListener>> Bind(const std::string& host, int port);
  // Stops accepting and closes the socket (connections already handed over stay gRPC's).
  ~GrpcListener();
  GrpcListener(const GrpcListener&) = delete;
  GrpcListener& operator=(const GrpcListener&) = delete;

  int port() const { return port_; }

  // Accepts from now on, handing every connection to `acceptor` (the started server's).
  void Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor);

 private:
  GrpcListener(int fd, int port) : fd_(fd), port_(port) {}
  void AcceptLoop();

  const int fd_;
  const int port_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace tokenmill::server
