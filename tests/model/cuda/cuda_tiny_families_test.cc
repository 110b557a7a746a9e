// The tiny random models of tests/reference/tiny_families/ that the CUDA pass runs, on the GPU
// (label gpu: skipped without a CUDA device). Each GGUF is written by its family's module (the
// .venv's Python), or read where scripts/gpu-bundle wrote it beforehand (data/tiny_families/:
// a bare GPU machine has no gguf package), and every token of llama.cpp's golden (tests/data/logits/tiny/<name>.json:
// prompt + greedy continuation, long enough to cross the sliding windows) is run as one
// prefill and one token per step (decode steps replay CUDA graphs). Both must lie within a
// bound derived on the CPU of the CPU's fast kernels, and within that plus the CPU's own bound
// (test_tiny_families.py's LOGIT_BOUND) of llama.cpp's logits. The mixtures of experts (Mixtral,
// qwen3moe, qwen2moe, deepseek2; routing, grouping and the grouped expert GEMVs on the device)
// and the others also run 16 sequences of a batch, which must give the bits of each sequence
// run alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/cuda/cuda_forward.h"
#include "model/cuda/cuda_kv_cache.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "tests/kernels/cuda/cuda_test.h"
#include "tests/test_paths.h"

namespace tokenmill::cuda {
namespace {

constexpr int kBlockSize = 16;
// test_tiny_families.py's LOGIT_BOUND: our CPU's logits against llama.cpp's on these models.
constexpr float kCpuBound = 1e-3f;

// Writes tiny family `name`'s GGUF to `path` with its module; returns the context it is served
// with (the module's N_CTX, else 0: the file's) and its bound on our CPU's logits against
// llama.cpp's (the module's LOGIT_BOUND, else kCpuBound), or a context of -1 when Python failed.
struct TinyFamilyFile {
  int context = -1;
  float cpu_bound = kCpuBound;
};
// scripts/gpu-bundle's copy: <data>/tiny_families/<name>.gguf beside <name>.txt, which holds
// the module's N_CTX and, where it has one, its LOGIT_BOUND; path empty where there is none.
struct PrewrittenFamily {
  std::string path;
  TinyFamilyFile file;
};
PrewrittenFamily FindPrewrittenFamily(const std::string& name) {
  const std::string base = TestDataDir() + "/tiny_families/" + name;
  std::ifstream info(base + ".txt");
  PrewrittenFamily found;
  if (!info || !(info >> found.file.context)) return found;
  if (!(info >> found.file.cpu_bound)) found.file.cpu_bound = kCpuBound;
  found.path = base + ".gguf";
  return found;
}

TinyFamilyFile WriteTinyFamily(const std::string& name, const std::string& path) {
  const std::string script =
      "import sys; sys.path.insert(0, '" TOKENMILL_SOURCE_DIR "/tests/reference'); "
      "import tiny_families; m = tiny_families.family('" + name + "'); m.write('" + path +
      "'); print(getattr(m, 'N_CTX', 0), getattr(m, 'LOGIT_BOUND', " +
      std::to_string(kCpuBound) + "))";
  const std::string command = std::string(TOKENMILL_PYTHON) + " -c \"" + script + "\"";
  FILE* pipe = popen(command.c_str(), "r");
  TinyFamilyFile file;
  if (pipe == nullptr) return file;
  if (std::fscanf(pipe, "%d %f", &file.context, &file.cpu_bound) != 2) file.context = -1;
  if (pclose(pipe) != 0) file.context = -1;
  return file;
}

// One step runner: (input, cache view, logits) -> status.
using RunStep = std::function<Status(const ForwardInput&, const KvCacheView&, std::span<float>)>;

// The logits of every token of `tokens` fed in steps of `chunk` tokens over `kv`.
std::vector<float> LogitsOf(const ModelConfig& c, const std::vector<int32_t>& tokens,
                            size_t chunk, const KvCacheView& kv, int64_t num_blocks,
                            const RunStep& run) {
  BatchBuilder builder(kBlockSize, num_blocks, NumKvGroups(c));
  const int seq = builder.AddSequence();
  std::vector<float> all(tokens.size() * c.n_vocab), step;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const size_t n = std::min(chunk, tokens.size() - begin);
    EXPECT_TRUE(builder.Append(seq, std::span(tokens.data() + begin, n),
                               BatchBuilder::Logits::kAll).ok());
    step.assign(n * c.n_vocab, 0.0f);
    const Status s = run({builder.token_ids(), builder.batch(), builder.logit_rows()}, kv, step);
    EXPECT_TRUE(s.ok()) << s.ToString();
    builder.Clear();
    std::copy(step.begin(), step.end(), all.begin() + begin * c.n_vocab);
  }
  return all;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

class CudaTinyFamilyTest : public CudaTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    const std::string name = GetParam();
    std::ifstream file(TestDataDir() + "/logits/tiny/" + name + ".json");
    ASSERT_TRUE(file) << "no golden for " << name;
    golden_ = nlohmann::json::parse(file);
    PrewrittenFamily prewritten = FindPrewrittenFamily(name);
    if (prewritten.path.empty() && !std::filesystem::exists(TOKENMILL_PYTHON)) {
      GTEST_SKIP() << name << ": not in data/tiny_families/ (scripts/gpu-bundle brings some) and "
                   << "no " << TOKENMILL_PYTHON << " to write it";
    }
    const std::string path = prewritten.path.empty()
                                 ? ::testing::TempDir() + "cuda_tiny_" + name + ".gguf"
                                 : prewritten.path;
    const TinyFamilyFile written =
        prewritten.path.empty() ? WriteTinyFamily(name, path) : prewritten.file;
    ASSERT_GE(written.context, 0) << "tests/reference/tiny_families/" << name
                                  << ".py did not write " << path << " (is the .venv set up?)";
    cpu_bound_ = written.cpu_bound;
    auto model = Model::Load(path, {.context = written.context});
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
    auto gpu = CudaForwardPass::Create(*model_);
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    gpu_ = std::move(*gpu);
  }

