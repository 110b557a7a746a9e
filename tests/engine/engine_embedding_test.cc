// Embeddings (GenerateRequest::embedding) through EngineCore with stories260K: the prompt's
// final hidden states pooled (mean, cls, last) and normalized, the same vector whatever the
// prompt's chunking and whatever runs beside it, never sampling, never leaking a KV block.
// llama.cpp's own embeddings are the reference in tests/e2e/test_embeddings.py.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/embedding_pooler.h"
#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

int Width() { return Stories().model->config().n_embd; }

EngineConfig Chunked(int tokens_per_step) {
  EngineConfig config = SmallConfig();
  config.scheduler.max_num_batched_tokens = tokens_per_step;
  return config;
}

GenerateRequest Embedding(std::vector<TokenId> prompt, Pooling pooling, OutputSink sink,
                          bool normalize = true) {
  GenerateRequest request;
  request.prompt_token_ids = std::move(prompt);
  request.embedding = EmbeddingParams{.pooling = pooling, .normalize = normalize};
  request.sink = std::move(sink);
  return request;
}

// The final event of one embedding run alone on a fresh engine.
GenerateOutput EmbedAlone(const std::vector<TokenId>& prompt, Pooling pooling,
                          const EngineConfig& config = SmallConfig(), bool normalize = true) {
  const std::unique_ptr<EngineCore> core = NewCore(Stories(), config);
  Collector collector;
  TM_CHECK(core->Add(1, Embedding(prompt, pooling, collector.Sink(1), normalize)).ok());
  TM_CHECK(RunToCompletion(*core));
  TM_CHECK(core->CheckIdle().ok());
  return collector[1].final_event;
}

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b, float tolerance) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tolerance) << i;
}

double Norm(const std::vector<float>& v) {
  double sum = 0.0;
  for (const float x : v) sum += static_cast<double>(x) * x;
  return std::sqrt(sum);
}

TEST(EmbeddingPoolerTest, PoolsRowsThatComeAStepAtATime) {
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6};  // three rows of two
  EmbeddingPooler mean({.pooling = Pooling::kMean, .normalize = false}, 2);
  mean.Add(0, std::span<const float>(rows).first(4));
  mean.Add(2, std::span<const float>(rows).subspan(4));
  EXPECT_EQ(mean.Result(), (std::vector<float>{3, 4}));
  // A recompute after preemption starts at position 0 again.
  mean.Add(0, std::span<const float>(rows).first(2));
  EXPECT_EQ(mean.Result(), (std::vector<float>{1, 2}));

  EmbeddingPooler cls({.pooling = Pooling::kCls, .normalize = false}, 2);
  cls.Add(0, std::span<const float>(rows).first(4));
  cls.Add(2, std::span<const float>(rows).subspan(4));
  EXPECT_EQ(cls.Result(), (std::vector<float>{1, 2}));

  EmbeddingPooler last({.pooling = Pooling::kLast, .normalize = true}, 2);
  EXPECT_TRUE(last.Result().empty());
  last.Add(2, std::vector<float>{3, 4});
  EXPECT_EQ(last.Result(), (std::vector<float>{0.6f, 0.8f}));
}

TEST(EngineEmbeddingTest, EachPoolingGivesOneUnitVectorAndSamplesNothing) {
  const std::vector<TokenId> prompt = RandomPrompt(23, StoriesVocab(), 5);
  for (const Pooling pooling : {Pooling::kMean, Pooling::kCls, Pooling::kLast}) {
    const GenerateOutput out = EmbedAlone(prompt, pooling);
    EXPECT_EQ(out.finish_reason, CompletionReason::kStop) << PoolingName(pooling);
    EXPECT_TRUE(out.token_ids.empty());
    EXPECT_EQ(out.usage.prompt_tokens, 23);
    EXPECT_EQ(out.usage.completion_tokens, 0);
    ASSERT_EQ(static_cast<int>(out.embedding.size()), Width());
    EXPECT_NEAR(Norm(out.embedding), 1.0, 1e-5);
    // Raw: the same direction, unscaled.
    const GenerateOutput raw = EmbedAlone(prompt, pooling, SmallConfig(), /*normalize=*/false);
    const double norm = Norm(raw.embedding);
    EXPECT_GT(std::abs(norm - 1.0), 1e-3);
    for (size_t i = 0; i < raw.embedding.size(); ++i) {
      EXPECT_NEAR(raw.embedding[i] / norm, out.embedding[i], 1e-5);
    }
  }
  // The poolings differ: they read different rows.
  EXPECT_NE(EmbedAlone(prompt, Pooling::kMean).embedding,
            EmbedAlone(prompt, Pooling::kLast).embedding);
}

