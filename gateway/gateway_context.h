// What every connection and route handler of the gateway shares: its flags, the backend pool,
// the metrics, the Responses API's store, the open Generate calls, the id counter and the
// memory of bodies being read. One per
// gateway, made by HttpGateway, living as long as it; the handlers reach it through their
// HttpExchange.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "gateway/api/responses/response_store.h"
#include "gateway/backends/backend_pool.h"
#include "gateway/backends/upstream_call.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_options.h"
#include "gateway/http/body_budget.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace tokenmill::gateway {

struct GatewayContext {
  GatewayContext(const GatewayOptions& o, int64_t max_body, BackendPool& p, GatewayMetrics& m,
                 std::string prefix, ResponseStore::Limits store_limits,
                 size_t body_buffer_bytes)
      : options(o),
        max_body_bytes(max_body),
        pool(p),
        metrics(m),
        id_prefix(std::move(prefix)),
        responses(store_limits),
        body_reads(body_buffer_bytes) {}

  // A fresh response id: "<prefix>-<process random><counter>".
  std::string NewId(std::string_view prefix);

  const GatewayOptions& options;
  int64_t max_body_bytes;
  BackendPool& pool;
  GatewayMetrics& metrics;
  std::string id_prefix;  // random per process: response ids do not repeat across restarts
  boost::asio::ssl::context* tls = nullptr;  // HTTPS (--tls-cert), else null: plain HTTP
  std::atomic<uint64_t> next_id{0};
  CallRegistry calls;
  ResponseStore responses;
  BodyBudget body_reads;  // the request bodies being received (--body-buffer-size)
};

}  // namespace tokenmill::gateway