  std::vector<float> CpuLogits(const std::vector<int32_t>& tokens, KvType type) {
    const ModelConfig& c = model_->config();
    const int64_t blocks = static_cast<int64_t>(tokens.size()) / kBlockSize + 2;
    KvCacheStorage storage(c, type, blocks, kBlockSize);
    ForwardPass cpu(*model_, CpuContext{&KernelTable(BestCpuIsa()), &pool_}, KernelMode::kFast);
    return LogitsOf(c, tokens, tokens.size(), storage.view(), blocks,
                    [&](const ForwardInput& in, const KvCacheView& kv, std::span<float> out) {
                      return cpu.Run(in, kv, out);
                    });
  }

  std::vector<float> GpuLogits(const std::vector<int32_t>& tokens, size_t chunk) {
    const ModelConfig& c = model_->config();
    const int64_t blocks = static_cast<int64_t>(tokens.size()) / kBlockSize + 2;
    auto kv = CudaKvCache::Create(c, KvType::kF16, blocks, kBlockSize);
    EXPECT_TRUE(kv.ok()) << kv.status().ToString();
    return LogitsOf(c, tokens, chunk, kv->view(), blocks,
                    [&](const ForwardInput& in, const KvCacheView& view, std::span<float> out) {
                      return gpu_->Run(in, view, out);
                    });
  }

  nlohmann::json golden_;
  float cpu_bound_ = kCpuBound;
  std::unique_ptr<Model> model_;
  std::unique_ptr<CudaForwardPass> gpu_;
  ThreadPool pool_{2};
};

