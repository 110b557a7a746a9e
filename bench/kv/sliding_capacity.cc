// KV groups for a sliding-window model: for a fixed --kv-cache-memory, the KV bytes one
// request of --seq-tokens tokens holds and how many such requests run at once, with
// sliding-window layers keeping only their window (KV group 1, cache/kv_cache_manager.h)
// against every layer allocated in full (one group). The shape comes from a GGUF's metadata
// (layers, KV heads, head dim, sliding window) with llama.cpp's gemma3 pattern: every
// --swa-period-th layer attends globally, the others slide. The pools are sized as the
// engine sizes them (PlanKvCache, PlanKvCacheGroups), then the real Scheduler and
// KvCacheManager run --requests requests to the end (prompt, then greedy decode steps with
// no model: the cache and scheduler are pure logic); the peak of requests running together,
// the preemptions and the bytes a request held (at most, and while decoding) are reported.
// One JSON line per configuration.
//
//   build/bin/tokenmill_kv_sliding --model models/gemma-3-270m-q4_k_m.gguf
//       --kv-cache-memory 1GiB --seq-tokens 8192
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cache/kv_cache_manager.h"
#include "cache/kv_cache_sizing.h"
#include "common/byte_size.h"
#include "common/check.h"
#include "gguf/gguf.h"
#include "model/forward_input.h"
#include "scheduler/scheduler.h"

namespace tokenmill {
namespace {

struct Options {
  std::string model_path;
  std::string kv_cache_memory = "1GiB";
  int seq_tokens = 8192;
  // Generated per request (the prompt is seq_tokens - max_tokens): long enough that requests
  // outlive their prefill's admission rate, so memory, not the token budget, bounds them.
  int max_tokens = 512;
  int swa_period = 6;   // llama.cpp's gemma3: 5 sliding-window layers, then 1 global
  int block_size = 16;
  int element_bits = 16;  // f16 K/V
  int max_num_batched_tokens = 2048;
  int watermark_blocks = 1;
  int requests = 0;  // 0: twice what the grouped pools predict
};

StatusOr<ModelConfig> ReadShape(const std::string& path, int swa_period) {
  TM_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
  TM_ASSIGN_OR_RETURN(const std::string_view arch, file.GetString("general.architecture"));
  const std::string prefix(arch);
  ModelConfig c;
  c.arch_name = prefix;
  TM_ASSIGN_OR_RETURN(const uint32_t layers, file.GetU32(prefix + ".block_count"));
  TM_ASSIGN_OR_RETURN(const uint32_t kv_heads, file.GetU32(prefix + ".attention.head_count_kv"));
  TM_ASSIGN_OR_RETURN(const uint32_t head_dim, file.GetU32(prefix + ".attention.key_length"));
  TM_ASSIGN_OR_RETURN(const uint32_t window, file.GetU32(prefix + ".attention.sliding_window"));
  c.n_layers = static_cast<int>(layers);
  c.n_kv_heads = static_cast<int>(kv_heads);
  c.head_dim = static_cast<int>(head_dim);
  c.sliding_window = static_cast<int>(window);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    c.sliding_layers.push_back((layer + 1) % swa_period != 0);
  }
  return c;
}

KvGeometry Geometry(const ModelConfig& c, int num_layers, int element_bits) {
  return KvGeometry{num_layers, c.n_kv_heads, c.head_dim, element_bits, 0};
}

// Runs `n` requests of o.seq_tokens tokens through a scheduler over `kv` to the end.
nlohmann::json Simulate(KvCacheManager& kv, const Options& o, int n,
                        const std::vector<int64_t>& bytes_per_block) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = o.max_num_batched_tokens;
  sc.max_num_seqs = 1 << 20;
  sc.max_model_len = o.seq_tokens + 1;
  sc.max_queue = n;
  Scheduler scheduler(sc, kv);
  for (int r = 0; r < n; ++r) {
    NewRequest request;
    request.id = static_cast<RequestId>(r);
    for (int t = 0; t < o.seq_tokens - o.max_tokens; ++t) {
      request.prompt_token_ids.push_back(3 + (r * 7919 + t) % 50000);  // no shared prefix
    }
    request.sampling.max_tokens = o.max_tokens;
    request.sampling.ignore_eos = true;
    const Status added = scheduler.Add(std::move(request));
    TM_CHECK(added.ok()) << added.ToString();
  }
  int peak_running = 0;
  int64_t peak_request_bytes = 0;    // any step, a prefill chunk's included
  int64_t decode_request_bytes = 0;  // decode steps: what a request holds while it generates
  int64_t steps = 0;
  while (scheduler.has_unfinished_requests()) {
    const SchedulerOutput step = scheduler.Schedule();
    TM_CHECK(!step.empty()) << "the scheduler stalled";
    ++steps;
    peak_running = std::max(peak_running, scheduler.Stats().num_running);
    ModelOutput output;
    for (const ScheduledRequest& r : step.requests) {
      int64_t bytes = 0;
      for (int g = 0; g < kv.num_groups(); ++g) {
        const std::span<const BlockId> table = kv.BlockTable(r.id, g);
        bytes += bytes_per_block[g] *
                 std::count_if(table.begin(), table.end(),
                               [](BlockId id) { return id != kReleasedBlock; });
      }
      peak_request_bytes = std::max(peak_request_bytes, bytes);
      if (!r.is_prefill) decode_request_bytes = std::max(decode_request_bytes, bytes);
      if (r.num_logits > 0) {
        output.requests.push_back(
            SampledTokens{.id = r.id, .token_ids = {1}, .next_draft_token_ids = {}});
      }
    }
    scheduler.Update(output);
  }
  const Status ok = scheduler.CheckInvariants();
  TM_CHECK(ok.ok()) << ok.ToString();
  return {{"requests", n},
          {"peak_running", peak_running},
          {"preemptions", scheduler.Stats().num_preemptions},
          {"steps", steps},
          {"peak_kv_bytes_per_request", peak_request_bytes},
          {"decode_kv_bytes_per_request", decode_request_bytes}};
}

