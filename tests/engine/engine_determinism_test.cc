// Greedy decoding is deterministic bit for bit (docs/design.md section 3, "Determinism"): a
// request's tokens do not depend on what else is batched with it, on whether its prefix
// came from the cache, on how its prefill was chunked, or on being preempted. Driven step
// by step through EngineCore with stories260K.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "engine/forward_backend.h"
#include "engine/sampling/logits_processors.h"
#include "model/forward.h"
#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

struct Spec {
  std::vector<TokenId> prompt;
  int max_tokens;
};

// Each spec run by itself on a fresh engine with a roomy pool and whole prefill.
std::vector<std::vector<TokenId>> RunEachAlone(const std::vector<Spec>& specs) {
  std::vector<std::vector<TokenId>> outputs;
  for (const Spec& spec : specs) {
    auto core = BuildEngineCore(*Stories().model, *Stories().tokenizer, SmallConfig());
    TM_CHECK(core.ok()) << core.status().ToString();
    Collector collector;
    TM_CHECK((*core)->Add(1, Greedy(spec.prompt, spec.max_tokens, collector.Sink(1))).ok());
    TM_CHECK(RunToCompletion(**core));
    outputs.push_back(collector[1].token_ids);
  }
  return outputs;
}

// Sixteen requests of mixed prompt lengths and budgets; they fit stories260K's context of
// 128.
std::vector<Spec> MixedSpecs() {
  const std::vector<int> lengths = {20, 1, 3, 7, 12, 17, 25, 31, 40, 50, 60, 70, 5, 9, 33, 90};
  std::vector<Spec> specs;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int room = 127 - lengths[i];
    specs.push_back({RandomPrompt(lengths[i], StoriesVocab(), 100 + static_cast<uint32_t>(i)),
                     i == 0 ? 60 : 1 + static_cast<int>(i * 7) % room});
  }
  return specs;
}

TEST(EngineDeterminismTest, BatchedWithFifteenOthersEqualsAlone) {
  const std::vector<Spec> specs = MixedSpecs();
  const std::vector<std::vector<TokenId>> alone = RunEachAlone(specs);
  ASSERT_EQ(alone[0].size(), 60u);

  EngineConfig config = SmallConfig();
  config.scheduler.max_num_batched_tokens = 64;  // prompts are chunked too, mixed with decodes
  auto core = BuildEngineCore(*Stories().model, *Stories().tokenizer, config);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  Collector collector;
  // Half arrive first; the rest join while those decode.
  for (size_t i = 0; i < specs.size(); ++i) {
    const RequestId id = i + 1;
    ASSERT_TRUE((*core)->Add(id, Greedy(specs[i].prompt, specs[i].max_tokens,
                                        collector.Sink(id))).ok());
    if (i == 7) {
      for (int step = 0; step < 3; ++step) ASSERT_TRUE((*core)->Step());
    }
  }
  int max_batch = 0;
  while ((*core)->has_unfinished_requests()) {
    max_batch = std::max(max_batch, (*core)->Stats().num_running);
    ASSERT_TRUE((*core)->Step());
  }
  EXPECT_GE(max_batch, 12) << "the requests should have run together";
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(collector[i + 1].token_ids, alone[i]) << "request " << i + 1;
  }
}

TEST(EngineDeterminismTest, PrefixCacheHitEqualsMiss) {
  const std::vector<TokenId> shared = RandomPrompt(48, StoriesVocab(), 7);
  std::vector<TokenId> same = shared;
  same.push_back(300);
  std::vector<TokenId> other = shared;
  other.resize(32);  // shares two full blocks
  for (TokenId t : RandomPrompt(20, StoriesVocab(), 8)) other.push_back(t);
  const std::vector<Spec> specs = {{same, 50}, {same, 50}, {other, 50}};

  EngineConfig no_cache = SmallConfig();
  no_cache.enable_prefix_caching = false;
  std::vector<std::vector<TokenId>> cold;
  for (const Spec& spec : specs) {
    auto core = BuildEngineCore(*Stories().model, *Stories().tokenizer, no_cache);
    ASSERT_TRUE(core.ok());
    Collector c;
    ASSERT_TRUE((*core)->Add(1, Greedy(spec.prompt, spec.max_tokens, c.Sink(1))).ok());
    ASSERT_TRUE(RunToCompletion(**core));
    EXPECT_EQ(c[1].final_event.usage.cached_prompt_tokens, 0);
    cold.push_back(c[1].token_ids);
  }

  auto core = BuildEngineCore(*Stories().model, *Stories().tokenizer, SmallConfig());
  ASSERT_TRUE(core.ok());
  Collector collector;
  for (size_t i = 0; i < specs.size(); ++i) {
    const RequestId id = i + 1;
    ASSERT_TRUE((*core)->Add(id, Greedy(specs[i].prompt, specs[i].max_tokens,
                                        collector.Sink(id))).ok());
    ASSERT_TRUE(RunToCompletion(**core));  // one after the other: each finds the last's blocks
  }
  EXPECT_EQ(collector[1].final_event.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(collector[2].final_event.usage.cached_prompt_tokens, 48);
  EXPECT_EQ(collector[3].final_event.usage.cached_prompt_tokens, 32);
  EXPECT_EQ(collector[2].final_event.usage.prompt_tokens, 49);
  EXPECT_GE((*core)->Stats().prefix_hit_tokens, 80);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(collector[i + 1].token_ids, cold[i]) << "request " << i + 1;
  }
}

