#include "gateway/gateway_options.h"

#include "common/byte_size.h"
#include "common/env_name.h"

namespace tokenmill::gateway {

std::string GatewayEnvName(std::string_view flag) {
  return EnvNameOfFlag("TOKENMILL_GATEWAY_", flag);
}

namespace {

template <typename T>
CLI::Option* AddOption(CLI::App& app, const std::string& flag, T& value, const std::string& help) {
  return app.add_option(flag, value, help)->envname(GatewayEnvName(flag))->capture_default_str();
}

// Reading request bodies (issue 35): how long one may take, and the memory of all being read.
void AddBodyReadingOptions(CLI::App& app, GatewayOptions& o) {
  AddOption(app, "--body-timeout", o.body_timeout_seconds,
            "seconds a request body may take to arrive after its head; later: 408 and the "
            "connection closes")
      ->check(CLI::Range(0.1, 3600.0));
  AddOption(app, "--body-buffer-size", o.body_buffer_size,
            "memory for the request bodies being received at once, across all connections "
            "(\"64MiB\", at least --max-body-size); a body that does not fit gets 503");
}

// The checked --body-buffer-size, into `limits` (whose max_body_bytes is set).
Status ResolveBodyReadingLimits(const GatewayOptions& options, GatewayLimits& limits) {
  StatusOr<int64_t> buffer = ParseByteSize(options.body_buffer_size);
  if (!buffer.ok()) {
    return InvalidArgumentError("--body-buffer-size: " + buffer.status().message());
  }
  if (*buffer < limits.max_body_bytes) {
    return InvalidArgumentError("--body-buffer-size (" + options.body_buffer_size +
                                ") must be at least --max-body-size (" + options.max_body_size +
                                "): a body that large could never be read");
  }
  limits.body_buffer_bytes = *buffer;
  return OkStatus();
}

}  // namespace

void AddGatewayOptions(CLI::App& app, GatewayOptions& o) {
  AddOption(app, "--host", o.host, "address to listen on");
  AddOption(app, "--port", o.port, "HTTP port (0: any free port)")->check(CLI::Range(0, 65535));
  AddOption(app, "--backend", o.backends,
            "tokenmill-server gRPC address host:port (repeatable; the variable takes a "
            "comma-separated list)")
      ->required()
      ->delimiter(',');
  // No capture_default_str: the key must never show in --help.
  app.add_option("--api-key", o.api_key,
                 "clients must send 'Authorization: Bearer <key>' (empty: no key)")
      ->envname(GatewayEnvName("--api-key"));
  AddOption(app, "--api-key-file", o.api_key_file,
            "keys of several tenants, one 'KEY TENANT [priority]' a line ('priority': the key "
            "may ask for a priority < 0); re-read on SIGHUP");
  AddOption(app, "--tenant-max-concurrent", o.tenant_max_concurrent,
            "requests one tenant may have in flight (0: no limit); more get 429")
      ->check(CLI::NonNegativeNumber);
  AddOption(app, "--tenant-tokens-per-minute", o.tenant_tokens_per_minute,
            "prompt + generated tokens one tenant may use a minute (0: no limit); more get 429 "
            "with Retry-After")
      ->check(CLI::NonNegativeNumber);
  AddOption(app, "--tls-cert", o.tls_cert,
            "PEM certificate chain: serve HTTPS (with --tls-key)")
      ->check(CLI::ExistingFile);
  AddOption(app, "--tls-key", o.tls_key, "PEM private key of --tls-cert")
      ->check(CLI::ExistingFile);
  AddOption(app, "--tls-client-ca", o.tls_client_ca,
            "PEM CA certificates: clients must present a certificate signed by one (mutual TLS)")
      ->check(CLI::ExistingFile);
  AddOption(app, "--backend-tls-ca", o.backend_tls_ca,
            "PEM CA certificates: the backends speak TLS, their certificates signed by one")
      ->check(CLI::ExistingFile);
  AddOption(app, "--backend-tls-cert", o.backend_tls_cert,
            "PEM client certificate for backends with mutual TLS (with --backend-tls-key)")
      ->check(CLI::ExistingFile);
  AddOption(app, "--backend-tls-key", o.backend_tls_key, "PEM private key of --backend-tls-cert")
      ->check(CLI::ExistingFile);
  AddOption(app, "--backend-tls-server-name", o.backend_tls_server_name,
            "the name the backends' certificates carry (default: each address's host)");
  app.add_option("--backend-api-key", o.backend_api_key,
                 "the backends' --api-key, sent on every call (empty: none)")
      ->envname(GatewayEnvName("--backend-api-key"));
  AddOption(app, "--max-body-size", o.max_body_size,
            "largest request body (\"8MiB\"); larger ones get 413");
  AddOption(app, "--io-threads", o.io_threads, "HTTP I/O threads")->check(CLI::Range(1, 64));
  AddOption(app, "--health-interval", o.health_interval_seconds,
            "seconds between health checks of each backend")
      ->check(CLI::Range(0.05, 3600.0));
  AddOption(app, "--drain-timeout", o.drain_timeout_seconds,
            "seconds SIGTERM/SIGINT lets running requests and streams finish (new ones get 503)")
      ->check(CLI::Range(0.0, 3600.0));
  AddOption(app, "--affinity-max-imbalance", o.affinity_max_imbalance,
            "in-flight requests by which the affinity backend may exceed the least-loaded one")
      ->check(CLI::NonNegativeNumber);
  AddOption(app, "--served-model-name", o.served_model_names,
            "the names clients call every backend's model by, replacing the backends' own "
            "(default: each backend's --served-model-name); one or more (a b, or a,b as in the "
            "variable)")
      ->delimiter(',');
  AddOption(app, "--response-store-size", o.response_store_size,
            "memory for the conversations of stored Responses (previous_response_id; \"0\": "
            "none kept)");
  AddOption(app, "--response-store-ttl", o.response_store_ttl_seconds,
            "seconds a stored Response can be continued")
      ->check(CLI::PositiveNumber);
  AddOption(app, "--log-level", o.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  AddBodyReadingOptions(app, o);
}

StatusOr<GatewayLimits> ResolveGatewayLimits(const GatewayOptions& options) {
  StatusOr<int64_t> body = ParseByteSize(options.max_body_size);
  if (!body.ok()) return InvalidArgumentError("--max-body-size: " + body.status().message());
  if (*body <= 0) return InvalidArgumentError("--max-body-size must be positive");
  StatusOr<int64_t> store = ParseByteSize(options.response_store_size);
  if (!store.ok()) {
    return InvalidArgumentError("--response-store-size: " + store.status().message());
  }
  if (*store < 0) return InvalidArgumentError("--response-store-size must not be negative");
  for (const std::string& backend : options.backends) {
    const size_t colon = backend.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == backend.size()) {
      return InvalidArgumentError("--backend '" + backend + "' is not host:port");
    }
  }
  GatewayLimits limits;
  limits.max_body_bytes = *body;
  limits.response_store_bytes = *store;
  TM_RETURN_IF_ERROR(ResolveBodyReadingLimits(options, limits));
  return limits;
}

}  // namespace tokenmill::gateway