TEST(EngineEmbeddingTest, TheVectorDoesNotDependOnHowThePromptIsChunked) {
  const std::vector<TokenId> prompt = RandomPrompt(45, StoriesVocab(), 9);
  for (const Pooling pooling : {Pooling::kMean, Pooling::kCls, Pooling::kLast}) {
    const GenerateOutput whole = EmbedAlone(prompt, pooling);
    for (const int chunk : {1, 7, 16}) {
      SCOPED_TRACE(std::string(PoolingName(pooling)) + " in chunks of " + std::to_string(chunk));
      ExpectNear(EmbedAlone(prompt, pooling, Chunked(chunk)).embedding, whole.embedding, 1e-5f);
    }
  }
  // A one-token prompt: mean, cls and last are its one row.
  const std::vector<TokenId> one = {prompt[0]};
  ExpectNear(EmbedAlone(one, Pooling::kMean).embedding, EmbedAlone(one, Pooling::kLast).embedding,
             1e-6f);
}

TEST(EngineEmbeddingTest, BatchedWithGenerationsNeitherChanges) {
  const std::vector<TokenId> gen_prompt = RandomPrompt(12, StoriesVocab(), 1);
  Collector alone;
  {
    const std::unique_ptr<EngineCore> core = NewCore(Stories());
    ASSERT_TRUE(core->Add(1, Greedy(gen_prompt, 20, alone.Sink(1))).ok());
    ASSERT_TRUE(RunToCompletion(*core));
  }
  std::vector<std::vector<TokenId>> prompts;
  for (uint32_t i = 0; i < 6; ++i) {
    prompts.push_back(RandomPrompt(5 + 9 * i, StoriesVocab(), 20 + i));
  }
  const std::unique_ptr<EngineCore> core = NewCore(Stories(), Chunked(24));
  Collector together;
  ASSERT_TRUE(core->Add(1, Greedy(gen_prompt, 20, together.Sink(1))).ok());
  // Added while the generation decodes: they share its steps.
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(core->Step());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Pooling pooling = i % 2 == 0 ? Pooling::kMean : Pooling::kLast;
    ASSERT_TRUE(core->Add(10 + static_cast<RequestId>(i),
                          Embedding(prompts[i], pooling, together.Sink(10 + i)))
                    .ok());
  }
  ASSERT_TRUE(RunToCompletion(*core));
  ASSERT_TRUE(core->CheckIdle().ok());
  EXPECT_EQ(together[1].token_ids, alone[1].token_ids);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Pooling pooling = i % 2 == 0 ? Pooling::kMean : Pooling::kLast;
    ExpectNear(together[10 + static_cast<RequestId>(i)].final_event.embedding,
               EmbedAlone(prompts[i], pooling).embedding, 1e-5f);
  }
}

TEST(EngineEmbeddingTest, OnlyLastTokenPoolingReadsTheCachedPrefix) {
  const std::vector<TokenId> prompt = RandomPrompt(40, StoriesVocab(), 3);
  for (const Pooling pooling : {Pooling::kMean, Pooling::kLast}) {
    const std::unique_ptr<EngineCore> core = NewCore(Stories());
    Collector collector;
    ASSERT_TRUE(core->Add(1, Embedding(prompt, pooling, collector.Sink(1))).ok());
    ASSERT_TRUE(RunToCompletion(*core));
    ASSERT_TRUE(core->Add(2, Embedding(prompt, pooling, collector.Sink(2))).ok());
    ASSERT_TRUE(RunToCompletion(*core));
    ASSERT_TRUE(core->CheckIdle().ok());
    const int cached = collector[2].final_event.usage.cached_prompt_tokens;
    if (pooling == Pooling::kLast) {
      EXPECT_GE(cached, 32);  // its full blocks
    } else {
      EXPECT_EQ(cached, 0);  // every row counts
    }
    ExpectNear(collector[2].final_event.embedding, collector[1].final_event.embedding, 1e-5f);
  }
}

