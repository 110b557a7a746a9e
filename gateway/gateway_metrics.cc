#include "gateway/gateway_metrics.h"

#include <array>
#include <sstream>

namespace tokenmill::gateway {

namespace {

constexpr std::array<double, 14> kLatencyBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                   1,     2.5,  5,     10,   30,  60,  120};

std::string Escape(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Number(double value) {
  std::ostringstream s;
  s.precision(17);
  s << value;
  return s.str();
}

}  // namespace

void GatewayMetrics::RequestFinished(const std::string& route, int status, double seconds) {
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  ++requests_[{route, status}];
  Latency& latency = latency_[route];
  if (latency.counts.empty()) latency.counts.assign(kLatencyBounds.size() + 1, 0);
  size_t bucket = 0;
  while (bucket < kLatencyBounds.size() && seconds > kLatencyBounds[bucket]) ++bucket;
  ++latency.counts[bucket];
  latency.sum += seconds;
  ++latency.count;
}

void GatewayMetrics::ObserveRequestBuffered(size_t count) {
  uint64_t seen = max_request_buffered_.load(std::memory_order_relaxed);
  while (count > seen && !max_request_buffered_.compare_exchange_weak(
                             seen, count, std::memory_order_relaxed)) {
  }
}

std::string GatewayMetrics::Render(const BackendPool& pool) const {
  std::ostringstream out;
  out << "# HELP tokenmill_gateway:requests_total HTTP requests answered, by route and status.\n"
         "# TYPE tokenmill_gateway:requests_total counter\n";
  std::lock_guard lock(mutex_);
  for (const auto& [key, count] : requests_) {
    out << "tokenmill_gateway:requests_total{route=\"" << Escape(key.first) << "\",status=\""
        << key.second << "\"} " << count << "\n";
  }
  out << "# HELP tokenmill_gateway:request_duration_seconds Time from a request's headers to "
         "the end of its response, by route.\n"
         "# TYPE tokenmill_gateway:request_duration_seconds histogram\n";
  for (const auto& [route, latency] : latency_) {
    uint64_t cumulative = 0;
    const std::string label = "route=\"" + Escape(route) + "\"";
    for (size_t i = 0; i < kLatencyBounds.size(); ++i) {
      cumulative += latency.counts[i];
      out << "tokenmill_gateway:request_duration_seconds_bucket{" << label << ",le=\""
          << Number(kLatencyBounds[i]) << "\"} " << cumulative << "\n";
    }
    out << "tokenmill_gateway:request_duration_seconds_bucket{" << label << ",le=\"+Inf\"} "
        << latency.count << "\n";
    out << "tokenmill_gateway:request_duration_seconds_sum{" << label << "} "
        << Number(latency.sum) << "\n";
    out << "tokenmill_gateway:request_duration_seconds_count{" << label << "} "
        << latency.count << "\n";
  }
  out << "# HELP tokenmill_gateway:requests_in_flight HTTP requests being answered.\n"
         "# TYPE tokenmill_gateway:requests_in_flight gauge\n"
         "tokenmill_gateway:requests_in_flight "
      << in_flight_.load(std::memory_order_relaxed) << "\n";
  out << "# HELP tokenmill_gateway:buffered_responses Backend responses read and not yet "
         "written to their clients.\n"
         "# TYPE tokenmill_gateway:buffered_responses gauge\n"
         "tokenmill_gateway:buffered_responses "
      << buffered_.load(std::memory_order_relaxed) << "\n";
  out << "# HELP tokenmill_gateway:max_request_buffered_responses The most backend responses "
         "one request has held at once (bounded by backpressure).\n"
         "# TYPE tokenmill_gateway:max_request_buffered_responses gauge\n"
         "tokenmill_gateway:max_request_buffered_responses "
      << max_request_buffered_.load(std::memory_order_relaxed) << "\n";
  out << "# HELP tokenmill_gateway:upstream_read_pauses_total Times a Generate stream stopped "
         "reading because its client had not taken the responses already read.\n"
         "# TYPE tokenmill_gateway:upstream_read_pauses_total counter\n"
         "tokenmill_gateway:upstream_read_pauses_total "
      << read_pauses_.load(std::memory_order_relaxed) << "\n";
  out << "# HELP tokenmill_gateway:backend_healthy 1 when the backend passes its health check.\n"
         "# TYPE tokenmill_gateway:backend_healthy gauge\n";
  for (const auto& backend : pool.backends()) {
    out << "tokenmill_gateway:backend_healthy{backend=\"" << Escape(backend->address())
        << "\"} " << (backend->healthy() ? 1 : 0) << "\n";
  }
  out << "# HELP tokenmill_gateway:backend_in_flight Generate calls open on the backend.\n"
         "# TYPE tokenmill_gateway:backend_in_flight gauge\n";
  for (const auto& backend : pool.backends()) {
    out << "tokenmill_gateway:backend_in_flight{backend=\"" << Escape(backend->address())
        << "\"} " << backend->in_flight() << "\n";
  }
  out << "# HELP tokenmill_gateway:backend_requests_total Generate calls sent to the backend.\n"
         "# TYPE tokenmill_gateway:backend_requests_total counter\n";
  for (const auto& backend : pool.backends()) {
    out << "tokenmill_gateway:backend_requests_total{backend=\"" << Escape(backend->address())
        << "\"} " << backend->requests() << "\n";
  }
  return out.str();
}

}  // namespace tokenmill::gateway
