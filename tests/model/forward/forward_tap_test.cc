// ForwardPass::set_tap: the activations it shows (names as llama.cpp's graph, in graph
// order, with their shapes), which tests/reference/llama_cpp_compare.py and forward_dump
// rely on; and watching them changes no logit, though the row ops then no longer share
// parallel regions.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/forward.h"
#include "tests/test_paths.h"

namespace tokenmill {
namespace {

struct Shown {
  std::string name;
  int layer;
  int64_t rows, row_size;
  bool operator==(const Shown&) const = default;
};

class ForwardTapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::Load(TestModelsDir() + "/stories260K.gguf");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
  }

  // All logits of a prefill of `n_tokens` tokens, run on two threads.
  std::vector<float> Logits(ForwardPass& forward, int n_tokens) {
    const ModelConfig& c = model_->config();
    KvCacheStorage storage(c, KvType::kF16, 4, 16);
    BatchBuilder builder(16, 4);
    const int seq = builder.AddSequence();
    std::vector<int32_t> tokens;
    for (int i = 0; i < n_tokens; ++i) tokens.push_back((i * 37 + 11) % c.n_vocab);
    EXPECT_TRUE(builder.Append(seq, tokens, BatchBuilder::Logits::kAll).ok());
    std::vector<float> logits(static_cast<size_t>(n_tokens) * c.n_vocab);
    const Status s = forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                                 storage.view(), logits);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return logits;
  }

  std::unique_ptr<Model> model_;
  ThreadPool pool_{2};
};

TEST_F(ForwardTapTest, ShowsEachActivationInGraphOrder) {
  const ModelConfig& c = model_->config();
  ForwardPass forward(*model_, CpuContext{&KernelTable(BestCpuIsa()), &pool_});
  std::vector<Shown> shown;
  forward.set_tap([&](const char* name, int layer, float*, int64_t rows, int64_t row_size) {
    shown.push_back({name, layer, rows, row_size});
  });
  const int n = 3;
  Logits(forward, n);
  std::vector<Shown> expected;
  for (int l = 0; l < c.n_layers; ++l) {
    const int64_t d = c.n_embd, q = c.q_dim(), kv = c.kv_dim(), ff = c.n_ff;
    for (const Shown& s : std::vector<Shown>{
             {"attn_norm", l, n, d}, {"Qraw", l, n, q},      {"Kraw", l, n, kv},
             {"Qcur", l, n, q},      {"Kcur", l, n, kv},     {"Vcur", l, n, kv},
             {"kqv_out", l, n, q},   {"attn_out", l, n, d},  {"ffn_inp", l, n, d},
             {"ffn_norm", l, n, d},  {"ffn_gate", l, n, ff}, {"ffn_up", l, n, ff},
             {"ffn_swiglu", l, n, ff}, {"ffn_out", l, n, d}, {"l_out", l, n, d}}) {
      expected.push_back(s);
    }
  }
  expected.push_back({"result_norm", -1, n, c.n_embd});
  EXPECT_EQ(shown, expected);
}

TEST_F(ForwardTapTest, WatchingChangesNoLogit) {
  ForwardPass fused(*model_, CpuContext{&KernelTable(BestCpuIsa()), &pool_});
  ForwardPass watched(*model_, CpuContext{&KernelTable(BestCpuIsa()), &pool_});
  int calls = 0;
  watched.set_tap([&](const char*, int, float*, int64_t, int64_t) { ++calls; });
  // Enough tokens for the row ops to spread over both threads.
  const int n = 24;
  EXPECT_EQ(Logits(fused, n), Logits(watched, n));
  EXPECT_GT(calls, 0);
}

}  // namespace
}  // namespace tokenmill