TEST(EngineDeterminismTest, ChunkedPrefillEqualsWholePrefill) {
  const std::vector<Spec> specs = {{RandomPrompt(61, StoriesVocab(), 21), 40},
                                   {RandomPrompt(9, StoriesVocab(), 22), 60}};
  const std::vector<std::vector<TokenId>> whole = RunEachAlone(specs);
  for (const int budget : {1, 5, 16, 17}) {
    EngineConfig config = SmallConfig();
    config.scheduler.max_num_batched_tokens = budget;
    auto core = BuildEngineCore(*Stories().model, *Stories().tokenizer, config);
    ASSERT_TRUE(core.ok());
    Collector collector;
    // The short one decodes while the long one's prompt comes in chunks.
    ASSERT_TRUE((*core)->Add(2, Greedy(specs[1].prompt, specs[1].max_tokens,
                                       collector.Sink(2))).ok());
    ASSERT_TRUE((*core)->Step());
    ASSERT_TRUE((*core)->Add(1, Greedy(specs[0].prompt, specs[0].max_tokens,
                                       collector.Sink(1))).ok());
    ASSERT_TRUE(RunToCompletion(**core));
    EXPECT_GE((*core)->Stats().num_steps, 61 / budget) << "budget " << budget;
    EXPECT_EQ(collector[1].token_ids, whole[0]) << "budget " << budget;
    EXPECT_EQ(collector[2].token_ids, whole[1]) << "budget " << budget;
  }
}

TEST(EngineDeterminismTest, PreemptedRequestsResumeWithTheSameTokens) {
  std::vector<Spec> specs;
  for (uint32_t i = 0; i < 6; ++i) {
    specs.push_back({RandomPrompt(20 + 3 * i, StoriesVocab(), 40 + i), 80});
  }
  const std::vector<std::vector<TokenId>> alone = RunEachAlone(specs);

  // 6 requests of ~100 tokens (7 blocks each) in a pool of 16 blocks.
  EngineConfig config = SmallConfig(16);
  auto core = BuildEngineCore(*Stories().model, *Stories().tokenizer, config);
  ASSERT_TRUE(core.ok());
  Collector collector;
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE((*core)->Add(i + 1, Greedy(specs[i].prompt, specs[i].max_tokens,
                                           collector.Sink(i + 1))).ok());
  }
  ASSERT_TRUE(RunToCompletion(**core));
  EXPECT_GT((*core)->Stats().num_preemptions, 0);
  EXPECT_EQ((*core)->kv_cache().Stats().num_in_use_blocks, 0);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(collector[i + 1].token_ids, alone[i]) << "request " << i + 1;
  }
}

}  // namespace
}  // namespace tokenmill::testing

namespace tokenmill::testing {
namespace {

// The greedy tokens of `tokenmill generate`'s path: one sequence over BatchBuilder, the
// prompt in one step, then one token per step, on the device the engine tests use.
std::vector<TokenId> GenerateAlone(const Model& model, std::span<const TokenId> prompt,
                                   int max_tokens) {
  auto backend = CreateForwardBackend(model, SmallConfig());
  TM_CHECK(backend.ok()) << backend.status().ToString();
  const int64_t num_blocks[] = {16};
  TM_CHECK((*backend)->AllocateKv(KvType::kF16, KvType::kF16, num_blocks, 16).ok());
  BatchBuilder builder(16, 16);
  const int seq = builder.AddSequence();
  std::vector<float> logits(static_cast<size_t>(model.config().n_vocab));
  std::vector<TokenId> step(prompt.begin(), prompt.end()), out;
  while (static_cast<int>(out.size()) < max_tokens) {
    TM_CHECK(builder.Append(seq, step, BatchBuilder::Logits::kLast).ok());
    TM_CHECK((*backend)->Run({builder.token_ids(), builder.batch(), builder.logit_rows()}, logits)
                 .ok());
    builder.Clear();
    out.push_back(tokenmill::Argmax(logits));
    step = {out.back()};
  }
  return out;
}

// The default model (Q4_1/Q8_0 weights, int8 activations, f16 KV): six requests batched,
// with chunked prompts, give each the tokens of generate's single-sequence path.
TEST(EngineDeterminismTest, DefaultModelBatchedEqualsGeneratePath) {
  const TestModel& smol = SmolLm2();
  const int vocab = smol.tokenizer->vocab_size();
  const std::vector<int> lengths = {40, 3, 17, 1, 29, 64};
  EngineConfig config = SmallConfig(64);
  config.num_threads = 2;
  config.scheduler.max_num_batched_tokens = 48;
  auto core = BuildEngineCore(*smol.model, *smol.tokenizer, config);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  Collector collector;
  std::vector<std::vector<TokenId>> prompts;
  for (size_t i = 0; i < lengths.size(); ++i) {
    prompts.push_back(RandomPrompt(lengths[i], vocab, 900 + static_cast<uint32_t>(i)));
    ASSERT_TRUE((*core)->Add(i + 1, Greedy(prompts[i], 16, collector.Sink(i + 1))).ok());
  }
  ASSERT_TRUE(RunToCompletion(**core));
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(collector[i + 1].token_ids, GenerateAlone(*smol.model, prompts[i], 16))
        << "request " << i + 1;
  }
}

}  // namespace
}  // namespace tokenmill::testing

