// `tokenmill perplexity --kv-window`'s stream (cli/kv_window_stream.h) on stories260K: each
// scored token's logits equal a fresh prefill of what the cache should hold at that moment
// (the sinks, then the recent text up to the token, contiguous), evictions keep the cache
// within the window, and with no eviction the stream gives the full-context logits.
#include "cli/kv_window_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "tests/test_paths.h"

namespace tokenmill::cli {
namespace {

class KvWindowStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::Load(TestModelsDir() + "/stories260K.gguf");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
    std::mt19937 rng(13);
    std::uniform_int_distribution<int32_t> token(3, model_->config().n_vocab - 1);
    text_.resize(300);  // stories260K's context is 128: more than twice over
    for (int32_t& t : text_) t = token(rng);
  }

  // Logits of the last of `tokens`, prefilled into a fresh cache.
  std::vector<float> FreshLogits(const std::vector<int32_t>& tokens) {
    const int64_t blocks = (static_cast<int64_t>(tokens.size()) + 15) / 16;
    KvCacheStorage storage(model_->config(), KvType::kF16, blocks, 16);
    BatchBuilder builder(16, blocks);
    const int seq = builder.AddSequence();
    EXPECT_TRUE(builder.Append(seq, tokens, BatchBuilder::Logits::kLast).ok());
    std::vector<float> logits(model_->config().n_vocab);
    ForwardPass forward(*model_, Ctx());
    EXPECT_TRUE(forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                            storage.view(), logits).ok());
    return logits;
  }

  CpuContext Ctx() { return CpuContext{&KernelTable(BestCpuIsa()), &pool_}; }

  std::unique_ptr<Model> model_;
  std::vector<int32_t> text_;
  ThreadPool pool_{1};
};

TEST_F(KvWindowStreamTest, EachTokenSeesTheSinksAndItsRecentTextAtConsecutivePositions) {
  const KvWindow window{.sink_tokens = 4, .window_tokens = 64};  // sinks: one block of 16
  KvWindowStream stream(*model_, Ctx(), KvType::kF16, window, static_cast<int>(text_.size()));
  int64_t next = 0, checked = 0, max_position = 0;
  float worst = 0.0f;
  const StatusOr<int64_t> evicted =
      stream.Run(text_, [&](int64_t i, int64_t position, std::span<const float> logits) {
        EXPECT_EQ(i, next++);  // every token once, in order
        max_position = std::max(max_position, position);
        if (i % 7 != 0 && i + 1 != static_cast<int64_t>(text_.size())) return;  // a sample
        std::vector<int32_t> cache(text_.begin(), text_.begin() + std::min<int64_t>(i + 1, 16));
        if (i >= 16) cache.insert(cache.end(), text_.begin() + (i + 1 - (position + 1 - 16)),
                                  text_.begin() + i + 1);
        ASSERT_EQ(static_cast<int64_t>(cache.size()), position + 1);
        const std::vector<float> want = FreshLogits(cache);
        for (size_t v = 0; v < want.size(); ++v) {
          worst = std::max(worst, std::fabs(logits[v] - want[v]));
        }
        ++checked;
      });
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  EXPECT_EQ(next, static_cast<int64_t>(text_.size()));
  EXPECT_GT(*evicted, 200);           // most of the text left the cache
  EXPECT_LE(max_position, 16 + 64 - 1);  // never more than sinks + window
  EXPECT_GT(checked, 40);
  EXPECT_LE(worst, 1e-4f);
}

TEST_F(KvWindowStreamTest, WithoutAnEvictionItIsTheFullContext) {
  const std::vector<int32_t> text(text_.begin(), text_.begin() + 100);
  KvWindowStream stream(*model_, Ctx(), KvType::kF16, KvWindow{.sink_tokens = 4,
                                                               .window_tokens = 0},
                        static_cast<int>(text.size()));
  std::vector<std::vector<float>> rows;
  const StatusOr<int64_t> evicted =
      stream.Run(text, [&](int64_t i, int64_t position, std::span<const float> logits) {
        EXPECT_EQ(i, position);
        rows.emplace_back(logits.begin(), logits.end());
      });
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(*evicted, 0);
  ASSERT_EQ(rows.size(), text.size());
  for (int64_t i : {0, 31, 99}) {
    const std::vector<float> want =
        FreshLogits(std::vector<int32_t>(text.begin(), text.begin() + i + 1));
    for (size_t v = 0; v < want.size(); ++v) ASSERT_NEAR(rows[i][v], want[v], 1e-4f) << i;
  }
}

TEST_F(KvWindowStreamTest, ABadWindowIsAStatus) {
  KvWindowStream stream(*model_, Ctx(), KvType::kF16,
                        KvWindow{.sink_tokens = 4, .window_tokens = 8}, 64);
  const StatusOr<int64_t> evicted =
      stream.Run(std::span<const int32_t>(text_).first(64), [](int64_t, int64_t, auto) {});
  ASSERT_FALSE(evicted.ok());
  EXPECT_NE(evicted.status().message().find("window_tokens"), std::string::npos);
}

}  // namespace
}  // namespace tokenmill::cli
