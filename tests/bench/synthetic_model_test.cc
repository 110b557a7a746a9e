// The synthetic benchmark model (bench/synthetic/synthetic_model.h): Llama-3-8B's tensor list,
// and a small one written, loaded by our loader and run by the CPU forward pass. The file's
// bytes are checked with the independent `gguf` package in test_synthetic_model.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>

#include "bench/synthetic/synthetic_model.h"
#include "kernels/cpu/thread_pool.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace tokenmill::bench {
namespace {

using ::testing::HasSubstr;

// A shape the CPU runs in milliseconds, with GQA (8 query heads over 2 KV heads of 32).
SyntheticModelSpec Small(uint64_t seed = 1, TensorType type = TensorType::kQ4_0) {
  SyntheticModelSpec spec;
  spec.shape = {.n_layers = 2, .n_embd = 256, .n_heads = 8, .n_kv_heads = 2, .n_ff = 512,
                .n_vocab = 1000, .context_length = 512};
  spec.matrix_type = type;
  spec.seed = seed;
  return spec;
}

std::string Write(const SyntheticModelSpec& spec, const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  const Status s = WriteSyntheticModel(spec, path);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return path;
}

std::vector<char> Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(SyntheticModelTest, TheDefaultIsLlama3_8B) {
  StatusOr<std::vector<SyntheticTensor>> tensors = SyntheticTensors(SyntheticModelSpec{});
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  ASSERT_EQ(tensors->size(), 3u + 32 * 9);
  auto find = [&](const std::string& name) {
    for (const SyntheticTensor& t : *tensors) {
      if (t.name == name) return t;
    }
    ADD_FAILURE() << name << " missing";
    return SyntheticTensor{};
  };
  EXPECT_EQ(find("blk.0.attn_k.weight").shape, (std::vector<uint64_t>{4096, 1024}));  // 8 KV heads
  EXPECT_EQ(find("blk.31.ffn_down.weight").shape, (std::vector<uint64_t>{14336, 4096}));
  EXPECT_EQ(find("token_embd.weight").shape, (std::vector<uint64_t>{4096, 128256}));
  EXPECT_EQ(find("output.weight").type, TensorType::kQ8_0);
  // 14336 rows of 4096 Q4_0 elements: 128 blocks of 18 bytes each.
  EXPECT_EQ(find("blk.0.ffn_up.weight").bytes, 14336u * 128 * 18);
  const uint64_t total = std::accumulate(tensors->begin(), tensors->end(), uint64_t{0},
                                         [](uint64_t n, const SyntheticTensor& t) {
                                           return n + t.bytes;
                                         });
  // Per layer 2*4096^2 + 2*4096*1024 + 3*4096*14336 Q4_0 elements (x 18/32 bytes), plus the
  // Q4_0 embedding and the Q8_0 output (x 34/32) over 4096 x 128256, plus 65 f32 norms.
  const uint64_t layer = (2ull * 4096 * 4096 + 2ull * 4096 * 1024 + 3ull * 4096 * 14336) / 32 * 18;
  const uint64_t vocab = 4096ull * 128256 / 32;
  EXPECT_EQ(total, 32 * layer + vocab * 18 + vocab * 34 + 65 * 4096 * 4);
}

// Q4_0 (the CUDA pass's benchmark type) and Q4_K (the CPU's K-quant one, in row groups where
// the CPU has AVX-512 VNNI).
class SyntheticRunTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(SyntheticRunTest, OurLoaderReadsItAndTheCpuRunsIt) {
  const SyntheticModelSpec spec = Small(1, GetParam());
  StatusOr<std::unique_ptr<Model>> model =
      Model::Load(Write(spec, "synthetic_small_" + std::string(NameOf(GetParam())) + ".gguf"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_embd, 256);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_ff, 512);
  EXPECT_EQ(c.n_vocab, 1000);
  EXPECT_FALSE(c.tied_output);
  EXPECT_EQ((*model)->weights().layers[1].down.type, GetParam());
  EXPECT_EQ((*model)->weights().output.type,
            GetParam() == TensorType::kQ4_K ? TensorType::kQ6_K : TensorType::kQ8_0);