namespace tokenmill::testing {
namespace {

// ForwardBackend::RunGreedy (on CUDA the device's argmax) gives each logit row the host
// Argmax of Run's logits, on the backend the engine tests use; a wrong count is a Status.
TEST(EngineDeterminismTest, RunGreedyGivesEachRowsArgmax) {
  const Model& model = *Stories().model;
  const size_t vocab = static_cast<size_t>(model.config().n_vocab);
  auto backend = CreateForwardBackend(model, SmallConfig());
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  const int64_t num_blocks[] = {16};
  ASSERT_TRUE((*backend)->AllocateKv(KvType::kF16, KvType::kF16, num_blocks, 16).ok());
  BatchBuilder builder(16, 16);
  for (uint32_t s = 0; s < 3; ++s) {
    const int seq = builder.AddSequence();
    ASSERT_TRUE(builder.Append(seq, RandomPrompt(5 + 7 * s, static_cast<int>(vocab), 40 + s),
                               BatchBuilder::Logits::kAll).ok());
  }
  const ForwardInput in{builder.token_ids(), builder.batch(), builder.logit_rows()};
  const size_t rows = in.logit_rows.size();
  StatusOr<std::span<float>> logits = (*backend)->LogitsBuffer(rows * vocab);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  ASSERT_EQ(logits->size(), rows * vocab);
  ASSERT_TRUE((*backend)->Run(in, *logits).ok());
  std::vector<int32_t> argmax(rows, -1);
  // The same step again writes the same K/V into the same slots.
  ASSERT_TRUE((*backend)->RunGreedy(in, argmax).ok());
  std::set<int32_t> distinct;
  for (size_t r = 0; r < rows; ++r) {
    EXPECT_EQ(argmax[r], tokenmill::Argmax(logits->subspan(r * vocab, vocab))) << "row " << r;
    distinct.insert(argmax[r]);
  }
  EXPECT_GT(distinct.size(), 3u);  // rows differ: not one row's answer repeated
  std::vector<int32_t> too_few(rows - 1);
  EXPECT_EQ((*backend)->RunGreedy(in, too_few).code(), StatusCode::kInvalidArgument);
}

// A greedy request takes only each row's argmax from the backend; the same request asking
// for logprobs takes every row's logits, and both get the same tokens.
TEST(EngineDeterminismTest, GreedyStepsTakeOnlyTheArgmaxAndTheSameTokens) {
  const TestModel& stories = Stories();
  const std::vector<TokenId> prompt = RandomPrompt(20, stories.tokenizer->vocab_size(), 77);
  std::vector<TokenId> tokens[2];
  for (const bool logprobs : {false, true}) {
    auto core = BuildEngineCore(*stories.model, *stories.tokenizer, SmallConfig());
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    Collector collector;
    GenerateRequest request = Greedy(prompt, 24, collector.Sink(1));
    request.sampling.logprobs = logprobs;
    ASSERT_TRUE((*core)->Add(1, std::move(request)).ok());
    ASSERT_TRUE(RunToCompletion(**core));
    const ModelRunner& runner = (*core)->runner();
    EXPECT_EQ(logprobs ? runner.argmax_steps() : runner.logits_steps(), 0);
    EXPECT_GE(logprobs ? runner.logits_steps() : runner.argmax_steps(), 24);
    tokens[logprobs] = collector[1].token_ids;
  }
  ASSERT_EQ(tokens[0].size(), 24u);
  EXPECT_EQ(tokens[0], tokens[1]);
}

}  // namespace
}  // namespace tokenmill::testing
