// Test tool of test_sliding_window_kv.py: the engine's loop (Scheduler over KvCacheManager,
// ModelRunner over the CPU backend, greedy) on a model with sliding-window layers, in several
// KV layouts and schedules, with the scheduler's and cache's invariants checked after every
// step. Prints one JSON object: per configuration, the greedy tokens of every request and the
// cache's counters.
//   sliding_window_runner MODEL.gguf PROMPTS MAX_TOKENS
// PROMPTS: prompts separated by ';', each comma-separated token ids.
//
// Configurations (block size 4):
//   one_pool        every layer keeps every block (no KV group 1), each prompt alone: the
//                   reference, "all layers allocated in full"
//   groups          group 1 keeps its window, each prompt alone
//   groups_chunked  every prompt at once in steps of 7 tokens (prefills cut across the window
//                   edge), then every prompt again (prefix-cache hits on the first pass's blocks)
//   groups_tight    every prompt at once in pools that preempt, plus one request aborted
//                   after 3 steps
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "engine/forward_backend.h"
#include "engine/model_runner.h"
#include "model/forward_input.h"
#include "model/model.h"

namespace tokenmill {
namespace {

constexpr int kBlockSize = 4;

struct Layout {
  std::string name;
  bool sliding_group;
  int num_blocks;          // group 0 (every group when !sliding_group)
  int sliding_num_blocks;  // group 1
  int max_num_batched_tokens;
  bool together;  // all prompts at once (else one after another)
  bool twice;     // then all prompts again
  bool abort_one;
};

class Run {
 public:
  Run(const Model& model, const Layout& layout) : model_(model), layout_(layout) {
    const ModelConfig& c = model.config();
    TM_CHECK_EQ(NumKvGroups(c), 2) << "the model has no sliding-window layers";
    KvCacheConfig kv{.num_blocks = layout.num_blocks,
                     .block_size = kBlockSize,
                     .enable_prefix_caching = true,
                     .watermark_blocks = 1,
                     .sliding_window = layout.sliding_group ? c.sliding_window : 0,
                     .sliding_num_blocks = layout.sliding_group ? layout.sliding_num_blocks : 0};
    kv_ = std::make_unique<KvCacheManager>(kv);
    SchedulerConfig sc;
    sc.max_num_batched_tokens = layout.max_num_batched_tokens;
    sc.max_model_len = c.context_length;
    scheduler_ = std::make_unique<Scheduler>(sc, *kv_);
    EngineConfig config;
    config.num_threads = 1;
    StatusOr<std::unique_ptr<ForwardBackend>> backend = CreateForwardBackend(model, config);
    TM_CHECK(backend.ok()) << backend.status().ToString();
    const std::vector<int64_t> blocks = {
        layout.num_blocks, layout.sliding_group ? layout.sliding_num_blocks : layout.num_blocks};
    TM_CHECK((*backend)->AllocateKv(KvType::kF16, KvType::kF16, blocks, kBlockSize).ok());
    runner_ = std::make_unique<ModelRunner>(model, std::move(*backend), layout.num_blocks,
                                            kBlockSize);
  }

  nlohmann::json Go(const std::vector<std::vector<TokenId>>& prompts, int max_tokens) {
    std::vector<std::vector<TokenId>> tokens(prompts.size() * (layout_.twice ? 2 : 1));
    RequestId next = 0;
    const auto add = [&](size_t prompt) {
      NewRequest request;
      request.id = next++;
      request.prompt_token_ids = prompts[prompt];
      request.sampling.max_tokens = max_tokens;
      request.sampling.ignore_eos = true;
      const Status added = scheduler_->Add(std::move(request));
      TM_CHECK(added.ok()) << added.ToString();
    };
    for (int pass = 0; pass < (layout_.twice ? 2 : 1); ++pass) {
      for (size_t p = 0; p < prompts.size(); ++p) {
        add(p);
        if (!layout_.together) Drain(tokens);
      }
      if (layout_.abort_one && pass == 0) {
        const RequestId aborted = next;
        add(0);
        for (int step = 0; step < 3; ++step) Step(tokens);
        TM_CHECK(scheduler_->Abort(aborted).ok());
      }
      Drain(tokens);
    }
    const KvCacheStats stats = kv_->Stats();
    return {{"tokens", tokens},
            {"prefix_hit_tokens", stats.prefix_hit_tokens},
            {"preemptions", scheduler_->Stats().num_preemptions},
            {"released_blocks", stats.sliding_released_blocks},
            {"blocks_in_use_after", stats.num_in_use_blocks + stats.sliding_num_in_use_blocks}};
  }

 private:
  void Drain(std::vector<std::vector<TokenId>>& tokens) {
    while (scheduler_->has_unfinished_requests()) Step(tokens);
  }

  void Step(std::vector<std::vector<TokenId>>& tokens) {
    const SchedulerOutput step = scheduler_->Schedule();
    TM_CHECK(!step.empty()) << "the scheduler stalled";
    StatusOr<ModelOutput> output =
        runner_->Execute(step, *scheduler_, sampler_, logprobs_, grammars_, ended_);
    TM_CHECK(output.ok()) << output.status().ToString();
    for (const RequestEvent& event : scheduler_->Update(*output)) {
      if (event.id >= tokens.size()) continue;  // the aborted request
      tokens[event.id].insert(tokens[event.id].end(), event.new_token_ids.begin(),
                              event.new_token_ids.end());
    }
    const Status invariants = scheduler_->CheckInvariants();
    TM_CHECK(invariants.ok()) << invariants.ToString();
  }

  const Model& model_;
  Layout layout_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  Sampler sampler_;
  StepLogprobs logprobs_;
  GrammarConstraints grammars_{{}};  // no request is constrained
  std::vector<RequestId> ended_;
};

std::vector<std::vector<TokenId>> ParsePrompts(const std::string& text) {
  std::vector<std::vector<TokenId>> prompts;
  std::stringstream list(text);
  for (std::string prompt; std::getline(list, prompt, ';');) {
    prompts.emplace_back();
    std::stringstream ids(prompt);
    for (std::string id; std::getline(ids, id, ',');) prompts.back().push_back(std::stoi(id));
  }
  return prompts;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  using namespace tokenmill;
  if (argc != 4) {
    std::cerr << "usage: sliding_window_runner MODEL.gguf PROMPTS MAX_TOKENS\n";
    return 2;
  }
  StatusOr<std::unique_ptr<Model>> model = Model::Load(argv[1]);
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  const std::vector<std::vector<TokenId>> prompts = ParsePrompts(argv[2]);
  const int max_tokens = std::stoi(argv[3]);
  const Layout layouts[] = {
      {"one_pool", false, 256, 0, 64, false, false, false},
      {"groups", true, 256, 24, 64, false, false, false},
      {"groups_chunked", true, 256, 24, 7, true, true, false},
      {"groups_tight", true, 20, 12, 64, true, false, true},
  };
  nlohmann::json out;
  for (const Layout& layout : layouts) {
    out[layout.name] = Run(**model, layout).Go(prompts, max_tokens);
  }
  std::cout << out.dump() << "\n";
  return 0;
}
