#include "tests/model/forward/golden.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/check.h"

namespace tokenmill::testing {
namespace {

SparseLogits ToSparse(const nlohmann::json& j) {
  return {j.at("ids").get<std::vector<int32_t>>(), j.at("values").get<std::vector<float>>()};
}

}  // namespace

Golden LoadGolden(const std::string& model_stem) {
  const std::string path = std::string(TOKENMILL_TEST_DATA_DIR) + "/logits/" + model_stem + ".json";
  std::ifstream in(path);
  TM_CHECK(in.good()) << "cannot read " << path;
  const nlohmann::json j = nlohmann::json::parse(in);
  Golden golden;
  golden.model_file = j.at("model").get<std::string>();
  if (j.contains("llama_cpp_self_agreement")) {
    golden.llama_cpp_self_agreement =
        j.at("llama_cpp_self_agreement").at("identical_continuations").get<int>();
  }
  for (const nlohmann::json& p : j.at("prompts")) {
    GoldenPrompt prompt;
    prompt.text = p.at("text").get<std::string>();
    prompt.prompt_tokens = p.at("prompt_tokens").get<std::vector<int32_t>>();
    prompt.continuation = p.at("continuation").get<std::vector<int32_t>>();
    for (const auto& row : p.at("llama_cpp_top")) prompt.llama_cpp_top.push_back(ToSparse(row));
    for (const auto& row : p.at("numpy_logits")) prompt.numpy_logits.push_back(ToSparse(row));
    golden.prompts.push_back(std::move(prompt));
  }
  return golden;
}

int32_t Argmax(const float* logits, int64_t n_vocab) {
  return static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits);
}

float LlamaCppGap(const GoldenPrompt& p, size_t i, int32_t token) {
  const SparseLogits& top = p.llama_cpp_top[p.prompt_tokens.size() - 1 + i];
  const auto it = std::find(top.ids.begin(), top.ids.end(), token);
  return it == top.ids.end() ? INFINITY : top.values[0] - top.values[it - top.ids.begin()];
}

std::string TestNameOfStem(const std::string& stem) {
  std::string name = stem;
  std::replace_if(
      name.begin(), name.end(), [](unsigned char ch) { return !std::isalnum(ch); }, '_');
  return name;
}

}  // namespace tokenmill::testing
