// tokenmill-gateway: the OpenAI HTTP API in front of one or more tokenmill-servers.
//
// Life: listen at once (/health answers 503 until a backend passes its health check) ->
// serve -> SIGTERM/SIGINT -> stop accepting, cancel open backend calls -> exit 0.
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

namespace tokenmill::gateway {
namespace {

// Blocks SIGTERM/SIGINT in every thread (call before starting any) and waits for one.
class Signals {
 public:
  Signals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }
  const char* Wait() {
    int signal = 0;
    sigwait(&set_, &signal);
    return signal == SIGINT ? "SIGINT" : "SIGTERM";
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
                   options.affinity_max_imbalance, options.served_model_name);
  StatusOr<std::unique_ptr<HttpGateway>> gateway =
      HttpGateway::Start(options, *limits, pool, metrics);
  if (!gateway.ok()) {
    spdlog::error("{}", gateway.status().message());
    return 1;
  }
  spdlog::info("listening on {}://{}:{} (OpenAI API) for {} backend(s){}",
               options.tls_cert.empty() ? "http" : "https", options.host, (*gateway)->port(),
               options.backends.size(),
               options.api_key.empty() ? "" : "; API key required");
  const char* signal_name = signals.Wait();
  spdlog::info("{}: stopping", signal_name);
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
