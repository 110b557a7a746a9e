// Random workloads against the invariants: random pools, budgets and limits; requests with
// shared system prompts (prefix hits), priorities, cache salts, drafts (some wrong) and
// aborts, arriving over time. After every call the scheduler's and cache's invariants hold
// (SchedulerSim checks them); every request that is not aborted ends by length with exactly
// the tokens the context allows, equal to the reference; at the end no block is in use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/scheduler/scheduler_sim.h"

namespace tokenmill::testing {
namespace scheduler_randomized_test {

struct Coverage {
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;
  int aborts = 0;
  int chunked_steps = 0;
  int draft_steps = 0;
  int completed = 0;  // ended by length, not aborted
  int too_long = 0;   // Add rejected: the prompt can never fit
  int queue_full = 0;  // Add rejected: max_queue reached (retried later)
  int64_t released_blocks = 0;  // sliding-window blocks released while their request ran
};

class RandomWorkload {
 public:
  // sliding: a second KV group of sliding-window layers, with a random window and pool.
  RandomWorkload(uint64_t seed, bool sliding) : rng_(seed), sliding_(sliding) {}

  void Run(Coverage& coverage) {
    const int block_size = Uniform(1, 8);
    const int num_blocks = Uniform(3, 40);
    const int watermark = Uniform(0, std::min(2, num_blocks - 2));
    SchedulerConfig config;
    config.max_num_batched_tokens = Uniform(1, 64);
    config.max_num_seqs = Uniform(1, 8);
    config.max_model_len = Uniform(4, 120);
    config.max_queue = Uniform(1, 30);
    KvCacheConfig cache_config = MakeCacheConfig(num_blocks, block_size, watermark);
    if (sliding_) {
      // The smallest pool still serves one token after its window (max_tokens_per_step 1).
      cache_config.sliding_window = Uniform(1, 3 * block_size);
      cache_config.sliding_num_blocks =
          watermark + (cache_config.sliding_window + block_size - 1) / block_size + 1 +
          Uniform(0, 12);
    }
    SchedulerSim sim(config, cache_config);
    const int draft_count = Uniform(0, 3);
    if (draft_count > 0) {
      sim.set_drafter([this, draft_count](RequestId, std::span<const TokenId> tokens) {
        std::vector<TokenId> drafts = ReferenceContinuation(tokens, draft_count);
        for (TokenId& draft : drafts) {
          if (Uniform(0, 3) == 0) draft = (draft + 1) % kVocabSize;
        }
        return drafts;
      });
    }
    std::vector<std::vector<TokenId>> system_prompts;
    for (const int length : {0, 3, 9, 20}) system_prompts.push_back(RandomTokens(length));

    std::vector<RequestId> live;
    std::vector<int> max_tokens_of;
    std::vector<bool> aborted;
    const int num_requests = Uniform(1, 30);
    RequestId next_id = 0;
    for (int step = 0; step < 20000; ++step) {
      // Arrivals and aborts between steps, as the engine's inbox delivers them.
      if (next_id < static_cast<RequestId>(num_requests) && Uniform(0, 2) == 0) {
        std::vector<TokenId> prompt = system_prompts[Uniform(0, 3)];
        const std::vector<TokenId> own = RandomTokens(Uniform(1, 30));
        prompt.insert(prompt.end(), own.begin(), own.end());
        NewRequest request = MakeRequest(next_id, prompt, Uniform(1, 25), Uniform(0, 2));
        request.cache_salt = Uniform(0, 4) == 0 ? "other" : "";
        const int max_tokens = request.sampling.max_tokens;
        const Status status = sim.Add(std::move(request));
        if (status.ok()) {
          max_tokens_of.push_back(max_tokens);
          aborted.push_back(false);
          ++next_id;
        } else if (status.code() == StatusCode::kInvalidArgument) {
          EXPECT_GE(static_cast<int>(prompt.size()), sim.scheduler().max_model_len());
          ++coverage.too_long;
        } else {
          EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
          ++coverage.queue_full;
        }
      }
      if (next_id > 0 && Uniform(0, 40) == 0) {
        const RequestId id = static_cast<RequestId>(Uniform(0, static_cast<int>(next_id) - 1));
        if (sim.scheduler().Find(id) != nullptr) {
          EXPECT_TRUE(sim.Abort(id).ok());
          aborted[id] = true;
          ++coverage.aborts;
        }
      }
      if (next_id == static_cast<RequestId>(num_requests) &&
          !sim.scheduler().has_unfinished_requests()) {
        break;
      }
      sim.Step();
      for (const ScheduledRequest& request : sim.last_output().requests) {
        if (request.is_prefill && request.num_logits == 0) ++coverage.chunked_steps;
        if (request.num_draft_tokens > 0) ++coverage.draft_steps;
      }
      if (::testing::Test::HasFailure()) return;
    }
    ASSERT_FALSE(sim.scheduler().has_unfinished_requests()) << "requests left after 20000 steps";

    for (RequestId id = 0; id < next_id; ++id) {
      if (aborted[id]) continue;
      const int prompt_length = static_cast<int>(sim.prompt(id).size());
      const int expected = std::min(max_tokens_of[id], sim.scheduler().max_model_len() -
                                                           prompt_length);
      EXPECT_EQ(static_cast<int>(sim.streamed(id).size()), expected) << "request " << id;
      ++coverage.completed;
    }
    sim.ExpectReferenceOutputs();
    const KvCacheStats cache = sim.kv_cache().Stats();
    EXPECT_EQ(cache.num_in_use_blocks, 0);
    EXPECT_EQ(cache.num_free_blocks + cache.num_cached_evictable_blocks, num_blocks);
    EXPECT_EQ(cache.sliding_num_in_use_blocks, 0);
    coverage.released_blocks += cache.sliding_released_blocks;
    coverage.preemptions += sim.scheduler().Stats().num_preemptions;
    coverage.prefix_hit_tokens += sim.scheduler().Stats().num_prefix_hit_tokens;
  }

