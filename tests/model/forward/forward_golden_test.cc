// The forward pass against two independent references (tests/data/logits/, written by
// tests/reference/make_logits_golden.py): the NumPy forward pass (float32 weights and
// activations) and llama.cpp (its logits and greedy continuations).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>

#include "kernels/cpu/thread_pool.h"
#include "model/forward.h"
#include "tests/model/forward/golden.h"
#include "tests/test_paths.h"

namespace tokenmill {
namespace {

using testing::Argmax;
using testing::Golden;
using testing::GoldenPrompt;
using testing::kNearTie;
using testing::LoadGolden;
using testing::SparseLogits;

struct ModelCase {
  std::string stem;
  // Max |ours - NumPy| over the golden logits: fast kernels (int8 activations, f16 KV)
  // and the scalar reference kernels (float activations, f32 KV).
  float fast_tolerance;
  float reference_tolerance;
  int reference_prompts;  // prompts checked with the (slow) reference kernels
  // Greedy continuations that must equal llama.cpp's, of the golden file's 12.
  int min_identical_continuations;
};

std::ostream& operator<<(std::ostream& os, const ModelCase& c) { return os << c.stem; }

class ForwardGoldenTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    golden_ = LoadGolden(GetParam().stem);
    auto model = Model::Load(TestModelsDir() + "/" + golden_.model_file);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
  }

  // Logits (all prompt rows) of one prompt run as a single prefill.
  std::vector<float> PromptLogits(const GoldenPrompt& p, KernelMode mode, KvType kv_type) {
    const ModelConfig& c = model_->config();
    KvCacheStorage storage(c, kv_type, 64, 16);
    BatchBuilder builder(16, 64);
    const int seq = builder.AddSequence();
    EXPECT_TRUE(builder.Append(seq, p.prompt_tokens, BatchBuilder::Logits::kAll).ok());
    ForwardPass forward(*model_, CpuContext{&KernelTable(BestCpuIsa()), &pool_}, mode);
    std::vector<float> logits(p.prompt_tokens.size() * c.n_vocab);
    const Status s = forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                                 storage.view(), logits);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return logits;
  }

  // Max |ours - NumPy| over every golden id of every prompt position.
  float MaxDiffFromNumpy(const GoldenPrompt& p, const std::vector<float>& logits) {
    const int64_t vocab = model_->config().n_vocab;
    float max_diff = 0.0f;
    for (size_t pos = 0; pos < p.numpy_logits.size(); ++pos) {
      const SparseLogits& row = p.numpy_logits[pos];
      for (size_t i = 0; i < row.ids.size(); ++i) {
        const float ours = logits[pos * vocab + row.ids[i]];
        max_diff = std::max(max_diff, std::fabs(ours - row.values[i]));
      }
    }
    return max_diff;
  }

  Golden golden_;
  std::unique_ptr<Model> model_;
  ThreadPool pool_{2};
};

bool NearTie(const SparseLogits& top) { return top.values[0] - top.values[1] < kNearTie; }

TEST_P(ForwardGoldenTest, FastKernelLogitsMatchNumpyAndTop1MatchesLlamaCpp) {
  const int64_t vocab = model_->config().n_vocab;
  float worst = 0.0f;
  int checked = 0, near_ties = 0;
  for (const GoldenPrompt& p : golden_.prompts) {
    const std::vector<float> logits = PromptLogits(p, KernelMode::kFast, KvType::kF16);
    worst = std::max(worst, MaxDiffFromNumpy(p, logits));
    for (size_t pos = 0; pos < p.prompt_tokens.size(); ++pos) {
      const SparseLogits& top = p.llama_cpp_top[pos];
      if (NearTie(top)) {
        ++near_ties;
        continue;
      }
      ++checked;
      EXPECT_EQ(Argmax(&logits[pos * vocab], vocab), top.ids[0])
          << "prompt '" << p.text << "' position " << pos;
    }
  }
  std::cout << GetParam().stem << ": fast kernels, max |ours - numpy| = " << worst
            << " (tolerance " << GetParam().fast_tolerance << "); top-1 equal to llama.cpp at "
            << checked << " prompt positions (" << near_ties << " near-ties skipped)\n";
  EXPECT_LE(worst, GetParam().fast_tolerance);
}

