// A small HTTP server for Prometheus: GET /metrics answers the text a callback renders, and
// any further pages the same way (GET /health, GET /kv_events/state with
// --kv-events-endpoint), and admin actions behind the api key (POST /kv_cache/purge,
// /v1/load_lora_adapter). One I/O thread serves every connection with coroutines; /metrics
// never blocks on the engine (its callback reads snapshots). Hostile clients are bounded: a
// request must arrive (and its answer leave) within a deadline, headers and body are capped,
// and past a number of open connections new ones are closed at once, so idle sockets cannot
// use up the process's descriptors (which gRPC's listener needs too).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tokenmill::server {

// What clients may hold of the metrics server.
struct MetricsHttpLimits {
  std::string api_key;  // what pages with needs_api_key ask for; empty: nothing asked
  size_t max_connections = 64;  // open at once; more are closed as they arrive
  // From accepting a connection to its answer written: slow or idle clients are cut off.
  std::chrono::milliseconds request_timeout{10000};
  size_t max_header_bytes = 8 * 1024;
  size_t max_body_bytes = 4096;  // scrapes send none; an admin action's JSON is small
};

class MetricsHttpServer {
 public:
  // What an admin action answers: its HTTP status and body.
  struct ActionResult {
    int status = 200;
    std::string body;
  };
  struct Page {
    std::string path;  // e.g. "/metrics"
    std::string content_type;
    // The GET answer, from the request's query (after '?'; empty without one).
    std::function<std::string(std::string_view query)> render;
    // Prompt data (token ids): with MetricsHttpLimits::api_key set, the request must carry
    // "authorization: Bearer <key>" (401 otherwise).
    bool needs_api_key = false;
    // When set and false, the page answers 503 (a health check while the model loads).
    std::function<bool()> available;
    // Set: an admin action answering POST (not GET), called with the request's query (after
    // '?') and body; render is unused. It needs the api key, and answers 403 when the server
    // has none.
    std::function<ActionResult(std::string_view query, std::string_view body)> post;
  };

  // Binds host:port (port 0: any free port) and starts serving the pages. Unavailable when
  // the port cannot be bound (the message names it).
  static StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                            std::vector<Page> pages,
                                                            MetricsHttpLimits limits = {});
  // Stops serving and joins the I/O thread.
  ~MetricsHttpServer();

  int port() const;

 private:
  struct Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenmill::server