 private:
  int Uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }
  std::vector<TokenId> RandomTokens(int count) {
    std::vector<TokenId> tokens;
    for (int i = 0; i < count; ++i) tokens.push_back(Uniform(0, kVocabSize - 1));
    return tokens;
  }

  std::mt19937_64 rng_;
  bool sliding_;
};

TEST(SchedulerRandomizedTest, EveryRequestFinishesWithItsTokensAndNoBlockLeaks) {
  Coverage coverage;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomWorkload(seed, /*sliding=*/false).Run(coverage);
    if (HasFailure()) return;
  }
  // The workloads exercised what they are meant to.
  EXPECT_GT(coverage.preemptions, 100);
  EXPECT_GT(coverage.prefix_hit_tokens, 1000);
  EXPECT_GT(coverage.aborts, 20);
  EXPECT_GT(coverage.chunked_steps, 100);
  EXPECT_GT(coverage.draft_steps, 100);
  EXPECT_GT(coverage.completed, 2000);
  EXPECT_GT(coverage.too_long, 10);
  EXPECT_GT(coverage.queue_full, 10);
}

// The same with a sliding-window KV group: the fake runner reads group 1's window before each
// row, so a released block read or a window block reused too early changes the tokens.
TEST(SchedulerRandomizedTest, SlidingWindowGroupReleasesAndKeepsEveryWindow) {
  Coverage coverage;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomWorkload(seed, /*sliding=*/true).Run(coverage);
    if (HasFailure()) return;
  }
  EXPECT_GT(coverage.released_blocks, 1000);
  EXPECT_GT(coverage.preemptions, 100);
  EXPECT_GT(coverage.prefix_hit_tokens, 1000);
  EXPECT_GT(coverage.aborts, 20);
  EXPECT_GT(coverage.chunked_steps, 100);
  EXPECT_GT(coverage.draft_steps, 100);
  EXPECT_GT(coverage.completed, 2000);
}

}  // namespace scheduler_randomized_test
}  // namespace tokenmill::testing
