// --metrics-compat vllm: vLLM v1's metric families (vllm/v1/metrics/loggers.py) under its
// names, types, histogram buckets and labels (model_name, engine), over the numbers that
// tokenmill's own families show: nothing is measured twice. Which of vLLM's names are not
// served, and why: tests/e2e/test_vllm_metrics.py.
#pragma once

#include <optional>
#include <string>

#include "engine/engine_stats.h"
#include "server/metrics/prometheus_text.h"
#include "server/metrics/request_metrics.h"

namespace tokenmill::server {

// Appends vLLM's families to `text`. `engine_stats` is empty while the model loads.
void WriteVllmMetrics(const ServedModelInfo& model,
                      const std::optional<EngineStats>& engine_stats,
                      const RequestMetrics& requests, std::string& text);

}  // namespace tokenmill::server
