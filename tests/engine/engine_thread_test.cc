// The engine thread: submitters on several threads, aborts through the inbox, an idle loop
// that sleeps, and shutdown with requests in flight (drained, or aborted with an event).
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<Engine> NewEngine(EngineConfig config = SmallConfig()) {
  auto engine = Engine::Create(*Stories().model, *Stories().tokenizer, config);
  TM_CHECK(engine.ok()) << engine.status().ToString();
  return std::move(*engine);
}

// Reads a stream to its final event (failing after a generous timeout).
Collected Drain(OutputStream& stream) {
  Collected collected;
  while (!collected.finished) {
    std::optional<GenerateOutput> out = stream.NextFor(milliseconds(60000));
    if (!out) {
      ADD_FAILURE() << "no final event within a minute";
      break;
    }
    Accumulate(collected, std::move(*out));
  }
  return collected;
}

std::vector<TokenId> AloneTokens(const std::vector<TokenId>& prompt, int max_tokens) {
  auto core = BuildEngineCore(*Stories().model, *Stories().tokenizer, SmallConfig());
  TM_CHECK(core.ok());
  Collector collector;
  TM_CHECK((*core)->Add(1, Greedy(prompt, max_tokens, collector.Sink(1))).ok());
  TM_CHECK(RunToCompletion(**core));
  return collector[1].token_ids;
}

TEST(EngineThreadTest, ManySubmittersOnSeveralThreads) {
  constexpr int kThreads = 4, kPerThread = 6;
  EngineConfig config = SmallConfig();
  config.num_threads = 2;
  auto engine = NewEngine(config);
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < kThreads * kPerThread; ++i) {
    prompts.push_back(RandomPrompt(5 + i * 3, StoriesVocab(), 500 + static_cast<uint32_t>(i)));
  }
  std::vector<std::unique_ptr<OutputStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) streams.push_back(std::make_unique<OutputStream>());
  std::vector<RequestId> ids(prompts.size());
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int k = 0; k < kPerThread; ++k) {
        const size_t i = static_cast<size_t>(t * kPerThread + k);
        auto id = engine->Submit(Greedy(prompts[i], 30, streams[i]->Sink()));
        TM_CHECK(id.ok()) << id.status().ToString();
        ids[i] = *id;
        std::this_thread::sleep_for(milliseconds(k));
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  EXPECT_EQ(std::set<RequestId>(ids.begin(), ids.end()).size(), ids.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Collected c = Drain(*streams[i]);
    EXPECT_EQ(c.final_event.id, ids[i]);
    EXPECT_EQ(c.final_event.finish_reason, CompletionReason::kLength);
    EXPECT_EQ(c.token_ids, AloneTokens(prompts[i], 30)) << "request " << i;
  }
  engine->Shutdown();
  const EngineStats stats = engine->Stats();
  EXPECT_EQ(stats.num_finished, static_cast<int64_t>(prompts.size()));
  EXPECT_EQ(stats.num_generation_tokens, 30 * static_cast<int64_t>(prompts.size()));
  EXPECT_EQ(stats.num_kv_blocks_in_use, 0);
  EXPECT_EQ(stats.num_running + stats.num_waiting, 0);
}

