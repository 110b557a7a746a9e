#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "server/metrics/histogram.h"
#include "server/metrics/prometheus_text.h"
#include "server/metrics/request_metrics.h"

namespace tokenmill::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(Histogram, BucketsAreCumulativeAndInclusiveOfTheirBound) {
  Histogram h({0.1, 1.0});
  for (const double v : {0.05, 0.1, 0.5, 1.0, 3.0}) h.Observe(v);
  const HistogramSnapshot s = h.Snapshot();
  EXPECT_THAT(s.bucket_counts, ElementsAre(2, 4, 5));  // <=0.1, <=1, +Inf
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 4.65);
}

TEST(PrometheusWriter, WritesFamiliesWithEscapedLabels) {
  using Labels = std::vector<std::pair<std::string, std::string>>;
  PrometheusWriter w(Labels{{"model_name", "a \"b\"\\c\nd"}});
  w.Gauge("x:g", "A gauge.", 0.25);
  w.Counter("x:c_total", "A counter.", 3);
  Histogram h({1.0});
  h.Observe(0.5);
  h.Observe(2.0);
  w.Histogram("x:h_seconds", "A histogram.", h.Snapshot());
  const std::string label = R"(model_name="a \"b\"\\c\nd")";
  EXPECT_EQ(w.text(),
            "# HELP x:g A gauge.\n# TYPE x:g gauge\nx:g{" + label + "} 0.25\n"
            "# HELP x:c_total A counter.\n# TYPE x:c_total counter\nx:c_total{" + label +
                "} 3\n"
            "# HELP x:h_seconds A histogram.\n# TYPE x:h_seconds histogram\n"
            "x:h_seconds_bucket{" + label + ",le=\"1\"} 1\n"
            "x:h_seconds_bucket{" + label + ",le=\"+Inf\"} 2\n"
            "x:h_seconds_sum{" + label + "} 2.5\n"
            "x:h_seconds_count{" + label + "} 2\n");
}

