// tokenmill-gateway's HTTP/1.1 front: OpenAI's /v1/completions, /v1/chat/completions,
// /v1/embeddings and /v1/models, plus /v1/rerank, /tokenize, /detokenize, /health and /metrics (the
// whole list: routes.cc). Boost.Beast on a small fixed pool of I/O threads; each connection is one
// coroutine on its own strand (keep-alive, no thread per connection), and its backend calls report
// back to that strand.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "gateway/backends/backend_pool.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_options.h"
#include "gateway/tenants/key_store.h"

namespace tokenmill::gateway {

class HttpGateway {
 public:
  // Binds --host:--port and starts the I/O threads. Unavailable when the port cannot be
  // bound. `pool`, `metrics` and `keys` must outlive the gateway.
  static StatusOr<std::unique_ptr<HttpGateway>> Start(const GatewayOptions& options,
                                                      const GatewayLimits& limits,
                                                      BackendPool& pool, GatewayMetrics& metrics,
                                                      const KeyStore& keys);
  // Stops accepting (new connections are refused, new requests on open ones get 503) and
  // waits up to `timeout` for the running requests and streams to finish; then cancels the
  // rest, which end with their API's error (a 503 `aborted`, an error event in a stream).
  void Drain(std::chrono::milliseconds timeout);
  // Stops accepting, cancels the backend calls of open requests and joins the I/O threads.
  ~HttpGateway();

  int port() const;

 private:
  struct Impl;
  explicit HttpGateway(std::unique_ptr<Impl> impl);
  void CloseAcceptor();  // stops new connections; Drain and the destructor both may
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenmill::gateway
