// Every pre-tokenizer we support, end to end against llama.cpp: SmolLM2's vocabulary with
// tokenizer.ggml.pre replaced (tests/data/tokenizer/pre_variants.json, written by
// make_tokenizer_golden.py from llama.cpp on a tensor-less copy of the GGUF's metadata), and
// o200k's (gpt-4o) on Llama 3's vocabulary (pre_variants_o200k.json), and DeepSeek-V3's and
// Kimi K2's there too (pre_variants_deepseek_kimi.json: the corpus and CJK-heavy extras).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tests/gguf/gguf_builder.h"
#include "tests/test_paths.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill {
namespace {

// The tokenizer keys of `source` with tokenizer.ggml.pre set to `pre`, as GGUF bytes.
std::vector<uint8_t> VocabularyWithPre(const GgufFile& source, const std::string& pre) {
  testing::GgufBuilder builder;
  builder.KeyString("general.architecture", "llama").KeyString("tokenizer.ggml.pre", pre);
  builder.KeyString("tokenizer.ggml.model", std::string(*source.GetString("tokenizer.ggml.model")));
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}) {
    const std::vector<std::string_view> items = *source.GetStringArray(key);
    builder.KeyStrings(key, std::vector<std::string>(items.begin(), items.end()));
  }
  const std::vector<int32_t> types = *source.GetI32Array("tokenizer.ggml.token_type");
  std::vector<uint8_t> array;
  testing::GgufBuilder::Put<uint32_t>(array, 5);  // int32 elements
  testing::GgufBuilder::Put<uint64_t>(array, types.size());
  for (const int32_t t : types) testing::GgufBuilder::Put<int32_t>(array, t);
  builder.KeyRaw("tokenizer.ggml.token_type", 9, array);
  // The special tokens and flags the source has (llama.cpp's vocabulary files lack some).
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"}) {
    if (source.GetU32(key).ok()) builder.KeyU32(key, *source.GetU32(key));
  }
  if (source.GetBool("tokenizer.ggml.add_bos_token").ok()) {
    builder.KeyBool("tokenizer.ggml.add_bos_token",
                    *source.GetBool("tokenizer.ggml.add_bos_token"));
  }
  return builder.Build();
}

struct VariantsGolden {
  const char* file;
  size_t variants;
  const char* name;
};

class PreVariantsTest : public ::testing::TestWithParam<VariantsGolden> {};

TEST_P(PreVariantsTest, SameIdsAsLlamaCppForEveryPreTokenizer) {
  std::ifstream in(TestDataDir() + "/tokenizer/" + GetParam().file);
  ASSERT_TRUE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  const std::string vocabulary = golden.at("vocabulary").get<std::string>();
  StatusOr<GgufFile> source = GgufFile::Open(TestModelsDir() + "/" + vocabulary);
  if (!source.ok() && vocabulary.starts_with("ggml-vocab-")) {
    GTEST_SKIP() << vocabulary << " is missing: scripts/setup extracts it";
  }
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_EQ(golden.at("variants").size(), GetParam().variants);
  for (const auto& [pre, cases] : golden.at("variants").items()) {
    const std::vector<uint8_t> bytes = VocabularyWithPre(*source, pre);
    StatusOr<GgufFile> file = GgufFile::Parse(bytes);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    StatusOr<Tokenizer> tokenizer = Tokenizer::FromGguf(*file);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    ASSERT_EQ(tokenizer->pre_tokenizer_name(), pre);
    int mismatches = 0;
    for (const nlohmann::json& c : cases) {
      const std::string text = c.at("text").get<std::string>();
      for (const bool parse_special : {false, true}) {
        const StatusOr<std::vector<TokenId>> ours =
            tokenizer->Encode(text, {.parse_special = parse_special});
        ASSERT_TRUE(ours.ok()) << ours.status().ToString();
        const auto expected =
            c.at(parse_special ? "ids_special" : "ids").get<std::vector<TokenId>>();
        if (*ours != expected && ++mismatches <= 5) {
          ADD_FAILURE() << pre << " special=" << parse_special << " "
                        << nlohmann::json(text).dump() << "\n  ours:      "
                        << nlohmann::json(*ours).dump()
                        << "\n  llama.cpp: " << nlohmann::json(expected).dump();
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << pre;
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, PreVariantsTest,
                         ::testing::Values(
                             VariantsGolden{"pre_variants.json", 5, "smollm2"},
                             VariantsGolden{"pre_variants_o200k.json", 1, "o200k_on_llama3"},
                             VariantsGolden{"pre_variants_deepseek_kimi.json", 2,
                                            "deepseek_kimi_on_llama3"}),
                         [](const ::testing::TestParamInfo<VariantsGolden>& param_info) {
                           return std::string(param_info.param.name);
                         });

}  // namespace
}  // namespace tokenmill
