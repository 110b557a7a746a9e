#include "server/metrics/vllm_metrics.h"

#include <chrono>

namespace tokenmill::server {
namespace {

// vLLM's finished_reason label values (vllm/v1/engine FinishReason); a turn that ended in
// tool calls is "stop" there, and tokenmill never stops for repetition.
std::vector<std::pair<std::string, double>> FinishedByVllmReason(const RequestMetrics& r) {
  const auto count = [&r](CompletionReason reason) {
    return static_cast<double>(r.finished(reason));
  };
  return {{"stop", count(CompletionReason::kStop) + count(CompletionReason::kToolCalls)},
          {"length", count(CompletionReason::kLength)},
          {"abort", count(CompletionReason::kAbort)},
          {"error", count(CompletionReason::kError)},
          {"repetition", 0}};
}

// vLLM's vllm:lora_requests_info: the adapters of the running and the waiting requests by
// name, comma-separated, and how many may be loaded at once (--max-loras), at the time now
// (vLLM's set_to_current_time).
void WriteLoraInfo(const ServedModelInfo& model, const EngineStats& s, PrometheusWriter& w) {
  const auto names = [&](const std::vector<int>& loras) {
    std::string joined;
    for (const int lora : loras) {
      if (lora < 1 || static_cast<size_t>(lora) > model.lora_names.size()) continue;
      if (!joined.empty()) joined += ',';
      joined += model.lora_names[static_cast<size_t>(lora) - 1];
    }
    return joined;
  };
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  w.LabelledGauge("vllm:lora_requests_info", "Running stats on lora requests.",
                  {{"max_lora", std::to_string(model.max_loras)},
                   {"running_lora_adapters", names(s.running_loras)},
                   {"waiting_lora_adapters", names(s.waiting_loras)}},
                  now);
}

void WriteSchedulerAndCache(const ServedModelInfo& model, const EngineStats& s, bool loaded,
                            PrometheusWriter& w) {
  w.Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
          s.num_running);
  w.Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
          s.num_waiting);
  w.Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage);
  w.Gauge("vllm:gpu_cache_usage_perc",
          "KV-cache usage (vLLM's name before v1). 1 means 100 percent usage.", s.kv_usage);
  w.Counter("vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            static_cast<double>(s.prefix_query_tokens));
  w.Counter("vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            static_cast<double>(s.prefix_hit_tokens));
  if (loaded) {  // the endpoint pickers read the block size from here
    w.Info("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
           {{"block_size", std::to_string(model.block_size)},
            {"num_gpu_blocks", std::to_string(s.num_kv_blocks)}});
  }
}

// vLLM counts every prompt token once, computed or found in the prefix cache.
void WriteTokenCounters(const EngineStats& s, const RequestMetrics& r, PrometheusWriter& w) {
  w.Counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
            static_cast<double>(s.num_preemptions));
  const auto computed = static_cast<double>(s.num_prompt_tokens);
  const auto cached = static_cast<double>(s.prefix_hit_tokens);
  w.Counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", computed + cached);
  w.CounterByLabel("vllm:prompt_tokens_by_source_total", "Number of prompt tokens by source.",
                   "source",
                   {{"local_compute", computed},
                    {"local_cache_hit", cached},
                    {"external_kv_transfer", 0}});
  w.Counter("vllm:prompt_tokens_cached_total",
            "Number of cached prompt tokens (local + external).", cached);
  w.Counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
            static_cast<double>(s.num_generation_tokens));
  w.CounterByLabel("vllm:request_success_total", "Count of successfully processed requests.",
                   "finished_reason", FinishedByVllmReason(r));
  w.Counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.",
            static_cast<double>(s.spec_num_drafts));
  w.Counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.",
            static_cast<double>(s.spec_num_draft_tokens));
  w.Counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
            static_cast<double>(s.spec_num_accepted_tokens));
}

// Their buckets follow the context length, unknown until the model loads.
void WriteTokenHistograms(const RequestMetrics& r, PrometheusWriter& w) {
  w.Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
              r.prompt_tokens());
  w.Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
              r.generation_tokens());
  w.Histogram("vllm:request_max_num_generation_tokens",
              "Histogram of maximum number of requested generation tokens.",
              r.max_generation_tokens());
  w.Histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
              r.params_max_tokens());
  w.Histogram("vllm:request_prefill_kv_computed_tokens",
              "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
              r.prefill_computed_tokens());
}

void WriteLatencyHistograms(const RequestMetrics& r, PrometheusWriter& w) {
  w.Histogram("vllm:request_params_n", "Histogram of the n request parameter.", r.params_n());
  w.Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              r.time_to_first_token());
  const HistogramSnapshot gaps = r.time_per_output_token();
  w.Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              gaps);
  w.Histogram("vllm:time_per_output_token_seconds",
              "Histogram of time per output token in seconds (deprecated: "
              "vllm:inter_token_latency_seconds).",
              gaps);
  w.Histogram("vllm:request_time_per_output_token_seconds",
              "Histogram of time_per_output_token_seconds per request.",
              r.mean_time_per_output_token());
  w.Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              r.e2e_request_latency());
  w.Histogram("vllm:request_queue_time_seconds",
              "Histogram of time spent in WAITING phase for request.", r.request_queue_time());
  w.Histogram("vllm:request_inference_time_seconds",
              "Histogram of time spent in RUNNING phase for request.", r.inference_time());
  w.Histogram("vllm:request_prefill_time_seconds",
              "Histogram of time spent in PREFILL phase for request.", r.prefill_time());
  w.Histogram("vllm:request_decode_time_seconds",
              "Histogram of time spent in DECODE phase for request.", r.decode_time());
}

}  // namespace

void WriteVllmMetrics(const ServedModelInfo& model,
                      const std::optional<EngineStats>& engine_stats,
                      const RequestMetrics& requests, std::string& text) {
  PrometheusWriter w({{"model_name", std::string(model.name)}, {"engine", "0"}});
  const EngineStats s = engine_stats.value_or(EngineStats{});
  WriteSchedulerAndCache(model, s, engine_stats.has_value(), w);
  WriteTokenCounters(s, requests, w);
  if (engine_stats.has_value()) WriteTokenHistograms(requests, w);
  WriteLatencyHistograms(requests, w);
  text += w.text();
  if (model.max_loras == 0) return;  // a model that takes no adapters
  // vLLM labels this one by its adapters only.
  PrometheusWriter lora({});
  WriteLoraInfo(model, s, lora);
  text += lora.text();
}

}  // namespace tokenmill::server