// As cuda_model_test.h's GpuToleranceOverCpu: the GPU keeps attention probabilities in float
// where the CPU rounds them to f16 with f16 KV, so the tolerance is twice what that rounding
// does to the CPU's logits (f16 KV against f32 KV), plus 1e-3 for summation orders -- or, for a
// family whose CPU logits are only held to a looser LOGIT_BOUND of llama.cpp's (qwen3moe_q8_0:
// the regrouped Q8_0 kernels' sums round a later layer's int8 activations otherwise, as MMVQ's
// may), that bound.
TEST_P(CudaTinyFamilyTest, PrefillAndDecodeMatchTheCpuAndLlamaCpp) {
  const int64_t vocab = model_->config().n_vocab;
  for (size_t i = 0; i < golden_["prompts"].size(); ++i) {
    const nlohmann::json& p = golden_["prompts"][i];
    std::vector<int32_t> tokens = p["prompt_tokens"].get<std::vector<int32_t>>();
    for (int32_t t : p["continuation"].get<std::vector<int32_t>>()) tokens.push_back(t);
    std::vector<float> llama_cpp;
    for (const nlohmann::json& row : p["logits"]) {
      for (float x : row.get<std::vector<float>>()) llama_cpp.push_back(x);
    }
    ASSERT_EQ(llama_cpp.size(), tokens.size() * vocab);
    const std::vector<float> cpu = CpuLogits(tokens, KvType::kF16);
    const float tolerance =
        2.0f * MaxAbsDiff(cpu, CpuLogits(tokens, KvType::kF32)) + std::max(1e-3f, cpu_bound_);
    for (size_t chunk : {tokens.size(), size_t{1}}) {
      const std::vector<float> gpu = GpuLogits(tokens, chunk);
      const float worst_cpu = MaxAbsDiff(gpu, cpu);
      const float worst_llama = MaxAbsDiff(gpu, llama_cpp);
      std::cout << GetParam() << " prompt " << i << (chunk == 1 ? " decode" : " prefill")
                << ": GPU max |logit - CPU fast kernels| = " << worst_cpu << " (tolerance "
                << tolerance << "), max |logit - llama.cpp| = " << worst_llama << " (tolerance "
                << tolerance + cpu_bound_ << ")\n";
      EXPECT_LE(worst_cpu, tolerance) << "prompt " << i << " chunk " << chunk;
      EXPECT_LE(worst_llama, tolerance + cpu_bound_) << "prompt " << i << " chunk " << chunk;
    }
  }
}

