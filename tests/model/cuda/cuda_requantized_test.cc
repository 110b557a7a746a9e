// The CUDA forward pass on the default model requantized by llama.cpp (models/requantized/,
// tests/reference/requantize.py) into files whose every matrix is a block-32 type the GPU runs
// (Q5_0, Q5_1, IQ4_NL; output Q8_0): greedy continuations against llama.cpp's
// (tests/data/logits/requantized/) with the near-tie rule, and prompt logits within the bound of
// the CPU's fast kernels that cuda_forward_test.cc derives. Label gpu: skipped without a CUDA
// device, and where setup has not written the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "model/cuda/cuda_kv_cache.h"
#include "tests/model/cuda/cuda_model_test.h"
#include "tests/test_paths.h"

namespace tokenmill::cuda {
namespace {

struct RequantizedCase {
  std::string stem;  // requantized/SmolLM2-135M-Instruct.<target>
  // Of the golden's 8. The CPU, in llama.cpp's vec_dot order, keeps 8 of 8; the GPU sums in its
  // own order (within 2 gamma_n of the CPU's: tests/kernels/cuda/mmvq_math_test.cc), so its
  // near-ties may flip apart; not yet measured on a GPU.
  int min_identical_continuations;
};

std::ostream& operator<<(std::ostream& os, const RequantizedCase& c) { return os << c.stem; }

std::string RequantizedPath(const std::string& stem) {
  return TestModelsDir() + "/" + stem + ".gguf";
}

class CudaRequantizedTest : public CudaModelTest<RequantizedCase> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(RequantizedPath(GetParam().stem))) {
      GTEST_SKIP() << RequantizedPath(GetParam().stem) << " is missing: scripts/setup makes it";
    }
    CudaModelTest<RequantizedCase>::SetUp();
  }
  std::string ModelPath() const override { return RequantizedPath(GetParam().stem); }
};

TEST_P(CudaRequantizedTest, GreedyContinuationsMatchLlamaCppAndLogitsTheCpu) {
  const ModelConfig& c = model_->config();
  for (size_t i = 0; i < std::min<size_t>(2, golden_.prompts.size()); ++i) {
    const testing::GoldenPrompt& p = golden_.prompts[i];
    const float tolerance = GpuToleranceOverCpu(p);
    auto kv = CudaKvCache::Create(c, KvType::kF16, 64, 16);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    BatchBuilder builder(16, 64);
    ASSERT_TRUE(
        builder.Append(builder.AddSequence(), p.prompt_tokens, BatchBuilder::Logits::kAll).ok());
    std::vector<float> gpu(p.prompt_tokens.size() * c.n_vocab);
    ASSERT_TRUE(
        gpu_->Run({builder.token_ids(), builder.batch(), builder.logit_rows()}, kv->view(), gpu)
            .ok());
    const std::vector<float> cpu = CpuCounterpartLogits(p, KvType::kF16);
    float worst = 0.0f;
    for (size_t j = 0; j < gpu.size(); ++j) worst = std::max(worst, std::fabs(gpu[j] - cpu[j]));
    std::cout << GetParam().stem << " prompt " << i << ": GPU max |logit - CPU fast kernels| = "
              << worst << " (tolerance " << tolerance << ")\n";
    EXPECT_LE(worst, tolerance) << "prompt " << i;
  }
  int identical = 0;
  ASSERT_NO_FATAL_FAILURE(CheckGreedyContinuations(*gpu_, model_->config(), golden_, &identical));
  std::cout << GetParam().stem << ": GPU " << identical << " of " << golden_.prompts.size()
            << " greedy continuations identical to llama.cpp's\n";
  EXPECT_GE(identical, GetParam().min_identical_continuations);
}

INSTANTIATE_TEST_SUITE_P(
    Types, CudaRequantizedTest,
    ::testing::Values(RequantizedCase{"requantized/SmolLM2-135M-Instruct.Q5_0", 4},
                      RequantizedCase{"requantized/SmolLM2-135M-Instruct.Q5_1", 4},
                      RequantizedCase{"requantized/SmolLM2-135M-Instruct.IQ4_NL_PURE", 4}),
    [](const ::testing::TestParamInfo<RequantizedCase>& param_info) {
      return testing::TestNameOfStem(param_info.param.stem);
    });

}  // namespace
}  // namespace tokenmill::cuda