TEST(RenderMetrics, NamesEveryMetricOfTheIssue) {
  EngineStats stats;
  stats.num_running = 2;
  stats.num_waiting = 1;
  stats.kv_usage = 0.5;
  stats.num_preemptions = 4;
  stats.prefix_query_tokens = 10;
  stats.prefix_hit_tokens = 6;
  stats.num_prompt_tokens = 17;
  stats.num_generation_tokens = 40;
  stats.spec_num_drafts = 5;
  stats.spec_num_draft_tokens = 20;
  stats.spec_num_accepted_tokens = 12;
  stats.idle_checks = 7;
  stats.idle_check_failures = 1;
  RequestMetrics requests;
  RequestTimings timings;
  timings.queue_seconds = 0.002;
  timings.time_to_first_token = 0.03;
  timings.token_seconds = {0.03, 0.01, 0.02};
  timings.total_seconds = 0.06;
  requests.ObserveFinished(timings, CompletionReason::kLength, {.prompt_tokens = 9});
  const std::string text = RenderMetrics({"m", 16}, stats, requests, MetricsCompat::kNone);
  for (const std::string line : {
           "tokenmill:num_requests_running{model_name=\"m\"} 2\n",
           "tokenmill:num_requests_waiting{model_name=\"m\"} 1\n",
           "tokenmill:kv_cache_usage_perc{model_name=\"m\"} 0.5\n",
           "tokenmill:prefix_cache_queries_total{model_name=\"m\"} 10\n",
           "tokenmill:prefix_cache_hits_total{model_name=\"m\"} 6\n",
           "tokenmill:num_preemptions_total{model_name=\"m\"} 4\n",
           "tokenmill:prompt_tokens_total{model_name=\"m\"} 17\n",
           "tokenmill:generation_tokens_total{model_name=\"m\"} 40\n",
           "# TYPE tokenmill:spec_decode_num_drafts_total counter\n",
           "tokenmill:spec_decode_num_drafts_total{model_name=\"m\"} 5\n",
           "tokenmill:spec_decode_num_draft_tokens_total{model_name=\"m\"} 20\n",
           "tokenmill:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 12\n",
           "tokenmill:engine_idle_checks_total{model_name=\"m\"} 7\n",
           "tokenmill:engine_idle_check_failures_total{model_name=\"m\"} 1\n",
           "tokenmill:request_success_total{model_name=\"m\",finished_reason=\"length\"} 1\n",
           "tokenmill:time_to_first_token_seconds_count{model_name=\"m\"} 1\n",
           // Inter-token gaps only: the first token's wait is TTFT.
           "tokenmill:time_per_output_token_seconds_count{model_name=\"m\"} 2\n",
           "tokenmill:e2e_request_latency_seconds_count{model_name=\"m\"} 1\n",
           "tokenmill:request_queue_time_seconds_count{model_name=\"m\"} 1\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

TEST(RenderMetrics, GrammarCacheBytesEntriesAndEvictions) {
  RequestMetrics requests;
  const std::string text =
      RenderMetrics({"m", 16}, EngineStats{}, requests, MetricsCompat::kNone,
                    {.bytes = 3 << 20, .entries = 2, .budget_bytes = 64 << 20, .evictions = 5});
  EXPECT_THAT(text, HasSubstr("tokenmill:grammar_cache_bytes{model_name=\"m\"} 3145728\n"));
  EXPECT_THAT(text, HasSubstr("tokenmill:grammar_cache_entries{model_name=\"m\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("tokenmill:grammar_cache_budget_bytes{model_name=\"m\"} 67108864\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tokenmill:grammar_cache_evictions_total counter\n"));
  EXPECT_THAT(text, HasSubstr("tokenmill:grammar_cache_evictions_total{model_name=\"m\"} 5\n"));
}

TEST(RenderMetrics, ZerosBeforeTheModelLoads) {
  RequestMetrics requests;
  const std::string text = RenderMetrics({}, std::nullopt, requests, MetricsCompat::kVllm);
  EXPECT_THAT(text, HasSubstr("tokenmill:num_requests_running{model_name=\"\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("vllm:num_requests_waiting{model_name=\"\",engine=\"0\"} 0\n"));
  // No block size to report yet.
  EXPECT_THAT(text, Not(HasSubstr("vllm:cache_config_info")));
  EXPECT_THAT(text, Not(HasSubstr("NaN")));
}

EngineStats BusyStats() {
  EngineStats stats;
  stats.num_running = 3;
  stats.num_waiting = 2;
  stats.kv_usage = 0.75;
  stats.num_kv_blocks = 64;
  stats.prefix_query_tokens = 100;
  stats.prefix_hit_tokens = 48;
  return stats;
}

TEST(RenderMetrics, VllmNamesOnlyWhenAskedFor) {
  RequestMetrics requests;
  const std::string text = RenderMetrics({"m", 16}, BusyStats(), requests, MetricsCompat::kNone);
  EXPECT_THAT(text, Not(HasSubstr("vllm:")));
}

// The names and labels the Gateway API Inference Extension's endpoint picker and llm-d read
// by default (docs/kubernetes.md lists them), over the same numbers as tokenmill:*.
TEST(RenderMetrics, VllmCompatServesWhatEndpointPickersRead) {
  RequestMetrics requests;
  const std::string text = RenderMetrics({"m", 16}, BusyStats(), requests, MetricsCompat::kVllm);
  const std::string labels = "{model_name=\"m\",engine=\"0\"} ";
  for (const std::string& line : std::vector<std::string>{
           "# TYPE vllm:num_requests_waiting gauge\n",
           "vllm:num_requests_waiting" + labels + "2\n",
           "vllm:num_requests_running" + labels + "3\n",
           "vllm:kv_cache_usage_perc" + labels + "0.75\n",
           "vllm:gpu_cache_usage_perc" + labels + "0.75\n",
           "# TYPE vllm:prefix_cache_queries_total counter\n",
           "vllm:prefix_cache_queries_total" + labels + "100\n",
           "vllm:prefix_cache_hits_total" + labels + "48\n",
           "vllm:cache_config_info{model_name=\"m\",engine=\"0\",block_size=\"16\","
           "num_gpu_blocks=\"64\"} 1\n",
           "tokenmill:num_requests_waiting{model_name=\"m\"} 2\n",  // tokenmill's own names stay
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

// Several models' bodies as one: each family's header once, every model's samples under it.
TEST(MergeFamilies, EachFamilyOnceWithEveryModelsSamples) {
  RequestMetrics a_requests, b_requests;
  b_requests.ObserveRequest(1, 8, 8);
  const std::string a = RenderMetrics({"a", 16}, BusyStats(), a_requests, MetricsCompat::kVllm);
  const std::string b = RenderMetrics({"b", 16}, EngineStats{}, b_requests, MetricsCompat::kVllm);
  const std::string merged = MergeFamilies(std::vector<std::string>{a, b});
  const auto count = [&](std::string_view needle) {
    size_t n = 0;
    for (size_t at = merged.find(needle); at != std::string::npos;
         at = merged.find(needle, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count("# TYPE tokenmill:num_requests_running gauge\n"), 1u);
  EXPECT_EQ(count("# HELP vllm:request_params_n "), 1u);
  EXPECT_THAT(merged, HasSubstr("tokenmill:num_requests_running{model_name=\"a\"} 3\n"
                                "tokenmill:num_requests_running{model_name=\"b\"} 0\n"));
  const std::string params_n = "vllm:request_params_n_count{model_name=";
  EXPECT_THAT(merged, HasSubstr(params_n + "\"a\",engine=\"0\"} 0\n"));
  EXPECT_THAT(merged, HasSubstr(params_n + "\"b\",engine=\"0\"} 1\n"));
  // Every line of both bodies is there; only b's headers (of the same families) are gone.
  const auto lines = [](const std::string& text) {
    return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  };
  const size_t families = count("# HELP ");
  EXPECT_EQ(lines(merged), lines(a) + lines(b) - 2 * families);
}

TEST(TokenCountBuckets, AreVllms125SeriesUpToTheContext) {
  EXPECT_THAT(TokenCountBuckets(8192),
              ElementsAre(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000));
  EXPECT_THAT(TokenCountBuckets(100), ElementsAre(1, 2, 5, 10, 20, 50, 100));
}

TEST(RequestMetrics, SplitsARequestIntoVllmsPhases) {
  RequestMetrics requests;
  requests.SetMaxModelLen(100);
  RequestTimings timings;
  timings.queue_seconds = 0.5;
  timings.time_to_first_token = 2.0;
  timings.token_seconds = {2.0, 1.0, 3.0};
  timings.total_seconds = 6.5;
  requests.ObserveFinished(timings, CompletionReason::kStop,
                           {.prompt_tokens = 40, .cached_prompt_tokens = 16,
                            .completion_tokens = 3});
  requests.ObserveRequest(/*n=*/1, /*max_tokens=*/50, /*max_generated_tokens=*/3);
  EXPECT_DOUBLE_EQ(requests.prefill_time().sum, 1.5);  // scheduled -> first token
  EXPECT_DOUBLE_EQ(requests.decode_time().sum, 4.0);   // first -> last token
  EXPECT_DOUBLE_EQ(requests.inference_time().sum, 5.5);
  EXPECT_DOUBLE_EQ(requests.mean_time_per_output_token().sum, 2.0);
  EXPECT_DOUBLE_EQ(requests.prefill_computed_tokens().sum, 24);
  EXPECT_THAT(requests.prompt_tokens().upper_bounds, ElementsAre(1, 2, 5, 10, 20, 50, 100));
  EXPECT_DOUBLE_EQ(requests.params_max_tokens().sum, 50);
}

TEST(RenderMetrics, VllmCountsAToolCallTurnAsStopAndEveryPromptTokenOnce) {
  RequestMetrics requests;
  requests.ObserveFinished(RequestTimings{}, CompletionReason::kToolCalls, {});
  EngineStats stats = BusyStats();
  stats.num_prompt_tokens = 52;  // computed; the other 48 were prefix-cache hits
  const std::string text = RenderMetrics({"m", 16}, stats, requests, MetricsCompat::kVllm);
  const std::string labels = "model_name=\"m\",engine=\"0\"";
  EXPECT_THAT(text, HasSubstr("vllm:request_success_total{" + labels +
                              ",finished_reason=\"stop\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("vllm:prompt_tokens_total{" + labels + "} 100\n"));
  EXPECT_THAT(text, HasSubstr("vllm:prompt_tokens_cached_total{" + labels + "} 48\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE vllm:request_prompt_tokens histogram\n"));
  // Before the model loads the context length, and so these buckets, are unknown.
  EXPECT_THAT(RenderMetrics({}, std::nullopt, requests, MetricsCompat::kVllm),
              Not(HasSubstr("vllm:request_prompt_tokens")));
}

}  // namespace
}  // namespace tokenmill::server