// 16 sequences (the golden's tokens from different starts) prefilled in one step and decoded
// together, their decode steps replayed from CUDA graphs and then launched plainly, against a
// second run together and each run alone: the same logits bit for bit at every step (for a
// mixture: whoever shares a token's experts).
TEST_P(CudaTinyFamilyTest, SixteenSequencesEqualTheirLoneRuns) {
  const ModelConfig& c = model_->config();
  constexpr int kSeqs = 16;
  constexpr size_t kDecode = 6;
  const size_t n_prompts = golden_["prompts"].size();
  std::vector<std::vector<int32_t>> seqs;
  size_t longest = 0;
  for (size_t i = 0; i < kSeqs; ++i) {
    const nlohmann::json& p = golden_["prompts"][i % n_prompts];
    std::vector<int32_t> tokens = p["prompt_tokens"].get<std::vector<int32_t>>();
    for (int32_t t : p["continuation"].get<std::vector<int32_t>>()) tokens.push_back(t);
    const size_t skip = std::min(3 * (i / n_prompts), tokens.size() - kDecode - 1);
    seqs.emplace_back(tokens.begin() + static_cast<std::ptrdiff_t>(skip), tokens.end());
    longest = std::max(longest, seqs.back().size());
  }
  // Each member's last-token logits after its prefill and after each decode step.
  auto run = [&](CudaForwardPass& gpu, const std::vector<size_t>& members) {
    const int64_t blocks = static_cast<int64_t>(members.size() * (longest / kBlockSize + 2));
    auto kv = CudaKvCache::Create(c, KvType::kF16, blocks, kBlockSize);
    EXPECT_TRUE(kv.ok()) << kv.status().ToString();
    BatchBuilder builder(kBlockSize, blocks, NumKvGroups(c));
    std::vector<std::vector<float>> out(members.size());
    for (size_t step = 0; step <= kDecode; ++step) {
      for (size_t m = 0; m < members.size(); ++m) {
        const std::vector<int32_t>& tokens = seqs[members[m]];
        const size_t prefill = tokens.size() - kDecode;
        if (step == 0) {
          EXPECT_EQ(builder.AddSequence(), static_cast<int>(m));
          EXPECT_TRUE(builder.Append(static_cast<int>(m), std::span(tokens.data(), prefill),
                                     BatchBuilder::Logits::kLast).ok());
        } else {
          EXPECT_TRUE(builder.Append(static_cast<int>(m),
                                     std::span(tokens.data() + prefill + step - 1, 1),
                                     BatchBuilder::Logits::kLast).ok());
        }
      }
      std::vector<float> logits(members.size() * c.n_vocab);
      const Status s =
          gpu.Run({builder.token_ids(), builder.batch(), builder.logit_rows()}, kv->view(),
                  logits);
      EXPECT_TRUE(s.ok()) << s.ToString();
      builder.Clear();
      for (size_t m = 0; m < members.size(); ++m) {
        out[m].insert(out[m].end(), logits.begin() + m * c.n_vocab,
                      logits.begin() + (m + 1) * c.n_vocab);
      }
    }
    return out;
  };
  std::vector<size_t> all(kSeqs);
  for (size_t i = 0; i < kSeqs; ++i) all[i] = i;
  auto plain = CudaForwardPass::Create(*model_, CudaForwardOptions{.cuda_graphs = false});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  for (CudaForwardPass* gpu : {gpu_.get(), plain->get()}) {
    SCOPED_TRACE(gpu == gpu_.get() ? "decode steps from CUDA graphs" : "plain launches");
    const std::vector<std::vector<float>> together = run(*gpu, all);
    const std::vector<std::vector<float>> again = run(*gpu, all);
    for (size_t i = 0; i < kSeqs; ++i) {
      ASSERT_EQ(again[i], together[i]) << "sequence " << i << ": two runs together differ";
    }
    for (size_t i = 0; i < kSeqs; ++i) {
      const std::vector<float> alone = run(*gpu, {i})[0];
      ASSERT_EQ(alone.size(), together[i].size());
      for (size_t step = 0; step <= kDecode; ++step) {
        ASSERT_EQ(std::memcmp(alone.data() + step * c.n_vocab,
                              together[i].data() + step * c.n_vocab, c.n_vocab * sizeof(float)),
                  0)
            << "sequence " << i << " step " << step;
      }
    }
  }
}

// Every tiny family and variant the CUDA pass runs: the dense ones, the mixtures of experts
// but gpt-oss and mistral3 (refused by name: test_tiny_families_cuda.py, cuda_graph_plan_test),
// and deepseek2's four (multi-head latent attention over the latent cache, DeepSeek's routing:
// V3's shape with the query LoRA, bias, groups, shared experts and a dense leading layer,
// V2-Lite's, and both in the older fused attn_kv_b layout, held to their LOGIT_BOUND).
INSTANTIATE_TEST_SUITE_P(Families, CudaTinyFamilyTest,
                         ::testing::Values("llama", "llama_rope_freqs", "llama_yarn", "qwen2",
                                           "qwen3", "phi3", "phi3_configured", "phi3_short",
                                           "gemma", "gemma2", "gemma3",
                                           "gemma3_layer_pattern", "mixtral", "qwen3moe",
                                           "qwen3moe_q8_0", "qwen2moe", "deepseek2",
                                           "deepseek2_lite", "deepseek2_fused_kv",
                                           "deepseek2_v3_fused"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

}  // namespace
}  // namespace tokenmill::cuda