  // A 6-token prefill then one decode step: every logit finite, and spread like a model's
  // (std(output row) ~ 0.02 * sqrt(256) after RMSNorm, so neither ~0 nor exploding).
  ThreadPool pool(2);
  ForwardPass forward(**model, CpuContext{&KernelTable(BestCpuIsa()), &pool});
  KvCacheStorage storage(c, KvType::kF16, 8, 16);
  BatchBuilder builder(16, 8);
  const int seq = builder.AddSequence();
  std::vector<float> logits(c.n_vocab);
  auto step = [&](std::vector<int32_t> tokens) {
    ASSERT_TRUE(builder.Append(seq, tokens, BatchBuilder::Logits::kLast).ok());
    const Status s = forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                                 storage.view(), logits);
    ASSERT_TRUE(s.ok()) << s.ToString();
    builder.Clear();
  };
  step({1, 17, 400, 999, 3, 250});
  const std::vector<float> prefill = logits;
  step({42});
  for (const std::vector<float>& row : {prefill, logits}) {
    double sum = 0, sum_sq = 0;
    for (float v : row) {
      ASSERT_TRUE(std::isfinite(v));
      sum += v;
      sum_sq += static_cast<double>(v) * v;
    }
    const double mean = sum / c.n_vocab;
    const double std = std::sqrt(sum_sq / c.n_vocab - mean * mean);
    EXPECT_GT(std, 0.1);
    EXPECT_LT(std, 3.0);
  }
  EXPECT_NE(prefill, logits);
}

INSTANTIATE_TEST_SUITE_P(Types, SyntheticRunTest,
                         ::testing::Values(TensorType::kQ4_0, TensorType::kQ4_K),
                         [](const ::testing::TestParamInfo<TensorType>& type) {
                           return std::string(NameOf(type.param));
                         });

TEST(SyntheticModelTest, TheSeedDecidesTheBytes) {
  const std::vector<char> a = Bytes(Write(Small(7), "seed7a.gguf"));
  const std::vector<char> b = Bytes(Write(Small(7), "seed7b.gguf"));
  const std::vector<char> c = Bytes(Write(Small(8), "seed8.gguf"));
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
}

TEST(SyntheticModelTest, OtherBlockTypesToo) {
  for (const TensorType type : {TensorType::kQ8_0, TensorType::kQ5_0, TensorType::kQ5_1,
                                TensorType::kIQ4_NL}) {
    StatusOr<std::unique_ptr<Model>> model = Model::Load(
        Write(Small(1, type), "synthetic_" + std::string(NameOf(type)) + ".gguf"));
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ((*model)->weights().layers[0].q.type, type);
    EXPECT_EQ((*model)->weights().token_embd.type, type);
  }
}

TEST(SyntheticModelTest, RefusesShapesAndTypesItCannotWrite) {
  SyntheticModelSpec spec = Small();
  spec.shape.n_embd = 250;
  EXPECT_THAT(SyntheticTensors(spec).status().message(), HasSubstr("multiples of 32"));
  spec = Small(1, TensorType::kQ4_K);
  spec.shape.n_ff = 544;
  EXPECT_THAT(SyntheticTensors(spec).status().message(), HasSubstr("multiples of 256"));
  spec = Small();
  spec.shape.n_kv_heads = 3;
  EXPECT_THAT(SyntheticTensors(spec).status().message(), HasSubstr("--kv-heads"));
  spec = Small();
  spec.matrix_type = TensorType::kMXFP4;
  EXPECT_THAT(WriteSyntheticModel(spec, ::testing::TempDir() + "/never.gguf").message(),
              HasSubstr("--type must be q4_0,"));
  EXPECT_THAT(WriteSyntheticModel(Small(), "/nonexistent-dir/x.gguf").message(),
              HasSubstr("cannot create /nonexistent-dir/x.gguf"));
}

}  // namespace
}  // namespace tokenmill::bench
