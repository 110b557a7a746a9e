// The tiny random models of tests/reference/tiny_families/ that the CUDA pass runs, on the GPU
// (label gpu: skipped without a CUDA device). Each GGUF is written by its family's module (the
// .venv's Python) and every token of llama.cpp's golden (tests/data/logits/tiny/<name>.json:
// prompt + greedy continuation, long enough to cross the sliding windows) is run as one
// prefill and one token per step (decode steps replay CUDA graphs). Both must lie within a
// bound derived on the CPU of the CPU's fast kernels, and within that plus the CPU's own bound
// (test_tiny_families.py's LOGIT_BOUND) of llama.cpp's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

namespace tokenmill::cuda {
namespace {

constexpr int kBlockSize = 16;
// test_tiny_families.py's LOGIT_BOUND: our CPU's logits against llama.cpp's on these models.
constexpr float kCpuBound = 1e-3f;

// Writes tiny family `name`'s GGUF to `path` with its module; returns the context it is served
// with (the module's N_CTX, else 0: the file's), or -1 when Python failed.
int WriteTinyFamily(const std::string& name, const std::string& path) {
  const std::string script =
      "import sys; sys.path.insert(0, '" TOKENMILL_SOURCE_DIR "/tests/reference'); "
      "import tiny_families; m = tiny_families.family('" + name + "'); m.write('" + path +
      "'); print(getattr(m, 'N_CTX', 0))";
  const std::string command = std::string(TOKENMILL_PYTHON) + " -c \"" + script + "\"";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  int context = -1;
  if (std::fscanf(pipe, "%d", &context) != 1) context = -1;
  return pclose(pipe) == 0 ? context : -1;
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
    std::ifstream file(std::string(TOKENMILL_TEST_DATA_DIR) + "/logits/tiny/" + name + ".json");
    ASSERT_TRUE(file) << "no golden for " << name;
    golden_ = nlohmann::json::parse(file);
    const std::string path = ::testing::TempDir() + "cuda_tiny_" + name + ".gguf";
    const int context = WriteTinyFamily(name, path);
    ASSERT_GE(context, 0) << "tests/reference/tiny_families/" << name << ".py did not write "
                          << path << " (is the .venv set up?)";
    auto model = Model::Load(path, {.context = context});
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
  std::unique_ptr<Model> model_;
  std::unique_ptr<CudaForwardPass> gpu_;
  ThreadPool pool_{2};
};

// As cuda_model_test.h's GpuToleranceOverCpu: the GPU keeps attention probabilities in float
// where the CPU rounds them to f16 with f16 KV, so the tolerance is twice what that rounding
// does to the CPU's logits (f16 KV against f32 KV), plus 1e-3 for summation orders.
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
    const float tolerance = 2.0f * MaxAbsDiff(cpu, CpuLogits(tokens, KvType::kF32)) + 1e-3f;
    for (size_t chunk : {tokens.size(), size_t{1}}) {
      const std::vector<float> gpu = GpuLogits(tokens, chunk);
      const float worst_cpu = MaxAbsDiff(gpu, cpu);
      const float worst_llama = MaxAbsDiff(gpu, llama_cpp);
      std::cout << GetParam() << " prompt " << i << (chunk == 1 ? " decode" : " prefill")
                << ": GPU max |logit - CPU fast kernels| = " << worst_cpu << " (tolerance "
                << tolerance << "), max |logit - llama.cpp| = " << worst_llama << " (tolerance "
                << tolerance + kCpuBound << ")\n";
      EXPECT_LE(worst_cpu, tolerance) << "prompt " << i << " chunk " << chunk;
      EXPECT_LE(worst_llama, tolerance + kCpuBound) << "prompt " << i << " chunk " << chunk;
    }
  }
}

// Every dense tiny family and variant (the mixtures of experts stay refused on the GPU:
// test_tiny_families_cuda.py).
INSTANTIATE_TEST_SUITE_P(Families, CudaTinyFamilyTest,
                         ::testing::Values("llama", "llama_rope_freqs", "llama_yarn", "qwen2",
                                           "qwen3", "phi3", "phi3_configured", "phi3_short",
                                           "gemma", "gemma2", "gemma3",
                                           "gemma3_layer_pattern"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

}  // namespace
}  // namespace tokenmill::cuda
