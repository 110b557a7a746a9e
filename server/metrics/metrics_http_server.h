// A small HTTP server for Prometheus: GET /metrics answers the text a callback renders, and
// any further pages the same way (GET /kv_events/state with --kv-events-endpoint). One I/O
// thread serves every connection with coroutines; /metrics never blocks on the engine (its
// callback reads snapshots).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tokenmill::server {

class MetricsHttpServer {
 public:
  struct Page {
    std::string path;  // e.g. "/metrics"
    std::string content_type;
    std::function<std::string()> render;
  };

  // Binds host:port (port 0: any free port) and starts serving the pages. Unavailable when
  // the port cannot be bound (the message names it).
  static StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                            std::vector<Page> pages);
  // Stops serving and joins the I/O thread.
  ~MetricsHttpServer();

  int port() const;

 private:
  struct Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenmill::server
