// Beam search in the engine against a beam search written here over the same engine's
// teacher-forced logprobs (each hypothesis's tokens sent again as a prompt): the forks' copied
// KV blocks must give the very logits a fresh computation gives, so hypotheses and scores are
// equal exactly. Then what paged KV promises: prefix blocks shared, not copied; every block
// back after the end, an abort or preemptions; ordinary requests beside beams unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/beam_search.h"
#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

GenerateRequest Beam(std::vector<TokenId> prompt, int width, int max_tokens, OutputSink sink,
                     bool ignore_eos = false, float length_penalty = 1.0f) {
  GenerateRequest request = Greedy(std::move(prompt), max_tokens, std::move(sink), ignore_eos);
  request.n = width;
  request.beam_search = BeamSearchParams{.length_penalty = length_penalty};
  return request;
}

// The 2w most likely next tokens after `tokens`, from a fresh request on `core`.
std::vector<TokenLogprob> TeacherForcedTop(EngineCore& core, const std::vector<TokenId>& tokens,
                                           int top) {
  Collector collector;
  GenerateRequest request = Greedy(tokens, 1, collector.Sink(7777));
  request.sampling.logprobs = true;
  request.sampling.top_logprobs = top;
  TM_CHECK(core.Add(7777, std::move(request)).ok());
  TM_CHECK(RunToCompletion(core));
  return collector[7777].logprobs.at(0).top;
}

// vLLM's beam search, written out: BeamSearch's contract in engine/generate_request.h.
std::vector<BeamHypothesis> ReferenceBeamSearch(EngineCore& core,
                                                const std::vector<TokenId>& prompt, int width,
                                                int max_tokens, bool ignore_eos,
                                                float length_penalty,
                                                const std::vector<TokenId>& eos_ids) {
  const int n_prompt = static_cast<int>(prompt.size());
  const auto score = [&](const BeamHypothesis& h) {
    return BeamScore(h, n_prompt, length_penalty);
  };
  std::vector<BeamHypothesis> beams(1);
  std::vector<BeamHypothesis> finished;
  for (int step = 0; step < max_tokens; ++step) {
    std::vector<BeamHypothesis> candidates;
    for (const BeamHypothesis& beam : beams) {
      std::vector<TokenId> tokens = prompt;
      tokens.insert(tokens.end(), beam.token_ids.begin(), beam.token_ids.end());
      for (const TokenLogprob& c : TeacherForcedTop(core, tokens, 2 * width)) {
        BeamHypothesis next = beam;
        next.token_ids.push_back(c.token_id);
        next.cumulative_logprob += static_cast<double>(c.logprob);
        const bool eos = std::find(eos_ids.begin(), eos_ids.end(), c.token_id) != eos_ids.end();
        next.ended = eos && !ignore_eos;
        (next.ended ? finished : candidates).push_back(std::move(next));
      }
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](const BeamHypothesis& a, const BeamHypothesis& b) {
                       return score(a) > score(b);
                     });
    candidates.resize(std::min(candidates.size(), static_cast<size_t>(width)));
    beams = std::move(candidates);
  }
  finished.insert(finished.end(), beams.begin(), beams.end());
  std::stable_sort(finished.begin(), finished.end(),
                   [&](const BeamHypothesis& a, const BeamHypothesis& b) {
                     return score(a) > score(b);
                   });
  finished.resize(std::min(finished.size(), static_cast<size_t>(width)));
  return finished;
}

// Runs the request on `core` to completion, checking the pool's invariants after every step.
void RunChecked(EngineCore& core) {
  for (int steps = 0; core.has_unfinished_requests(); ++steps) {
    ASSERT_LT(steps, 100000);
    ASSERT_TRUE(core.Step());
    const Status invariants = core.scheduler().CheckInvariants();
    ASSERT_TRUE(invariants.ok()) << invariants.ToString();
  }
  EXPECT_TRUE(core.CheckIdle().ok());
}

void ExpectEqualHypotheses(const SequenceCollector& hypotheses,
                           const std::vector<BeamHypothesis>& expected) {
  ASSERT_EQ(hypotheses.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const Collected& got = hypotheses[static_cast<int>(i)];
    SCOPED_TRACE("hypothesis " + std::to_string(i));
    ASSERT_TRUE(got.finished);
    EXPECT_EQ(got.token_ids, expected[i].token_ids);
    ASSERT_TRUE(got.final_event.cumulative_logprob.has_value());
    EXPECT_EQ(*got.final_event.cumulative_logprob, expected[i].cumulative_logprob);
    EXPECT_EQ(got.final_event.finish_reason,
              expected[i].ended ? CompletionReason::kStop : CompletionReason::kLength);
    EXPECT_EQ(got.final_event.index, static_cast<int>(i));
  }
}

