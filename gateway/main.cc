// tokenmill-gateway: the OpenAI HTTP API in front of one or more tokenmill-servers.
//
// Life: listen at once (/health answers 503 until a backend passes its health check) ->
// serve (SIGHUP: re-read --api-key-file) -> SIGTERM/SIGINT -> stop accepting (new requests on
// open connections: 503) and let running requests finish, up to --drain-timeout -> end the rest
// with their API's error event -> exit 0.
#include <spdlog/spdlog.h>

#include <csignal>
#include <iostream>
#include <memory>

#include "common/logging.h"
#include "gateway/backends/backend_channel.h"
#include "gateway/backends/backend_pool.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_options.h"
#include "gateway/http_gateway.h"
#include "gateway/tenants/key_store.h"

namespace tokenmill::gateway {
namespace {

// Blocks SIGTERM, SIGINT and SIGHUP in every thread (call before starting any) and waits for
// one.
class Signals {
 public:
  Signals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }
  int Wait() {
    int signal = 0;
    sigwait(&set_, &signal);
    return signal;
  }

 private:
  sigset_t set_;
};

int Run(const GatewayOptions& options) {
  StatusOr<GatewayLimits> limits = ResolveGatewayLimits(options);
  if (!limits.ok()) {
    spdlog::error("{}", limits.status().message());
    return 1;
  }
  StatusOr<std::unique_ptr<KeyStore>> keys = KeyStore::FromOptions(options);
  if (!keys.ok()) {
    spdlog::error("{}", keys.status().message());
    return 1;
  }
  Signals signals;  // before gRPC starts threads
  StatusOr<BackendSecurity> security = MakeBackendSecurity(options);
  if (!security.ok()) {
    spdlog::error("{}", security.status().message());
    return 1;
  }
  GatewayMetrics metrics;
  BackendPool pool(options.backends, *security,
                   std::chrono::milliseconds(
                       static_cast<int64_t>(options.health_interval_seconds * 1000.0)),
                   options.affinity_max_imbalance, options.served_model_names);
  StatusOr<std::unique_ptr<HttpGateway>> gateway =
      HttpGateway::Start(options, *limits, pool, metrics, **keys);
  if (!gateway.ok()) {
    spdlog::error("{}", gateway.status().message());
    return 1;
  }
  spdlog::info("listening on {}://{}:{} (OpenAI API) for {} backend(s){}",
               options.tls_cert.empty() ? "http" : "https", options.host, (*gateway)->port(),
               options.backends.size(),
               (*keys)->open() ? ""
                               : "; API key required (" + std::to_string((*keys)->size()) +
                                     " key(s))");
  int signal = signals.Wait();
  for (; signal == SIGHUP; signal = signals.Wait()) {
    if (options.api_key_file.empty()) {
      spdlog::info("SIGHUP: no --api-key-file to re-read");
    } else if (const Status reloaded = (*keys)->Reload(); !reloaded.ok()) {
      spdlog::error("SIGHUP: keeping the previous keys: {}", reloaded.message());
    } else {
      spdlog::info("SIGHUP: re-read {}: {} key(s)", options.api_key_file, (*keys)->size());
    }
  }
  spdlog::info("{}: stopping", signal == SIGINT ? "SIGINT" : "SIGTERM");
  (*gateway)->Drain(std::chrono::milliseconds(
      static_cast<int64_t>(options.drain_timeout_seconds * 1000.0)));
  gateway->reset();
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace tokenmill::gateway

int main(int argc, char** argv) {
  using namespace tokenmill;
  gateway::GatewayOptions options;
  CLI::App app{"tokenmill-gateway: the OpenAI-compatible HTTP API over tokenmill-servers"};
  gateway::AddGatewayOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  if (const Status s = SetupLogging(options.log_level); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  return gateway::Run(options);
}
