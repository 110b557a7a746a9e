// The CUDA forward tests' fixture: skipped without a CUDA device (CudaTest); otherwise the
// golden file and model of the parameter's stem are loaded and a CudaForwardPass created,
// with a thread pool for the CPU passes it is held against.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/cuda/cuda_forward.h"
#include "model/cuda/cuda_kv_cache.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "tests/kernels/cuda/cuda_test.h"
#include "tests/model/forward/golden.h"
#include "tests/test_paths.h"

namespace tokenmill::cuda {

// Greedy decoding of every golden prompt one token per step (f16 KV), the argmax on the device
// (RunGreedy), which must also be the host argmax of Run's logits over the same cache, against
// llama.cpp's continuations: a prompt may leave llama.cpp only where llama.cpp's own top-2 gap
// is a near-tie (kNearTie, as tests/model/forward/forward_golden_test.cc). *identical: the
// continuations equal in full.
inline constexpr float kNearTie = 0.25f;
inline void CheckGreedyContinuations(CudaForwardPass& gpu, const ModelConfig& c,
                                     const testing::Golden& golden, int* identical) {
  *identical = 0;
  for (const testing::GoldenPrompt& p : golden.prompts) {
    const int64_t blocks = std::max<int64_t>(
        16, static_cast<int64_t>(p.prompt_tokens.size() + p.continuation.size()) / 16 + 1);
    auto kv = CudaKvCache::Create(c, KvType::kF16, blocks, 16);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    BatchBuilder builder(16, blocks);
    const int seq = builder.AddSequence();
    std::vector<int32_t> step = p.prompt_tokens, ours;
    std::vector<float> logits(c.n_vocab);
    for (size_t i = 0; i < p.continuation.size(); ++i) {
      ASSERT_TRUE(builder.Append(seq, step, BatchBuilder::Logits::kLast).ok());
      const ForwardInput in{builder.token_ids(), builder.batch(), builder.logit_rows()};
      int32_t token = -1;
      ASSERT_TRUE(gpu.RunGreedy(in, kv->view(), std::span<int32_t>(&token, 1)).ok());
      // Running the step again rewrites the same K/V: Run must agree with RunGreedy.
      ASSERT_TRUE(gpu.Run(in, kv->view(), logits).ok());
      ASSERT_EQ(token, testing::Argmax(logits.data(), c.n_vocab)) << "step " << i;
      builder.Clear();
      ours.push_back(token);
      if (token != p.continuation[i]) break;
      step = {token};
    }
    if (ours == p.continuation) {
      ++*identical;
      continue;
    }
    const size_t i = ours.size() - 1;
    EXPECT_LT(testing::LlamaCppGap(p, i, ours.back()), kNearTie)
        << "prompt '" << p.text << "' diverges from llama.cpp at generated token " << i
        << ", not at a near-tie";
  }
}

// Case: a test parameter with the golden file's stem in `stem`.
template <typename Case>
class CudaModelTest : public CudaTest, public ::testing::WithParamInterface<Case> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    golden_ = testing::LoadGolden(this->GetParam().stem);
    auto model = Model::Load(ModelPath());
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
    auto gpu = CudaForwardPass::Create(*model_);
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    gpu_ = std::move(*gpu);
  }

  // Where the golden's model lies (a fixture whose files are elsewhere says so).
  virtual std::string ModelPath() const { return TestModelsDir() + "/" + golden_.model_file; }

  // The CPU's fast kernels (KernelMode::kFast), to hold the GPU's logits against: the GPU
  // quantizes the activations of quantized weights to q8_1 blocks exactly as they do and takes
  // the same integer dot products (tests/kernels/cuda/mmvq_math_test.cc), where the reference
  // kernels keep float activations.
  ForwardPass CpuCounterpart() {
    return ForwardPass(*model_, CpuContext{&KernelTable(BestCpuIsa()), &pool_},
                       KernelMode::kFast);
  }

  // The CPU fast kernels' logits of every row of `p`'s prompt over a `type` cache.
  std::vector<float> CpuCounterpartLogits(const testing::GoldenPrompt& p, KvType type) {
    const ModelConfig& c = model_->config();
    KvCacheStorage storage(c, type, 64, 16);
    BatchBuilder builder(16, 64);
    const int seq = builder.AddSequence();
    EXPECT_TRUE(builder.Append(seq, p.prompt_tokens, BatchBuilder::Logits::kAll).ok());
    ForwardPass forward = CpuCounterpart();
    std::vector<float> logits(p.prompt_tokens.size() * c.n_vocab);
    const Status s = forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                                 storage.view(), logits);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return logits;
  }

  // The GPU's tolerance against the CPU fast kernels over the same cache type, derived
  // on the CPU for `p`: both store K/V alike (f16 by the same rounding, int8 bit for bit), so
  // they differ where the CPU rounds attention probabilities to f16 and the GPU keeps them in
  // float (a 2^-11-relative perturbation of the attention, as rounding V to f16 is), and in
  // float summation order (2^-24 relative per addition). The CPU measures what one such
  // perturbation does to the logits, max |f16 KV - f32 KV| (on its fast kernels, so with the
  // activations' int8 roundings that such a perturbation flips), and the tolerance is twice
  // that, plus 1e-3 for the summation orders.
  float GpuToleranceOverCpu(const testing::GoldenPrompt& p) {
    const std::vector<float> f16 = CpuCounterpartLogits(p, KvType::kF16);
    const std::vector<float> f32 = CpuCounterpartLogits(p, KvType::kF32);
    float effect = 0.0f;
    for (size_t i = 0; i < f16.size(); ++i) effect = std::max(effect, std::fabs(f16[i] - f32[i]));
    return 2.0f * effect + 1e-3f;
  }

  testing::Golden golden_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<CudaForwardPass> gpu_;
  ThreadPool pool_{2};
};

}  // namespace tokenmill::cuda