int Run(const Options& o) {
  const StatusOr<int64_t> budget = ParseByteSize(o.kv_cache_memory);
  StatusOr<ModelConfig> shape = ReadShape(o.model_path, o.swa_period);
  if (!budget.ok() || !shape.ok()) {
    std::cerr << (budget.ok() ? shape.status() : budget.status()).ToString() << "\n";
    return 1;
  }
  const ModelConfig& c = *shape;
  const int b = o.block_size;
  const KvGroupsShape groups{.full = Geometry(c, NumLayersInKvGroup(c, 0), o.element_bits),
                             .sliding = Geometry(c, NumLayersInKvGroup(c, 1), o.element_bits),
                             .sliding_window = c.sliding_window};
  const StatusOr<KvCachePlan> whole =
      PlanKvCache(Geometry(c, c.n_layers, o.element_bits), b, *budget);
  const int min_sliding_blocks =
      o.watermark_blocks + 1 + (o.max_num_batched_tokens + c.sliding_window - 1 + b - 1) / b;
  const StatusOr<KvGroupsPlan> split =
      PlanKvCacheGroups(groups, b, *budget, o.seq_tokens, min_sliding_blocks);
  if (!whole.ok() || !split.ok()) {
    std::cerr << (whole.ok() ? split.status() : whole.status()).ToString() << "\n";
    return 1;
  }
  const int64_t full_blocks = FullGroupBlocks(o.seq_tokens, b);
  const int64_t sliding_blocks = SlidingGroupBlocks(groups, o.seq_tokens, b);
  const int64_t whole_predicted = whole->num_blocks / full_blocks;
  // Group 1's first min_sliding_blocks are one prefill chunk's headroom.
  const int64_t split_predicted =
      std::min(split->full.num_blocks / full_blocks,
               (split->sliding.num_blocks - min_sliding_blocks) / sliding_blocks);
  const int n = o.requests > 0 ? o.requests : static_cast<int>(2 * split_predicted);

  const nlohmann::json common = {{"arch", c.arch_name},
                                 {"layers", c.n_layers},
                                 {"sliding_layers", NumLayersInKvGroup(c, 1)},
                                 {"kv_heads", c.n_kv_heads},
                                 {"head_dim", c.head_dim},
                                 {"sliding_window", c.sliding_window},
                                 {"kv_cache_memory", o.kv_cache_memory},
                                 {"seq_tokens", o.seq_tokens}};
  {
    KvCacheManager kv(KvCacheConfig{.num_blocks = whole->num_blocks,
                                    .block_size = b,
                                    .enable_prefix_caching = true,
                                    .watermark_blocks = o.watermark_blocks,
                                    .sliding_window = 0,
                                    .sliding_num_blocks = 0});
    nlohmann::json out = common;
    out["layout"] = "every layer in full";
    out["kv_blocks"] = {whole->num_blocks};
    out["kv_bytes_per_request"] = full_blocks * whole->bytes_per_block;
    out["predicted_concurrent"] = whole_predicted;
    out["run"] = Simulate(kv, o, n, {whole->bytes_per_block});
    std::cout << out.dump() << "\n";
  }
  {
    KvCacheManager kv(KvCacheConfig{.num_blocks = split->full.num_blocks,
                                    .block_size = b,
                                    .enable_prefix_caching = true,
                                    .watermark_blocks = o.watermark_blocks,
                                    .sliding_window = c.sliding_window,
                                    .sliding_num_blocks = split->sliding.num_blocks});
    nlohmann::json out = common;
    out["layout"] = "sliding-window group keeps its window";
    out["kv_blocks"] = {split->full.num_blocks, split->sliding.num_blocks};
    out["kv_bytes_per_request"] = full_blocks * split->full.bytes_per_block +
                                  sliding_blocks * split->sliding.bytes_per_block;
    out["predicted_concurrent"] = split_predicted;
    out["run"] = Simulate(kv, o, n, {split->full.bytes_per_block, split->sliding.bytes_per_block});
    std::cout << out.dump() << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  tokenmill::Options o;
  CLI::App app{"KV bytes per request and concurrent requests with sliding-window KV groups"};
  app.add_option("--model", o.model_path, "GGUF whose metadata gives the shape")->required();
  app.add_option("--kv-cache-memory", o.kv_cache_memory, "the fixed KV pool, e.g. 1GiB");
  app.add_option("--seq-tokens", o.seq_tokens, "tokens per request (prompt + generated)");
  app.add_option("--max-tokens", o.max_tokens, "generated tokens per request");
  app.add_option("--swa-period", o.swa_period, "every this many layers one attends globally");
  app.add_option("--block-size", o.block_size, "tokens per KV block");
  app.add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "token budget per step");
  app.add_option("--requests", o.requests, "requests to run (0: twice the grouped prediction)");
  CLI11_PARSE(app, argc, argv);
  return tokenmill::Run(o);
}