struct Case {
  int width;
  int max_tokens;
  int prompt_length;
  bool ignore_eos;
  float length_penalty;
};

// Returns the beam core's stats.
EngineStats CheckAgainstReference(const TestModel& model, EngineConfig config, const Case& c,
                                  uint32_t seed) {
  SCOPED_TRACE("width " + std::to_string(c.width) + ", seed " + std::to_string(seed));
  auto core = NewCore(model, config);
  auto reference_core = NewCore(model, SmallConfig());
  const std::vector<TokenId> prompt =
      RandomPrompt(c.prompt_length, model.tokenizer->vocab_size(), seed);
  SequenceCollector hypotheses;
  EXPECT_TRUE(core->Add(100, Beam(prompt, c.width, c.max_tokens, hypotheses.Sink(),
                                  c.ignore_eos, c.length_penalty)).ok());
  RunChecked(*core);
  ExpectEqualHypotheses(
      hypotheses,
      ReferenceBeamSearch(*reference_core, prompt, c.width, c.max_tokens, c.ignore_eos,
                          c.length_penalty, model.tokenizer->end_of_generation_ids()));
  return core->Stats();
}

TEST(EngineBeamSearchTest, EqualsReferenceOnStoriesForWidthsOneToEight) {
  for (const int width : {1, 2, 3, 5, 8}) {
    CheckAgainstReference(Stories(), SmallConfig(), {width, 10, 21, false, 1.0f},
                          static_cast<uint32_t>(width));
  }
}

TEST(EngineBeamSearchTest, EqualsReferenceWithEosIgnoredAndALengthPenalty) {
  CheckAgainstReference(Stories(), SmallConfig(), {4, 12, 16, true, 0.5f}, 11);
  CheckAgainstReference(Stories(), SmallConfig(), {3, 8, 33, false, 2.0f}, 12);
}

TEST(EngineBeamSearchTest, EqualsReferenceOnSmolLm2) {
#ifdef TOKENMILL_TEST_ON_CUDA
  GTEST_SKIP() << "the GPU bundle carries stories260K only";
#endif
  CheckAgainstReference(SmolLm2(), SmallConfig(), {4, 6, 20, false, 1.0f}, 21);
}

TEST(EngineBeamSearchTest, EqualsReferenceOnGemma3WithItsSlidingWindowGroup) {
#ifdef TOKENMILL_TEST_ON_CUDA
  GTEST_SKIP() << "the GPU bundle carries stories260K only";
#endif
  // Past its 512-token window group 1 has released its first blocks: forks share the rest
  // and copy their partial block in both groups.
  const TestModel& gemma = LoadTestModel("gemma-3-270m-q4_k_m.gguf");
  auto probe = NewCore(gemma, SmallConfig());
  ASSERT_EQ(probe->kv_cache().num_groups(), 2);
  CheckAgainstReference(gemma, SmallConfig(), {3, 4, 530, false, 1.0f}, 25);
}

TEST(EngineBeamSearchTest, EqualsReferenceUnderPreemptionAndFewSeats) {
  // Beams wait for seats (forks recompute from the cached prefix) and preempt each other.
  EngineConfig seats = SmallConfig();
  seats.scheduler.max_num_seqs = 2;
  EXPECT_GT(CheckAgainstReference(Stories(), seats, {4, 10, 30, true, 1.0f}, 31).num_preemptions,
            0);
  EngineConfig pool = SmallConfig(8);
  EXPECT_GT(CheckAgainstReference(Stories(), pool, {5, 16, 40, true, 1.0f}, 32).num_preemptions,
            0);
  EngineConfig uncached = SmallConfig();
  uncached.enable_prefix_caching = false;
  CheckAgainstReference(Stories(), uncached, {4, 10, 30, true, 1.0f}, 33);
}

TEST(EngineBeamSearchTest, WidthOneIsGreedy) {
  auto core = NewCore(Stories(), SmallConfig());
  const std::vector<TokenId> prompt = RandomPrompt(25, Stories().tokenizer->vocab_size(), 41);
  SequenceCollector beam;
  Collector collector;
  ASSERT_TRUE(core->Add(1, Beam(prompt, 1, 20, beam.Sink(), true)).ok());
  ASSERT_TRUE(core->Add(2, Greedy(prompt, 20, collector.Sink(2), true)).ok());
  RunChecked(*core);
  EXPECT_EQ(beam[0].token_ids, collector[2].token_ids);
  EXPECT_EQ(beam[0].token_ids.size(), 20u);
}

