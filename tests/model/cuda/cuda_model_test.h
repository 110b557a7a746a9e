// The CUDA forward tests' fixture: skipped without a CUDA device (CudaTest); otherwise the
// golden file and model of the parameter's stem are loaded and a CudaForwardPass created,
// with a thread pool for the CPU passes it is held against.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/cuda/cuda_forward.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "tests/kernels/cuda/cuda_test.h"
#include "tests/model/forward/golden.h"

namespace tokenmill::cuda {

// Case: a test parameter with the golden file's stem in `stem`.
template <typename Case>
class CudaModelTest : public CudaTest, public ::testing::WithParamInterface<Case> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    golden_ = testing::LoadGolden(this->GetParam().stem);
    auto model = Model::Load(std::string(TOKENMILL_MODELS_DIR) + "/" + golden_.model_file);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
    auto gpu = CudaForwardPass::Create(*model_);
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    gpu_ = std::move(*gpu);
  }

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