TEST_P(ForwardGoldenTest, ReferenceKernelLogitsMatchNumpyClosely) {
  float worst = 0.0f;
  const int n = std::min<int>(GetParam().reference_prompts, golden_.prompts.size());
  for (int i = 0; i < n; ++i) {
    const GoldenPrompt& p = golden_.prompts[i];
    worst = std::max(worst, MaxDiffFromNumpy(p, PromptLogits(p, KernelMode::kReference,
                                                             KvType::kF32)));
  }
  std::cout << GetParam().stem << ": reference kernels on " << n
            << " prompts, max |ours - numpy| = " << worst << " (tolerance "
            << GetParam().reference_tolerance << ")\n";
  EXPECT_LE(worst, GetParam().reference_tolerance);
}

// Greedy continuation, one decode step per token, as llama.cpp produced it.
TEST_P(ForwardGoldenTest, GreedyContinuationsMatchLlamaCpp) {
  const int identical = testing::CheckGreedyContinuations(
      *model_, CpuContext{&KernelTable(BestCpuIsa()), &pool_}, golden_, GetParam().stem);
  const int n = static_cast<int>(golden_.prompts.size());
  std::cout << GetParam().stem << ": " << identical << " of " << n
            << " greedy continuations identical to llama.cpp's (llama.cpp's own batched-prompt "
            << "run reproduces " << golden_.llama_cpp_self_agreement << ")\n";
  EXPECT_GE(identical, GetParam().min_identical_continuations);
}

// Every ISA path through the whole model. AVX2 and AVX-512 VNNI run the same float
// operations (the integer dot products are exact either way; Q4_1 and Q8_0 in the row-group
// order), so they must agree bit for bit. The scalar path's quantized matmuls keep
// those orders too (tests/kernels/matmul_test.cc), but its float kernels need not, and
// through 30 layers of int8 activations a few rounding flips would grow to ~1 in SmolLM2's
// logits (the scale of its distance from NumPy), so it is held to half the NumPy tolerance
// (it measures 0 on both models).
TEST_P(ForwardGoldenTest, EveryIsaPathAgrees) {
  const ModelConfig& c = model_->config();
  const GoldenPrompt& p = golden_.prompts[1];
  const std::vector<float> best = PromptLogits(p, KernelMode::kFast, KvType::kF16);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (!CpuSupports(isa)) continue;
    KvCacheStorage storage(c, KvType::kF16, 16, 16);
    BatchBuilder builder(16, 16);
    const int seq = builder.AddSequence();
    ASSERT_TRUE(builder.Append(seq, p.prompt_tokens, BatchBuilder::Logits::kAll).ok());
    ForwardPass forward(*model_, CpuContext{&KernelTable(isa), &pool_});
    std::vector<float> logits(best.size());
    ASSERT_TRUE(forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                            storage.view(), logits).ok());
    float worst = 0.0f;
    for (size_t i = 0; i < logits.size(); ++i) {
      worst = std::max(worst, std::fabs(logits[i] - best[i]));
    }
    std::cout << GetParam().stem << ": " << IsaName(isa) << " max |logit - "
              << IsaName(BestCpuIsa()) << "| = " << worst << "\n";
    if (isa == CpuIsa::kScalar) {
      EXPECT_LE(worst, GetParam().fast_tolerance / 2);
    } else {
      EXPECT_EQ(worst, 0.0f) << IsaName(isa);
    }
  }
}

// The goldens record llama.cpp fed one token at a time (make_logits_golden.py says why).
// SmolLM2 Q4_1's forward pass is llama.cpp's op for op but not bit for bit: its Q4_1 layer
// and Q8_0 output matmuls sum in the row-group order (kernels/cpu/matmul.h, kRowGroups16;
// within ~1e-5 relative of ggml's, tests/kernels/matmul_test.cc), while attention, RoPE,
// SwiGLU, softmax, RMSNorm and the adds (tests/reference/llama_cpp_compare.py --force, op by
// op) are still ggml's. Its greedy
// text is full of near-ties (top-2 gaps of 0.01-0.1: llama.cpp's own batched-prompt run
// reproduces only 6 of the 12), so those last bits flip some: 3 of 12 stay identical
// (measured), every divergence at a near-tie (checked above). stories260K's F32 matmuls sum
// in another order (~1e-7 apart), which flips none of its 12.
INSTANTIATE_TEST_SUITE_P(
    Models, ForwardGoldenTest,
    ::testing::Values(ModelCase{"SmolLM2-135M-Instruct.Q4_1", 3.0f, 5e-3f, 2, 3},
                      ModelCase{"stories260K", 0.05f, 1e-3f, 12, 12}),
    [](const ::testing::TestParamInfo<ModelCase>& param_info) {
      return testing::TestNameOfStem(param_info.param.stem);
    });

}  // namespace
}  // namespace tokenmill