TEST(EngineBeamSearchTest, ForksShareFullBlocksAndCopyOnlyThePartialOne) {
  // 40 prompt tokens: two full blocks and 8 tokens of a third. The first decision turns one
  // beam into four: the parent keeps its blocks, three forks share the two full ones and
  // each copies the partial one.
  auto core = NewCore(Stories(), SmallConfig());
  SequenceCollector hypotheses;
  ASSERT_TRUE(core->Add(1, Beam(RandomPrompt(40, Stories().tokenizer->vocab_size(), 51), 4, 5,
                                hypotheses.Sink(), true)).ok());
  ASSERT_TRUE(core->Step());  // the prompt, then the first decision
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 2 + 4);
  std::vector<std::vector<BlockId>> tables;
  for (RequestId id = kFirstBeamId; id < kFirstBeamId + 4; ++id) {
    const std::span<const BlockId> table = core->kv_cache().BlockTable(id);
    ASSERT_EQ(table.size(), 3u) << "beam " << id;
    tables.emplace_back(table.begin(), table.end());
  }
  for (const std::vector<BlockId>& table : tables) {
    EXPECT_EQ(table[0], tables[0][0]);
    EXPECT_EQ(table[1], tables[0][1]);
    EXPECT_EQ(core->kv_cache().pool().block(table[0]).ref_count, 4);
  }
  ASSERT_TRUE(core->Step());  // the copies, then the four beams' next tokens
  EXPECT_TRUE(core->scheduler().CheckInvariants().ok());
  RunChecked(*core);
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
}

TEST(EngineBeamSearchTest, AbortFreesEveryBeam) {
  auto core = NewCore(Stories(), SmallConfig());
  SequenceCollector hypotheses;
  ASSERT_TRUE(core->Add(1, Beam(RandomPrompt(30, Stories().tokenizer->vocab_size(), 61), 6, 50,
                                hypotheses.Sink(), true)).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(core->Step());
  ASSERT_GT(core->kv_cache().Stats().num_in_use_blocks, 0);
  EXPECT_TRUE(core->Abort(1));
  ASSERT_EQ(hypotheses.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(hypotheses[i].finished);
    EXPECT_EQ(hypotheses[i].final_event.finish_reason, CompletionReason::kAbort);
  }
  EXPECT_FALSE(core->has_unfinished_requests());
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
  EXPECT_TRUE(core->CheckIdle().ok());
  EXPECT_FALSE(core->Abort(1));
}

TEST(EngineBeamSearchTest, OrdinaryRequestsBesideBeamsAreUnchanged) {
  const int vocab = Stories().tokenizer->vocab_size();
  const auto run = [&](bool with_beams) {
    auto core = NewCore(Stories(), SmallConfig());
    Collector collector;
    std::vector<SequenceCollector> beams(3);
    for (RequestId id = 1; id <= 3; ++id) {
      GenerateRequest request =
          Greedy(RandomPrompt(20 + static_cast<int>(id), vocab, 70 + static_cast<uint32_t>(id)),
                 24, collector.Sink(id));
      request.sampling.logprobs = true;
      request.sampling.top_logprobs = 5;
      TM_CHECK(core->Add(id, std::move(request)).ok());
      if (with_beams) {
        TM_CHECK(core->Add(100 * id, Beam(RandomPrompt(18, vocab, 80 + static_cast<uint32_t>(id)),
                                          4, 16, beams[id - 1].Sink(), true)).ok());
      }
    }
    TM_CHECK(RunToCompletion(*core));
    std::vector<Collected> ordinary;
    for (RequestId id = 1; id <= 3; ++id) ordinary.push_back(collector[id]);
    return ordinary;
  };
  const std::vector<Collected> alone = run(false);
  const std::vector<Collected> beside = run(true);
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_EQ(beside[i].token_ids, alone[i].token_ids);
    ASSERT_EQ(beside[i].logprobs.size(), alone[i].logprobs.size());
    for (size_t t = 0; t < alone[i].logprobs.size(); ++t) {
      EXPECT_EQ(beside[i].logprobs[t].chosen.logprob, alone[i].logprobs[t].chosen.logprob);
    }
  }
}

TEST(EngineBeamSearchTest, RefusesWhatItDoesNotCombineWith) {
  auto core = NewCore(Stories(), SmallConfig());
  SequenceCollector collector;
  GenerateRequest hot = Beam({1, 2, 3}, 2, 4, collector.Sink());
  hot.sampling.temperature = 0.7f;
  const Status status = core->Add(1, std::move(hot));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("sampling.temperature does not combine with beam search"),
            std::string::npos)
      << status.ToString();
  GenerateRequest stops = Beam({1, 2, 3}, 2, 4, collector.Sink());
  stops.stop_strings = {"x"};
  EXPECT_EQ(core->Add(2, std::move(stops)).code(), StatusCode::kInvalidArgument);
  GenerateRequest penalty = Beam({1, 2, 3}, 2, 4, collector.Sink());
  penalty.beam_search->length_penalty = std::nanf("");
  EXPECT_EQ(core->Add(3, std::move(penalty)).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(core->has_unfinished_requests());
}

}  // namespace
}  // namespace tokenmill::testing
