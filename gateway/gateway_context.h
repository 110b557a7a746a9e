// What every connection and route handler of the gateway shares: its flags, the API keys and
// the tenants' limits, the backend pool, the metrics, the Responses API's store, the open
// Generate calls, the memory of bodies being read and which ignored fields were logged. One per
// gateway, made by HttpGateway, living as long as it; the handlers reach it through their
// HttpExchange.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "gateway/api/ignored_fields.h"
#include "gateway/api/responses/response_store.h"
#include "gateway/backends/backend_pool.h"
#include "gateway/backends/upstream_call.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_options.h"
#include "gateway/http/body_budget.h"
#include "gateway/tenants/key_store.h"
#include "gateway/tenants/tenant_limiter.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace tokenmill::gateway {

struct GatewayContext {
  GatewayContext(const GatewayOptions& o, int64_t max_body, BackendPool& p, GatewayMetrics& m,
                 const KeyStore& k, ResponseStore::Limits store_limits,
                 size_t body_buffer_bytes)
      : options(o),
        max_body_bytes(max_body),
        pool(p),
        metrics(m),
        keys(k),
        limiter({.max_concurrent = o.tenant_max_concurrent,
                 .tokens_per_minute = o.tenant_tokens_per_minute}),
        responses(store_limits),
        body_reads(body_buffer_bytes) {}

  // A fresh id: "<prefix>-<32 hex digits>", 128 bits from the CSPRNG. Stored responses are
  // read by id: an id must not be guessable from another one.
  std::string NewId(std::string_view prefix);

  // The tenant a backend call names (x-tokenmill-tenant): the tenant's, where the calls carry
  // the servers' key (the servers believe it only then); else "" (none sent).
  std::string_view TenantForBackend(const Tenant& tenant) const;

  const GatewayOptions& options;
  int64_t max_body_bytes;
  BackendPool& pool;
  GatewayMetrics& metrics;
  const KeyStore& keys;
  TenantLimiter limiter;
  boost::asio::ssl::context* tls = nullptr;  // HTTPS (--tls-cert), else null: plain HTTP
  CallRegistry calls;
  ResponseStore responses;
  BodyBudget body_reads;  // the request bodies being received (--body-buffer-size)
  // SIGTERM: new requests get 503 while running ones finish, until --drain-timeout, after
  // which the calls still open are cancelled and end with a 503 `aborted` error.
  std::atomic<bool> draining{false};
  std::atomic<bool> drain_expired{false};
  IgnoredFieldLog ignored_fields;  // fields accepted without effect, each logged once
};

}  // namespace tokenmill::gateway
