// tokenmill-gateway's flags. Each is also settable by an environment variable
// TOKENMILL_GATEWAY_<NAME> (--max-body-size: TOKENMILL_GATEWAY_MAX_BODY_SIZE); a flag on the
// command line wins. --backend is repeatable; its variable takes a comma-separated list.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tokenmill::gateway {

struct GatewayOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (logged)
  std::vector<std::string> backends;  // host:port of tokenmill-servers
  std::string api_key;                // empty: no authentication (unless api_key_file)
  // One "KEY TENANT [priority]" a line (gateway/tenants/key_table.h); re-read on SIGHUP.
  std::string api_key_file;
  // Per tenant (0: no limit): requests in flight, and prompt + generated tokens a minute.
  int tenant_max_concurrent = 0;
  int64_t tenant_tokens_per_minute = 0;
  // HTTPS when a certificate is given (PEM, with its key); clients must then present a
  // certificate signed by tls_client_ca when one is given (mutual TLS).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // To the backends: TLS when a CA is given (a client certificate for mutual TLS), and the
  // servers' --api-key.
  std::string backend_tls_ca;
  std::string backend_tls_cert;
  std::string backend_tls_key;
  std::string backend_tls_server_name;
  std::string backend_api_key;
  std::string max_body_size = "8MiB";
  int io_threads = 2;
  double health_interval_seconds = 1.0;
  // SIGTERM/SIGINT: seconds running requests and streams may take to finish before they are
  // ended with their API's error event.
  double drain_timeout_seconds = 30.0;
  // A backend this many in-flight requests busier than the least-loaded one loses its
  // affinity requests to the least-loaded one.
  int affinity_max_imbalance = 16;
  // Empty: each backend's own names (its --served-model-name). Given: the names of every
  // backend's model instead, for gateways whose servers cannot be renamed.
  std::vector<std::string> served_model_names;
  // Conversations kept for the Responses API's previous_response_id: this many bytes at most
  // ("0": none kept), each for this many seconds.
  std::string response_store_size = "64MiB";
  int response_store_ttl_seconds = 3600;
  std::string log_level = "info";
  // Reading request bodies: a body not complete this many seconds after its head gets 408;
  // the bodies being received at once hold at most this many bytes (over it: 503).
  double body_timeout_seconds = 30.0;
  std::string body_buffer_size = "64MiB";
};

// Registers every flag on `app`, bound to `options`, with its TOKENMILL_GATEWAY_ variable.
void AddGatewayOptions(CLI::App& app, GatewayOptions& options);

// "--max-body-size" -> "TOKENMILL_GATEWAY_MAX_BODY_SIZE".
std::string GatewayEnvName(std::string_view flag);

// The checked values the flags ask for (InvalidArgument naming the flag otherwise).
struct GatewayLimits {
  int64_t max_body_bytes = 0;
  int64_t response_store_bytes = 0;
  int64_t body_buffer_bytes = 0;  // at least max_body_bytes
};
StatusOr<GatewayLimits> ResolveGatewayLimits(const GatewayOptions& options);

}  // namespace tokenmill::gateway
