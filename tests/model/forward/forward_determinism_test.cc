// docs/design.md section 3, Determinism: a sequence's logits and greedy tokens are bit-identical
// whether it runs alone or batched with others, whole or in prefill chunks, and whatever
// the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/forward.h"
#include "tests/test_paths.h"

namespace tokenmill {
namespace {

constexpr int kDecodeSteps = 12;
constexpr int kBlockSize = 16;

const std::vector<std::vector<int32_t>> kPrompts = {
    {504, 3458, 282, 4649, 28, 665, 436, 253, 1165, 2767, 2104, 34, 33, 30},
    {378, 3575, 282, 4649, 314},
    {26122, 3327, 2444, 1306, 30, 40, 5788, 288, 253, 1480, 16, 5411, 29, 2200, 28, 3101,
     351, 1032, 314, 27, 455, 22, 45, 4391},
};

struct GenerationResult {
  std::vector<std::vector<float>> last_logits;  // per sequence, per step: logits of the last token
  std::vector<std::vector<int32_t>> tokens;     // per sequence: greedy tokens
};

class DeterminismTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::Load(TestModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model).release();
  }
  static void TearDownTestSuite() { delete model_; }

  // Runs the prompts `together` (one step for all) or one sequence per step, each prompt
  // split into prefill chunks of `chunk` tokens, then decodes all sequences together.
  GenerationResult Generate(int threads, bool together, size_t chunk) {
    const ModelConfig& c = model_->config();
    ThreadPool pool(threads);
    ForwardPass forward(*model_, CpuContext{&KernelTable(BestCpuIsa()), &pool});
    KvCacheStorage storage(c, KvType::kF16, 32, kBlockSize);
    BatchBuilder builder(kBlockSize, 32);
    GenerationResult run;
    std::vector<size_t> done(kPrompts.size(), 0);
    for (size_t s = 0; s < kPrompts.size(); ++s) builder.AddSequence();
    run.last_logits.resize(kPrompts.size());
    run.tokens.resize(kPrompts.size());
    std::vector<float> logits;
    auto step = [&]() {
      logits.assign(builder.logit_rows().size() * c.n_vocab, 0.0f);
      const Status s = forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                                   storage.view(), logits);
      ASSERT_TRUE(s.ok()) << s.ToString();
    };
    // Prefill, chunk by chunk; a sequence's last chunk asks for logits.
    std::vector<int> order;
    while (true) {
      bool any = false;
      order.clear();
      for (size_t s = 0; s < kPrompts.size(); ++s) {
        if (done[s] == kPrompts[s].size()) continue;
        const size_t n = std::min(chunk, kPrompts[s].size() - done[s]);
        const bool last = done[s] + n == kPrompts[s].size();
        EXPECT_TRUE(builder.Append(static_cast<int>(s),
                                   std::span(kPrompts[s]).subspan(done[s], n),
                                   last ? BatchBuilder::Logits::kLast : BatchBuilder::Logits::kNone)
                        .ok());
        if (last) order.push_back(static_cast<int>(s));
        done[s] += n;
        any = true;
        if (!together) {
          step();
          for (size_t i = 0; i < order.size(); ++i) {
            run.last_logits[order[i]].assign(logits.begin() + i * c.n_vocab,
                                             logits.begin() + (i + 1) * c.n_vocab);
          }
          order.clear();
          builder.Clear();
        }
      }
      if (!any) break;
      if (together) {
        step();
        for (size_t i = 0; i < order.size(); ++i) {
          run.last_logits[order[i]].assign(logits.begin() + i * c.n_vocab,
                                           logits.begin() + (i + 1) * c.n_vocab);
        }
        builder.Clear();
      }
    }
    // Decode all sequences together, greedily.
    for (int i = 0; i < kDecodeSteps; ++i) {
      for (size_t s = 0; s < kPrompts.size(); ++s) {
        const std::vector<float>& l = run.last_logits[s];
        const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
        run.tokens[s].push_back(next);
        EXPECT_TRUE(builder.Append(static_cast<int>(s), std::span(&next, 1),
                                   BatchBuilder::Logits::kLast).ok());
      }
      step();
      for (size_t s = 0; s < kPrompts.size(); ++s) {
        run.last_logits[s].assign(logits.begin() + s * c.n_vocab,
                                  logits.begin() + (s + 1) * c.n_vocab);
      }
      builder.Clear();
    }
    return run;
  }

  static Model* model_;
};

Model* DeterminismTest::model_ = nullptr;

void ExpectSame(const GenerationResult& a, const GenerationResult& b) {
  for (size_t s = 0; s < kPrompts.size(); ++s) {
    EXPECT_EQ(a.tokens[s], b.tokens[s]) << "sequence " << s;
    EXPECT_EQ(a.last_logits[s], b.last_logits[s]) << "sequence " << s << ": logits not bit-identical";
  }
}

TEST_F(DeterminismTest, AloneOrBatchedWholeOrChunkedAnyThreadCount) {
  const GenerationResult alone = Generate(1, /*together=*/false, /*chunk=*/1000);
  ExpectSame(alone, Generate(2, /*together=*/true, /*chunk=*/1000));
  ExpectSame(alone, Generate(2, /*together=*/true, /*chunk=*/5));
  ExpectSame(alone, Generate(3, /*together=*/false, /*chunk=*/7));
}

}  // namespace
}  // namespace tokenmill
