#include "tests/model/forward/golden.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "model/forward.h"
#include "tests/test_paths.h"

namespace tokenmill::testing {
namespace {

SparseLogits ToSparse(const nlohmann::json& j) {
  return {j.at("ids").get<std::vector<int32_t>>(), j.at("values").get<std::vector<float>>()};
}

}  // namespace

Golden LoadGolden(const std::string& model_stem) {
  const std::string path = TestDataDir() + "/logits/" + model_stem + ".json";
  std::ifstream in(path);
  TM_CHECK(in.good()) << "cannot read " << path;
  const nlohmann::json j = nlohmann::json::parse(in);
  Golden golden;
  golden.model_file = j.at("model").get<std::string>();
  if (j.contains("llama_cpp_self_agreement")) {
    golden.llama_cpp_self_agreement =
        j.at("llama_cpp_self_agreement").at("identical_continuations").get<int>();
  }
  if (j.contains("tensor_types")) {
    golden.tensor_types = j.at("tensor_types").get<std::map<std::string, int>>();
  }
  for (const nlohmann::json& p : j.at("prompts")) {
    GoldenPrompt prompt;
    prompt.text = p.at("text").get<std::string>();
    prompt.prompt_tokens = p.at("prompt_tokens").get<std::vector<int32_t>>();
    prompt.continuation = p.at("continuation").get<std::vector<int32_t>>();
    for (const auto& row : p.at("llama_cpp_top")) prompt.llama_cpp_top.push_back(ToSparse(row));
    if (p.contains("numpy_logits")) {
      for (const auto& row : p.at("numpy_logits")) prompt.numpy_logits.push_back(ToSparse(row));
    }
    golden.prompts.push_back(std::move(prompt));
  }
  return golden;
}

std::vector<SparseLogits> LoadBf16Logits(const std::string& model_stem) {
  const std::string path = TestDataDir() + "/logits/" + model_stem + ".bf16.json";
  std::ifstream in(path);
  TM_CHECK(in.good()) << "cannot read " << path;
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<SparseLogits> rows;
  for (const auto& row : j.at("numpy_logits")) rows.push_back(ToSparse(row));
  return rows;
}

int32_t Argmax(const float* logits, int64_t n_vocab) {
  return static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits);
}

float LlamaCppGap(const GoldenPrompt& p, size_t i, int32_t token) {
  const SparseLogits& top = p.llama_cpp_top[p.prompt_tokens.size() - 1 + i];
  const auto it = std::find(top.ids.begin(), top.ids.end(), token);
  return it == top.ids.end() ? INFINITY : top.values[0] - top.values[it - top.ids.begin()];
}

int CheckGreedyContinuations(const Model& model, const CpuContext& ctx, const Golden& golden,
                             const std::string& label, float near_tie) {
  const ModelConfig& c = model.config();
  ForwardPass forward(model, ctx);
  int identical = 0;
  for (const GoldenPrompt& p : golden.prompts) {
    KvCacheStorage storage(c, KvType::kF16, 16, 16);
    BatchBuilder builder(16, 16, NumKvGroups(c));
    const int seq = builder.AddSequence();
    std::vector<float> logits(c.n_vocab);
    std::vector<int32_t> step = p.prompt_tokens;
    std::vector<int32_t> ours;
    for (size_t i = 0; i < p.continuation.size(); ++i) {
      EXPECT_TRUE(builder.Append(seq, step, BatchBuilder::Logits::kLast).ok());
      const Status s =
          forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                      storage.view(), logits);
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok()) return identical;
      builder.Clear();
      ours.push_back(Argmax(logits.data(), c.n_vocab));
      if (ours.back() != p.continuation[i]) break;
      step = {ours.back()};
    }
    if (ours == p.continuation) {
      ++identical;
      continue;
    }
    // Diverged at step i: llama.cpp's own logit for our token must be within kNearTie of
    // its best (a near-tie), so a different valid rounding explains the choice.
    const size_t i = ours.size() - 1;
    const SparseLogits& top = p.llama_cpp_top[p.prompt_tokens.size() - 1 + i];
    const float our_gap = LlamaCppGap(p, i, ours.back());
    std::cout << label << ": prompt '" << p.text << "' diverges at generated token " << i
              << ": ours " << ours.back() << ", llama.cpp " << top.ids[0] << " (logit "
              << top.values[0] << "); llama.cpp's logit for ours is " << our_gap
              << " below its best\n";
    EXPECT_LT(our_gap, near_tie) << label << ": prompt '" << p.text
                                 << "' diverges from llama.cpp at generated token " << i
                                 << ", not at a near-tie";
  }
  return identical;
}

std::string TestNameOfStem(const std::string& stem) {
  std::string name = stem;
  std::replace_if(
      name.begin(), name.end(), [](unsigned char ch) { return !std::isalnum(ch); }, '_');
  return name;
}

}  // namespace tokenmill::testing
