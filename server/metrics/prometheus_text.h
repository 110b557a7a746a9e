// The Prometheus text exposition format (version 0.0.4), and tokenmill's metrics in it,
// named like vLLM's under the "tokenmill:" prefix (and, asked for, under vLLM's own names).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/engine_stats.h"
#include "grammar/grammar_cache.h"
#include "server/metrics/histogram.h"
#include "server/metrics/request_metrics.h"

namespace tokenmill::server {

// Appends metric families to a text body; every sample gets the same labels.
class PrometheusWriter {
 public:
  // `labels`: name="value" pairs; values are escaped here.
  explicit PrometheusWriter(std::vector<std::pair<std::string, std::string>> labels);

  void Gauge(std::string_view name, std::string_view help, double value);
  // `name` ends with _total, as the format asks of counters.
  void Counter(std::string_view name, std::string_view help, double value);
  // One family with one sample per label value of `label_name`.
  void CounterByLabel(std::string_view name, std::string_view help, std::string_view label_name,
                      const std::vector<std::pair<std::string, double>>& values);
  void GaugeByLabel(std::string_view name, std::string_view help, std::string_view label_name,
                    const std::vector<std::pair<std::string, double>>& values);
  void Histogram(std::string_view name, std::string_view help, const HistogramSnapshot& h);
  // A gauge of `value` with these labels beside the writer's.
  void LabelledGauge(std::string_view name, std::string_view help,
                     const std::vector<std::pair<std::string, std::string>>& gauge_labels,
                     double value);
  // A gauge of value 1 whose labels carry the information (Prometheus' "info" idiom).
  void Info(std::string_view name, std::string_view help,
            const std::vector<std::pair<std::string, std::string>>& info_labels);

  const std::string& text() const { return text_; }

 private:
  void Header(std::string_view name, std::string_view help, std::string_view type);
  void Sample(std::string_view name, std::string_view extra_label, double value);
  void ByLabel(std::string_view name, std::string_view help, std::string_view type,
               std::string_view label_name,
               const std::vector<std::pair<std::string, double>>& values);

  std::string labels_;  // `a="x",b="y"` (no braces)
  std::string text_;
};

enum class MetricsCompat {
  kNone,
  // Also vLLM v1's request, token, latency and cache families under vLLM's names, types,
  // buckets and labels (model_name, engine): what vLLM's Grafana dashboards and inference
  // gateways' endpoint pickers (the Gateway API Inference Extension, llm-d) read
  // (server/metrics/vllm_metrics.h).
  kVllm,
};

// What the metrics say about the model served; `block_size` 0 while it loads.
struct ServedModelInfo {
  std::string_view name;
  int block_size = 0;
  std::span<const std::string> lora_names = {};  // the LoRA adapters', by id (1 first)
  int max_loras = 0;  // adapters loaded at once at most (--max-loras)
};

// The /metrics body of one model. `engine_stats` is empty while the model is not loaded (and
// `grammars` zeros). `max_loras` 0: a model without adapters, whose vLLM LoRA info is left out.
std::string RenderMetrics(const ServedModelInfo& model,
                          const std::optional<EngineStats>& engine_stats,
                          const RequestMetrics& requests, MetricsCompat compat,
                          const grammar::GrammarCacheStats& grammars = {});

// Bodies of the format (each family a "# HELP" line, its "# TYPE" line and its samples) as
// one: each family once, where it first appears, with the samples of every body in order (the
// format allows a family's name once). Several models' RenderMetrics, told apart by their
// model_name labels, make one /metrics.
std::string MergeFamilies(std::span<const std::string> bodies);

}  // namespace tokenmill::server
