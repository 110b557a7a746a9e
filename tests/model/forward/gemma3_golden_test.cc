// The real Gemma 3 270M Q4_K_M (models/, fetched by scripts/setup) against llama.cpp's greedy
// continuations of 12 prompts fed one token at a time (tests/data/logits/gemma-3-270m-q4_k_m.json,
// written by tests/reference/make_gemma3_golden.py), with forward_golden_test.cc's near-tie
// criterion: a continuation may leave llama.cpp's only where llama.cpp's own top-2 gap is small.
// Both weight layouts: as in the file (every matmul in llama.cpp's vec_dot order) and the
// regrouped one the server runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "kernels/cpu/thread_pool.h"
#include "model/model.h"
#include "tests/model/forward/golden.h"
#include "tests/test_paths.h"

namespace tokenmill {
namespace {

constexpr char kStem[] = "gemma-3-270m-q4_k_m";

struct LayoutCase {
  CpuWeightLayout layout;
  const char* name;
  int min_identical_continuations;  // of 12
  float near_tie;                   // CheckGreedyContinuations'
};

// A summation order of our own moves Gemma's logits as far as llama.cpp's own builds move
// them from each other: between its AVX2 and AVX-512 builds, the 99th percentile of |logit
// difference| is 0.88 (docs/fidelity.md), and the AVX-512 one leaves 7 of these 12
// continuations (tests/reference/llama_cpp_departures.py). A departure below that is a
// near-tie.
constexpr float kGemmaOwnOrderNearTie = 0.9f;

class Gemma3GoldenTest : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(Gemma3GoldenTest, GreedyContinuationsMatchLlamaCpp) {
  const std::string path = TestModelsDir() + "/" + kStem + ".gguf";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is missing: scripts/setup fetches it";
  }
  const testing::Golden golden = testing::LoadGolden(kStem);
  ASSERT_EQ(golden.prompts.size(), 12u);
  StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  std::map<std::string, int> types;
  for (const GgufTensor& t : file->tensors()) ++types[std::string(FindGgmlType(t.ggml_type)->name)];
  ASSERT_EQ(types, golden.tensor_types) << path << " is not the file the golden was made from";
  StatusOr<std::unique_ptr<Model>> model = Model::FromFile(std::move(*file), {.layout = GetParam().layout});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ThreadPool pool(2);
  const std::string label = std::string("gemma3 ") + GetParam().name;
  const int identical = testing::CheckGreedyContinuations(
      **model, CpuContext{&KernelTable(BestCpuIsa()), &pool}, golden, label, GetParam().near_tie);
  std::cout << label << ": " << identical << " of " << golden.prompts.size()
            << " greedy continuations identical to llama.cpp's\n";
  EXPECT_GE(identical, GetParam().min_identical_continuations);
}

// As in the file 12 of 12, bit for bit llama.cpp's sums. Regrouped (Q8_0 rows 16 at a time,
// the tied 262k-row output among them, and the K-quants' sub-block order: other summation
// orders) 8 of 12 on 2026-12-04, leaving llama.cpp at gaps of 0.0045-0.32; llama.cpp's own
// AVX-512 build keeps 5 of 12, leaving at gaps up to 0.17: Gemma's logits of ~20 hold many
// near-ties.
INSTANTIATE_TEST_SUITE_P(
    Layouts, Gemma3GoldenTest,
    ::testing::Values(LayoutCase{CpuWeightLayout::kAsInFile, "AsInFile", 12, testing::kNearTie},
                      LayoutCase{CpuWeightLayout::kFastest, "Regrouped", 7, kGemmaOwnOrderNearTie}),
    [](const ::testing::TestParamInfo<LayoutCase>& param_info) {
      return std::string(param_info.param.name);
    });

}  // namespace
}  // namespace tokenmill
