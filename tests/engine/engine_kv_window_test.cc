// Bounded-memory generation (kv_window, attention sinks) through the engine core on
// stories260K, whose context is 128 tokens: a generation of 4x the context completes with a
// bounded number of KV blocks and reports its evicted tokens; without the policy the same
// request ends with `length` at the context limit; the token after an eviction is the one a
// fresh prefill of the kept tokens (sinks + recent, at their cache positions) gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

std::vector<TokenId> Prompt() {
  auto prompt = StoriesTokenizer().Encode("Once upon a time, there was a little girl named Lily.");
  TM_CHECK(prompt.ok());
  return *prompt;
}

struct WindowRun {
  Collected collected;
  int max_in_use_blocks = 0;
};

// Steps the request alone to its end, checking the cache invariants after every step.
WindowRun RunWindowed(GenerateRequest request) {
  auto core = NewCore(Stories());
  Collector collector;
  request.sink = collector.Sink(1);
  const Status added = core->Add(1, std::move(request));
  TM_CHECK(added.ok()) << added.ToString();
  WindowRun run;
  for (int i = 0; i < 10000 && core->has_unfinished_requests(); ++i) {
    TM_CHECK(core->Step());
    const Status invariants = core->scheduler().CheckInvariants();
    TM_CHECK(invariants.ok()) << invariants.ToString();
    run.max_in_use_blocks =
        std::max(run.max_in_use_blocks, core->kv_cache().Stats().num_in_use_blocks);
  }
  TM_CHECK(!core->has_unfinished_requests());
  TM_CHECK_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
  TM_CHECK(core->kv_cache().CheckInvariants().ok());
  run.collected = collector[1];
  return run;
}

int ContextLength() { return NewCore(Stories())->limits().max_model_len; }

TEST(EngineKvWindowTest, ContextIsSmall) { EXPECT_EQ(ContextLength(), 128); }

TEST(EngineKvWindowTest, FourTimesTheContextWithBoundedBlocks) {
  const int context = ContextLength();
  const std::vector<TokenId> prompt = Prompt();
  GenerateRequest request = Greedy(prompt, 4 * context, nullptr);
  request.kv_window = KvWindow{.sink_tokens = 4, .window_tokens = 0};
  const WindowRun run = RunWindowed(std::move(request));
  const Collected& c = run.collected;
  ASSERT_TRUE(c.finished);
  EXPECT_EQ(c.final_event.finish_reason, CompletionReason::kLength);
  EXPECT_EQ(c.final_event.usage.completion_tokens, 4 * context);
  ASSERT_EQ(static_cast<int>(c.token_ids.size()), 4 * context);
  // Never more blocks than the context needs (16-token blocks), though 4x was generated.
  const int block_size = 16;
  EXPECT_LE(run.max_in_use_blocks, (context + block_size - 1) / block_size);
  // All but at most a context's worth of the sequence was evicted (plus the last token,
  // sampled but never computed: eviction comes before the step that would compute it).
  const int total = static_cast<int>(prompt.size()) + 4 * context;
  EXPECT_GE(c.final_event.usage.evicted_tokens, total - context - 1);
  EXPECT_LT(c.final_event.usage.evicted_tokens, total);
}

TEST(EngineKvWindowTest, WithoutThePolicyTheSameRequestStopsAtTheContext) {
  const int context = ContextLength();
  const std::vector<TokenId> prompt = Prompt();
  const WindowRun run = RunWindowed(Greedy(prompt, 4 * context, nullptr));
  const Collected& c = run.collected;
  ASSERT_TRUE(c.finished);
  EXPECT_EQ(c.final_event.finish_reason, CompletionReason::kLength);
  EXPECT_EQ(static_cast<int>(prompt.size() + c.token_ids.size()), context);
  EXPECT_EQ(c.final_event.usage.evicted_tokens, 0);
}

TEST(EngineKvWindowTest, TokenAfterEvictionMatchesAFreshPrefillOfTheKeptTokens) {
  const std::vector<TokenId> prompt = Prompt();
  const int sinks = 16;   // one block
  const int window = 64;  // the first eviction comes at 81 tokens and keeps the last 32
  GenerateRequest request = Greedy(prompt, 100, nullptr);
  request.kv_window = KvWindow{.sink_tokens = 5, .window_tokens = window};
  const Collected windowed = RunWindowed(std::move(request)).collected;
  const Collected plain = RunWindowed(Greedy(prompt, 100, nullptr)).collected;
  std::vector<TokenId> all = prompt;
  all.insert(all.end(), windowed.token_ids.begin(), windowed.token_ids.end());

  // Before the first eviction nothing differs from a plain run.
  const int limit = sinks + window;
  const int num_before = limit + 1 - static_cast<int>(prompt.size());
  ASSERT_GT(num_before, 0);
  const auto first = [num_before](const std::vector<TokenId>& ids) {
    return std::vector<TokenId>(ids.begin(), ids.begin() + num_before);
  };
  EXPECT_EQ(first(windowed.token_ids), first(plain.token_ids));

  // At limit + 1 tokens the cache keeps the sinks and the last window / 2 tokens.
  const int recent = window / 2;
  std::vector<TokenId> kept(all.begin(), all.begin() + sinks);
  kept.insert(kept.end(), all.begin() + (limit + 1 - recent), all.begin() + limit + 1);
  const Collected fresh = RunWindowed(Greedy(kept, 3, nullptr)).collected;
  EXPECT_EQ(std::vector<TokenId>(all.begin() + limit + 1, all.begin() + limit + 4),
            fresh.token_ids);
  EXPECT_GT(windowed.final_event.usage.evicted_tokens, 0);
}

TEST(EngineKvWindowTest, RefusesSinksThatLeaveNoRoom) {
  auto core = NewCore(Stories());
  GenerateRequest request = Greedy(Prompt(), 10, [](GenerateOutput&&) {});
  request.kv_window = KvWindow{.sink_tokens = 120, .window_tokens = 0};
  const Status status = core->Add(1, std::move(request));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("kv_window.sink_tokens"), std::string::npos);
}

}  // namespace
}  // namespace tokenmill::testing
