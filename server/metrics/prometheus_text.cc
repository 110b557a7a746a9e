#include "server/metrics/prometheus_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "server/metrics/vllm_metrics.h"

namespace tokenmill::server {
namespace {

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (const char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

}  // namespace

PrometheusWriter::PrometheusWriter(std::vector<std::pair<std::string, std::string>> labels) {
  for (const auto& [name, value] : labels) {
    if (!labels_.empty()) labels_ += ',';
    labels_ += name + "=\"" + EscapeLabelValue(value) + "\"";
  }
}

void PrometheusWriter::Header(std::string_view name, std::string_view help,
                              std::string_view type) {
  text_ += "# HELP ";
  text_ += name;
  text_ += ' ';
  text_ += EscapeHelp(help);
  text_ += "\n# TYPE ";
  text_ += name;
  text_ += ' ';
  text_ += type;
  text_ += '\n';
}

void PrometheusWriter::Sample(std::string_view name, std::string_view extra_label, double value) {
  text_ += name;
  if (!labels_.empty() || !extra_label.empty()) {
    text_ += '{';
    text_ += labels_;
    if (!labels_.empty() && !extra_label.empty()) text_ += ',';
    text_ += extra_label;
    text_ += '}';
  }
  text_ += ' ';
  text_ += FormatValue(value);
  text_ += '\n';
}

void PrometheusWriter::Gauge(std::string_view name, std::string_view help, double value) {
  Header(name, help, "gauge");
  Sample(name, "", value);
}

void PrometheusWriter::Counter(std::string_view name, std::string_view help, double value) {
  Header(name, help, "counter");
  Sample(name, "", value);
}

void PrometheusWriter::CounterByLabel(std::string_view name, std::string_view help,
                                      std::string_view label_name,
                                      const std::vector<std::pair<std::string, double>>& values) {
  ByLabel(name, help, "counter", label_name, values);
}

void PrometheusWriter::GaugeByLabel(std::string_view name, std::string_view help,
                                    std::string_view label_name,
                                    const std::vector<std::pair<std::string, double>>& values) {
  ByLabel(name, help, "gauge", label_name, values);
}

void PrometheusWriter::ByLabel(std::string_view name, std::string_view help,
                               std::string_view type, std::string_view label_name,
                               const std::vector<std::pair<std::string, double>>& values) {
  Header(name, help, type);
  for (const auto& [label_value, value] : values) {
    Sample(name, std::string(label_name) + "=\"" + EscapeLabelValue(label_value) + "\"", value);
  }
}

void PrometheusWriter::Histogram(std::string_view name, std::string_view help,
                                 const HistogramSnapshot& h) {
  Header(name, help, "histogram");
  const std::string bucket = std::string(name) + "_bucket";
  for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
    Sample(bucket, "le=\"" + FormatValue(h.upper_bounds[i]) + "\"",
           static_cast<double>(h.bucket_counts[i]));
  }
  Sample(bucket, "le=\"+Inf\"", static_cast<double>(h.count));
  Sample(std::string(name) + "_sum", "", h.sum);
  Sample(std::string(name) + "_count", "", static_cast<double>(h.count));
}

void PrometheusWriter::LabelledGauge(
    std::string_view name, std::string_view help,
    const std::vector<std::pair<std::string, std::string>>& gauge_labels, double value) {
  Header(name, help, "gauge");
  std::string extra;
  for (const auto& [label, label_value] : gauge_labels) {
    if (!extra.empty()) extra += ',';
    extra += label + "=\"" + EscapeLabelValue(label_value) + "\"";
  }
  Sample(name, extra, value);
}

void PrometheusWriter::Info(std::string_view name, std::string_view help,
                            const std::vector<std::pair<std::string, std::string>>& info_labels) {
  LabelledGauge(name, help, info_labels, 1);
}

// The tiers below the pool, each labelled: tier="host" (--kv-cache-host-size), tier="disk"
// (--kv-cache-dir). A figure one tier does not have is not given for it.
void RenderKvTiers(PrometheusWriter& w, const std::optional<KvHostTierStats>& host,
                   const std::optional<KvDiskTierStats>& d, int num_loading) {
  using Figure = std::optional<double>;
  const auto family = [&](bool counter, std::string_view name, std::string_view help,
                          Figure host_value, Figure disk_value) {
    std::vector<std::pair<std::string, double>> samples;
    if (host.has_value() && host_value.has_value()) samples.emplace_back("host", *host_value);
    if (d.has_value() && disk_value.has_value()) samples.emplace_back("disk", *disk_value);
    if (samples.empty()) return;
    counter ? w.CounterByLabel(name, help, "tier", samples)
            : w.GaugeByLabel(name, help, "tier", samples);
  };
  const auto gauge = [&](std::string_view name, std::string_view help, Figure host_value,
                         Figure disk_value) {
    family(false, name, help, host_value, disk_value);
  };
  const auto counter = [&](std::string_view name, std::string_view help, Figure host_value,
                           Figure disk_value) {
    family(true, name, help, host_value, disk_value);
  };
  const auto of = [](auto value) { return Figure(static_cast<double>(value)); };
  const KvHostTierStats h = host.value_or(KvHostTierStats{});
  const KvDiskTierStats k = d.value_or(KvDiskTierStats{});
  gauge("tokenmill:kv_tier_enabled", "1 while the tier takes writes (0: off or paused).", 1.0,
        k.enabled ? 1.0 : 0.0);
  gauge("tokenmill:kv_tier_bytes", "Bytes of this server's blocks in the tier.", of(h.bytes),
        of(k.bytes));
  gauge("tokenmill:kv_tier_blocks", "This server's blocks in the tier.", of(h.blocks),
        of(k.blocks));
  gauge("tokenmill:kv_tier_capacity_blocks", "Blocks the tier's memory holds.",
        of(h.capacity_blocks), std::nullopt);
  gauge("tokenmill:kv_tier_other_bytes",
        "Bytes of other models' or settings' blocks in the tier's directory (in its budget).",
        std::nullopt, of(k.other_bytes));
  gauge("tokenmill:kv_tier_loading_requests",
        "Requests waiting for their prefix blocks to load from the tier.", std::nullopt,
        of(num_loading));
  counter("tokenmill:kv_tier_writes_total", "Blocks written to the tier.", of(h.stores),
          of(k.writes));
  counter("tokenmill:kv_tier_write_failures_total", "Block writes that failed (disk full...).",
          std::nullopt, of(k.write_failures));
  counter("tokenmill:kv_tier_dropped_writes_total",
          "Blocks not written: the write queue was full or the tier off.", std::nullopt,
          of(k.dropped_writes));
  counter("tokenmill:kv_tier_evictions_total",
          "Blocks dropped for room (the memory, or the directory's byte budget).",
          of(h.evictions), of(k.evictions));
  counter("tokenmill:kv_tier_expirations_total", "Blocks deleted for the TTL.", std::nullopt,
          of(k.expirations));
  counter("tokenmill:kv_tier_purged_total", "Blocks deleted by a purge.", of(h.purged),
          of(k.purged));
  counter("tokenmill:kv_tier_lookups_total", "Blocks looked up past the pool's hit.",
          of(h.lookups), of(k.lookups));
  counter("tokenmill:kv_tier_hits_total", "Of those, found in the tier.", of(h.hits),
          of(k.hits));
  counter("tokenmill:kv_tier_loads_total", "Blocks read back (verified, from disk) into the pool.",
          of(h.loads), of(k.loads));
  counter("tokenmill:kv_tier_load_bytes_total", "Bytes of those.", of(h.load_bytes),
          of(k.load_bytes));
  counter("tokenmill:kv_tier_load_requests_total", "Loads finished (a request's run of blocks).",
          std::nullopt, of(k.load_count));
  counter("tokenmill:kv_tier_load_seconds_total",
          "Time from asking for a load to its finish, summed.", std::nullopt, k.load_seconds);
  if (!d.has_value()) return;
  w.CounterByLabel(
      "tokenmill:kv_tier_rejects_total",
      "Block files refused and deleted, by reason: corrupt (checksum or header), truncated, "
      "mismatch (another block's or model's), unreadable.",
      "reason",
      {{"corrupt", static_cast<double>(k.rejects_corrupt)},
       {"truncated", static_cast<double>(k.rejects_truncated)},
       {"mismatch", static_cast<double>(k.rejects_mismatch)},
       {"unreadable", static_cast<double>(k.read_failures)}});
}

std::string RenderMetrics(const ServedModelInfo& model,
                          const std::optional<EngineStats>& engine_stats,
                          const RequestMetrics& requests, MetricsCompat compat,
                          const grammar::GrammarCacheStats& grammars) {
  PrometheusWriter w({{"model_name", std::string(model.name)}});
  const EngineStats s = engine_stats.value_or(EngineStats{});
  w.Gauge("tokenmill:num_requests_running", "Requests in the running batch.", s.num_running);
  w.Gauge("tokenmill:num_requests_waiting", "Requests waiting to be scheduled.", s.num_waiting);
  w.Gauge("tokenmill:kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = 100%).",
          s.kv_usage);
  w.Gauge("tokenmill:kv_cache_blocks_in_use", "KV cache blocks held by requests.",
          s.num_kv_blocks_in_use);
  w.Gauge("tokenmill:kv_cache_blocks", "KV cache blocks in the pool.", s.num_kv_blocks);
  if (s.kv_memory_bytes.has_value()) {
    w.Gauge("tokenmill:kv_cache_memory_bytes",
            "Bytes of the KV memory limit the models share that this model's pool holds.",
            static_cast<double>(*s.kv_memory_bytes));
  }
  w.Counter("tokenmill:prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache.",
            static_cast<double>(s.prefix_query_tokens));
  w.Counter("tokenmill:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            static_cast<double>(s.prefix_hit_tokens));
  w.Counter("tokenmill:num_preemptions_total", "Requests preempted to free KV blocks.",
            static_cast<double>(s.num_preemptions));
  w.Counter("tokenmill:prompt_tokens_total", "Prompt tokens computed (prefix hits excluded).",
            static_cast<double>(s.num_prompt_tokens));
  w.Counter("tokenmill:generation_tokens_total", "Tokens generated.",
            static_cast<double>(s.num_generation_tokens));
  w.Counter("tokenmill:spec_decode_num_drafts_total",
            "Speculative decoding: verifications of a request's draft tokens.",
            static_cast<double>(s.spec_num_drafts));
  w.Counter("tokenmill:spec_decode_num_draft_tokens_total",
            "Speculative decoding: draft tokens verified.",
            static_cast<double>(s.spec_num_draft_tokens));
  w.Counter("tokenmill:spec_decode_num_accepted_tokens_total",
            "Speculative decoding: draft tokens accepted.",
            static_cast<double>(s.spec_num_accepted_tokens));
  w.Counter("tokenmill:engine_idle_checks_total",
            "Self-checks run when the engine fell idle (invariants hold, no KV block in use).",
            static_cast<double>(s.idle_checks));
  w.Counter("tokenmill:engine_idle_check_failures_total",
            "Idle self-checks that failed (logged at error level): a bug to report.",
            static_cast<double>(s.idle_check_failures));
  w.Gauge("tokenmill:grammar_cache_bytes",
          "Memory of the compiled structured-output grammars cached (and their keys).",
          static_cast<double>(grammars.bytes));
  w.Gauge("tokenmill:grammar_cache_budget_bytes",
          "What the compiled-grammar cache may hold (--grammar-cache-mib).",
          static_cast<double>(grammars.budget_bytes));
  w.Gauge("tokenmill:grammar_cache_entries", "Compiled grammars cached.",
          static_cast<double>(grammars.entries));
  w.Counter("tokenmill:grammar_cache_evictions_total",
            "Compiled grammars dropped, least recently used first, to stay within the budget.",
            static_cast<double>(grammars.evictions));
  RenderKvTiers(w, s.host_tier, s.disk_tier, s.num_loading);
  std::vector<std::pair<std::string, double>> finished;
  for (const CompletionReason reason :
       {CompletionReason::kStop, CompletionReason::kLength, CompletionReason::kAbort,
        CompletionReason::kError, CompletionReason::kToolCalls}) {
    finished.emplace_back(std::string(CompletionReasonName(reason)),
                          static_cast<double>(requests.finished(reason)));
  }
  w.CounterByLabel("tokenmill:request_success_total", "Finished requests by reason.",
                   "finished_reason", finished);
  w.Histogram("tokenmill:time_to_first_token_seconds", "Time to the first generated token.",
              requests.time_to_first_token());
  w.Histogram("tokenmill:time_per_output_token_seconds", "Time between generated tokens.",
              requests.time_per_output_token());
  w.Histogram("tokenmill:e2e_request_latency_seconds", "Time from arrival to finish.",
              requests.e2e_request_latency());
  w.Histogram("tokenmill:request_queue_time_seconds", "Time from arrival to first scheduled.",
              requests.request_queue_time());
  std::string text = w.text();
  if (compat == MetricsCompat::kVllm) WriteVllmMetrics(model, engine_stats, requests, text);
  return text;
}

std::string MergeFamilies(std::span<const std::string> bodies) {
  std::vector<std::string> order;  // family names, as they first appear
  std::unordered_map<std::string, std::string> families;  // name -> header and samples
  for (const std::string& body : bodies) {
    std::string* family = nullptr;
    bool known = false;  // the family came in an earlier body: its header is there
    for (size_t start = 0; start < body.size();) {
      const size_t end = std::min(body.find('\n', start), body.size());
      const std::string_view line(body.data() + start, end - start);
      start = end + 1;
      constexpr std::string_view kHelp = "# HELP ";
      if (line.starts_with(kHelp)) {
        const std::string_view rest = line.substr(kHelp.size());
        const std::string name(rest.substr(0, rest.find(' ')));
        const auto [it, added] = families.try_emplace(name);
        family = &it->second;
        known = !added;
        if (added) order.push_back(name);
      }
      const bool header = line.starts_with(kHelp) || line.starts_with("# TYPE ");
      if (family == nullptr || (known && header)) continue;
      family->append(line);
      family->push_back('\n');
    }
  }
  std::string text;
  for (const std::string& name : order) text += families[name];
  return text;
}

}  // namespace tokenmill::server
