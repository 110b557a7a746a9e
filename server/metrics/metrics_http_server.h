// A small HTTP server for Prometheus: GET /metrics answers the text a callback renders.
// One I/O thread serves every connection with coroutines; nothing it does blocks on the
// engine (the callback reads snapshots).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace tokenmill::server {

class MetricsHttpServer {
 public:
  using Render = std::function<std::string()>;

  // Binds host:port (port 0: any free port) and starts serving. Unavailable when the port
  // cannot be bound (the message names it).
  static StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                            Render render);
  // Stops serving and joins the I/O thread.
  ~MetricsHttpServer();

  int port() const;

 private:
  struct Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenmill::server