TEST(EngineEmbeddingTest, APreemptedEmbeddingPoolsItsRecomputeOnly) {
  // A generation of 50 + 60 tokens and an embedding of 60, blocks of 16, in 7 blocks: the
  // embedding, admitted last, is preempted part way and recomputes after the generation.
  EngineConfig config = SmallConfig(/*num_kv_blocks=*/7);
  config.scheduler.max_num_batched_tokens = 8;
  const std::unique_ptr<EngineCore> core = NewCore(Stories(), config);
  Collector collector;
  ASSERT_TRUE(
      core->Add(1, Greedy(RandomPrompt(50, StoriesVocab(), 49), 60, collector.Sink(1))).ok());
  for (int step = 0; step < 7; ++step) ASSERT_TRUE(core->Step());
  const std::vector<TokenId> prompt = RandomPrompt(60, StoriesVocab(), 50);
  ASSERT_TRUE(core->Add(2, Embedding(prompt, Pooling::kMean, collector.Sink(2))).ok());
  ASSERT_TRUE(RunToCompletion(*core));
  ASSERT_TRUE(core->CheckIdle().ok());
  EXPECT_GT(core->Stats().num_preemptions, 0);
  ExpectNear(collector[2].final_event.embedding, EmbedAlone(prompt, Pooling::kMean).embedding,
             1e-5f);
}

TEST(EngineEmbeddingTest, APromptMayFillTheContext) {
  EngineConfig config = SmallConfig();
  config.scheduler.max_model_len = 32;
  const GenerateOutput out =
      EmbedAlone(RandomPrompt(32, StoriesVocab(), 8), Pooling::kLast, config);
  EXPECT_EQ(out.finish_reason, CompletionReason::kStop);
  EXPECT_EQ(static_cast<int>(out.embedding.size()), Width());
}

TEST(EngineEmbeddingTest, AbortedEmbeddingGivesItsBlocksBack) {
  const std::unique_ptr<EngineCore> core = NewCore(Stories(), Chunked(8));
  Collector collector;
  ASSERT_TRUE(core->Add(1, Embedding(RandomPrompt(60, StoriesVocab(), 4), Pooling::kMean,
                                     collector.Sink(1)))
                  .ok());
  ASSERT_TRUE(core->Step());
  ASSERT_TRUE(core->Abort(1));
  EXPECT_EQ(collector[1].final_event.finish_reason, CompletionReason::kAbort);
  EXPECT_TRUE(collector[1].final_event.embedding.empty());
  EXPECT_TRUE(core->CheckIdle().ok());
}

TEST(EngineEmbeddingTest, RefusesWhatOnlyAGenerationUses) {
  const RequestLimits limits{.max_model_len = 128, .vocab_size = StoriesVocab()};
  GenerateRequest request = Embedding({1, 2, 3}, Pooling::kMean, [](GenerateOutput&&) {});
  EXPECT_TRUE(ValidateGenerateRequest(request, limits).ok());
  request.n = 2;
  EXPECT_EQ(ValidateGenerateRequest(request, limits).code(), StatusCode::kInvalidArgument);
  request.n = 1;
  request.stop_strings = {"x"};
  EXPECT_EQ(ValidateGenerateRequest(request, limits).code(), StatusCode::kInvalidArgument);
  request.stop_strings.clear();
  // It generates nothing: its prompt may fill the context, one more token may not.
  request.prompt_token_ids.assign(128, 5);
  EXPECT_TRUE(ValidateGenerateRequest(request, limits).ok());
  request.prompt_token_ids.push_back(5);
  EXPECT_EQ(ValidateGenerateRequest(request, limits).code(), StatusCode::kOutOfRange);
  request.prompt_token_ids.assign(3, 5);
  request.embedding->pooling = Pooling::kNone;
  EXPECT_EQ(ValidateGenerateRequest(request, limits).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tokenmill::testing