TEST(EngineThreadTest, AbortFreesBlocksWithinOneStep) {
  auto engine = NewEngine();
  OutputStream stream;
  auto id = engine->Submit(Greedy(RandomPrompt(40, StoriesVocab(), 9), 80, stream.Sink()));
  ASSERT_TRUE(id.ok());
  GenerateOutput first = stream.Next();
  ASSERT_FALSE(first.finished);
  engine->Abort(*id);
  const int64_t steps_at_abort = engine->Stats().num_steps;
  Collected rest = Drain(stream);
  EXPECT_EQ(rest.final_event.finish_reason, CompletionReason::kAbort);
  EXPECT_LT(first.token_ids.size() + rest.token_ids.size(), 80u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  EngineStats stats = engine->Stats();
  while (stats.num_kv_blocks_in_use != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
    stats = engine->Stats();
  }
  EXPECT_EQ(stats.num_kv_blocks_in_use, 0);
  // At most the step in flight when Abort was posted ran after it.
  EXPECT_LE(stats.num_steps, steps_at_abort + 1);
  engine->Abort(*id);  // a finished id: no-op
  engine->Abort(12345);
}

TEST(EngineThreadTest, IdleLoopRunsNoSteps) {
  auto engine = NewEngine();
  OutputStream stream;
  ASSERT_TRUE(engine->Submit(Greedy(RandomPrompt(4, StoriesVocab(), 3), 3, stream.Sink())).ok());
  Drain(stream);
  std::this_thread::sleep_for(milliseconds(20));
  const int64_t steps = engine->Stats().num_steps;
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(engine->Stats().num_steps, steps);
}

// Waits until the engine has run `count` idle checks (or 10 s pass).
EngineStats WaitForIdleChecks(const Engine& engine, int64_t count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  EngineStats stats = engine.Stats();
  while (stats.idle_checks < count && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
    stats = engine.Stats();
  }
  return stats;
}

TEST(EngineThreadTest, IdleCheckRunsOncePerIdlePeriodAndPasses) {
  auto engine = NewEngine();
  EXPECT_EQ(engine->Stats().idle_checks, 0);  // a fresh engine has had no request yet
  OutputStream finished;
  ASSERT_TRUE(engine->Submit(Greedy(RandomPrompt(20, StoriesVocab(), 4), 5, finished.Sink())).ok());
  Drain(finished);
  EngineStats stats = WaitForIdleChecks(*engine, 1);
  EXPECT_EQ(stats.idle_checks, 1);
  // An aborted request and one sequence group (n = 3) sharing prompt blocks.
  OutputStream aborted, group;
  auto id = engine->Submit(Greedy(RandomPrompt(40, StoriesVocab(), 5), 200, aborted.Sink()));
  ASSERT_TRUE(id.ok());
  GenerateRequest three = Greedy(RandomPrompt(35, StoriesVocab(), 6), 8, group.Sink());
  three.n = 3;
  ASSERT_TRUE(engine->Submit(std::move(three)).ok());
  ASSERT_FALSE(aborted.Next().finished);
  engine->Abort(*id);
  Drain(aborted);
  for (int finals = 0; finals < 3;) finals += group.Next().finished ? 1 : 0;
  stats = WaitForIdleChecks(*engine, 2);
  EXPECT_EQ(stats.idle_checks, 2);
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(engine->Stats().idle_checks, 2);  // idle: no further checks
  EXPECT_EQ(stats.idle_check_failures, 0);
  EXPECT_EQ(stats.num_kv_blocks_in_use, 0);
}

TEST(EngineThreadTest, ShutdownDrainsRequestsInFlight) {
  auto engine = NewEngine();
  std::vector<std::unique_ptr<OutputStream>> streams;
  for (uint32_t i = 0; i < 4; ++i) {
    streams.push_back(std::make_unique<OutputStream>());
    ASSERT_TRUE(
        engine->Submit(Greedy(RandomPrompt(10, StoriesVocab(), i), 20, streams.back()->Sink()))
            .ok());
  }
  engine->Shutdown();  // drains without a time limit
  for (auto& stream : streams) {
    const Collected c = Drain(*stream);
    EXPECT_EQ(c.final_event.finish_reason, CompletionReason::kLength);
    EXPECT_EQ(c.token_ids.size(), 20u);
  }
  const auto refused = engine->Submit(Greedy({5, 6}, 3, streams[0]->Sink()));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  engine->Shutdown();  // idempotent
}

TEST(EngineThreadTest, ShutdownPastItsDrainTimeAbortsTheRest) {
  EngineConfig config = SmallConfig();
  config.scheduler.max_num_seqs = 2;  // some wait in the queue
  auto engine = NewEngine(config);
  std::vector<std::unique_ptr<OutputStream>> streams;
  for (uint32_t i = 0; i < 6; ++i) {
    streams.push_back(std::make_unique<OutputStream>());
    ASSERT_TRUE(
        engine->Submit(Greedy(RandomPrompt(10, StoriesVocab(), i), 110, streams.back()->Sink()))
            .ok());
  }
  streams[0]->Next();  // at least one is running
  engine->Shutdown(milliseconds(0));
  int aborted = 0;
  for (auto& stream : streams) {
    const Collected c = Drain(*stream);
    ASSERT_TRUE(c.finished);
    if (c.final_event.finish_reason == CompletionReason::kAbort) ++aborted;
    // Nothing after the final event.
    EXPECT_FALSE(stream->TryNext().has_value());
  }
  EXPECT_GE(aborted, 4);
  EXPECT_EQ(engine->Stats().num_kv_blocks_in_use, 0);
}

TEST(EngineThreadTest, DestructorWithRequestsInFlightSendsAbortEvents) {
  std::vector<std::unique_ptr<OutputStream>> streams;
  {
    auto engine = NewEngine();
    for (uint32_t i = 0; i < 3; ++i) {
      streams.push_back(std::make_unique<OutputStream>());
      ASSERT_TRUE(
          engine->Submit(Greedy(RandomPrompt(8, StoriesVocab(), i), 110, streams.back()->Sink()))
              .ok());
    }
  }
  for (auto& stream : streams) EXPECT_TRUE(Drain(*stream).finished);
}

TEST(EngineThreadTest, BadRequestsFailInSubmit) {
  auto engine = NewEngine();
  OutputStream stream;
  EXPECT_EQ(engine->Submit(Greedy({}, 3, stream.Sink())).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Submit(Greedy({1, 2}, 0, stream.Sink())).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Submit(Greedy(std::vector<TokenId>(engine->max_model_len(), 5), 1,
                                  stream.Sink())).status().code(),
            StatusCode::kOutOfRange);
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(stream.TryNext().has_value());
}

TEST(EngineThreadTest, FullQueueRefusesInSubmit) {
  EngineConfig config = SmallConfig();
  config.scheduler.max_num_seqs = 1;
  config.scheduler.max_queue = 2;
  auto engine = NewEngine(config);
  std::vector<std::unique_ptr<OutputStream>> streams;
  std::vector<RequestId> ids;
  for (uint32_t i = 0; i < 4; ++i) {
    streams.push_back(std::make_unique<OutputStream>());
    auto id =
        engine->Submit(Greedy(RandomPrompt(8, StoriesVocab(), i), 110, streams.back()->Sink()));
    if (i < 3) {
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      ids.push_back(*id);
    } else {
      EXPECT_EQ(id.status().code(), StatusCode::kResourceExhausted);
    }
    // The first one runs before the others queue behind it: from its first event on, the
    // engine no longer counts it as waiting.
    if (i == 0) {
      ASSERT_FALSE(streams[0]->Next().finished);
    }
  }
  for (const RequestId id : ids) engine->Abort(id);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_TRUE(Drain(*streams[i]).finished);
  EXPECT_FALSE(streams[3]->TryNext().has_value());
}

// A client may answer a request's first token with a new request at once (on the engine
// thread here, which makes the race of tests/e2e's full-queue test certain): the request it
// saw start must no longer count against --max-queue.
TEST(EngineThreadTest, RequestThatStartedRunningFreesItsQueuePlaceBeforeItsFirstEvent) {
  EngineConfig config = SmallConfig();
  config.scheduler.max_num_seqs = 1;
  config.scheduler.max_queue = 1;
  // Before the engine: its destructor may still call sinks.
  OutputStream first_stream, second_stream;
  std::optional<StatusOr<RequestId>> second;  // set on the engine thread before the push
  auto engine = NewEngine(config);
  OutputSink first_sink = first_stream.Sink();
  auto first = engine->Submit(
      Greedy(RandomPrompt(8, StoriesVocab(), 1), 110, [&, first_sink](GenerateOutput&& out) {
        if (!second) {
          second =
              engine->Submit(Greedy(RandomPrompt(8, StoriesVocab(), 2), 4, second_stream.Sink()));
        }
        first_sink(std::move(out));  // the stream's lock publishes `second` to the reader
      }));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_FALSE(first_stream.Next().finished);
  ASSERT_TRUE(second.has_value());
  ASSERT_TRUE(second->ok()) << second->status().ToString();
  // The queue is full now: a third is refused.
  OutputStream third_stream;
  auto third = engine->Submit(Greedy(RandomPrompt(8, StoriesVocab(), 3), 4, third_stream.Sink()));
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  engine->Abort(*first);
  EXPECT_TRUE(Drain(first_stream).finished);
  const Collected served = Drain(second_stream);
  EXPECT_EQ(served.token_ids.size(), 4u);
}

TEST(EngineThreadTest, CreateRefusesConfigsThatCannotWork) {
  EngineConfig config = SmallConfig();
  config.block_size = 0;
  auto engine = Engine::Create(*Stories().model, *Stories().tokenizer, config);
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  config = SmallConfig(1);
  engine = Engine::Create(*Stories().model, *Stories().tokenizer, config);
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("more memory"), std::string::npos);
  config = SmallConfig(0);
  config.kv_cache_bytes = 100;
  engine = Engine::Create(*Stories().model, *Stories().tokenizer, config);
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tokenmill::testing
