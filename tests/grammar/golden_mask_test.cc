// tokenmill's masks equal xgrammar's at every step of the golden sequences
// (tests/reference/make_grammar_golden.py): same vocabulary, same GBNF text.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/hash.h"
#include "gguf/gguf.h"
#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "tests/test_paths.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill::grammar {
namespace {

using Json = nlohmann::json;

const std::string kDataDir = TestDataDir() + "/grammar/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ReadGzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  TM_CHECK(file != nullptr) << path;
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(file, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(file);
  return out;
}

// The engine's view of the model's vocabulary: each token's bytes, control tokens empty.
Vocabulary ModelVocabulary(const std::string& model, const std::vector<int32_t>& eos) {
  auto file = GgufFile::Open(TestModelsDir() + "/" + model);
  TM_CHECK(file.ok()) << file.status().ToString();
  auto tokenizer = Tokenizer::FromGguf(*file);
  TM_CHECK(tokenizer.ok()) << tokenizer.status().ToString();
  Vocabulary vocab;
  for (int32_t t = 0; t < tokenizer->vocab_size(); ++t) {
    vocab.token_bytes.emplace_back(tokenizer->Piece(t));
  }
  vocab.eos_tokens = eos;
  return vocab;
}

// FNV-1a over each token's length (4 bytes, little endian) and bytes, as the script hashes.
std::string VocabularyHash(const Vocabulary& vocab) {
  std::string all;
  for (const std::string& t : vocab.token_bytes) {
    const uint32_t n = static_cast<uint32_t>(t.size());
    for (int i = 0; i < 4; ++i) all += static_cast<char>((n >> (8 * i)) & 0xFF);
    all += t;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Fnv1a64(all)));
  return hex;
}

class GoldenMaskTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    golden_ = new Json(Json::parse(ReadFile(kDataDir + "golden_masks.json")));
    masks_ = new std::string(ReadGzip(kDataDir + "golden_masks.bin.gz"));
    Vocabulary vocab = ModelVocabulary((*golden_)["model"], (*golden_)["eos"]);
    ASSERT_EQ(VocabularyHash(vocab), (*golden_)["vocab_hash"].get<std::string>())
        << "the tokenizer's token bytes differ from the script's";
    vocab_ = new std::shared_ptr<const VocabularyIndex>(VocabularyIndex::Build(std::move(vocab)));
  }
  static void TearDownTestSuite() {
    delete golden_;
    delete masks_;
    delete vocab_;
  }

  static std::vector<uint32_t> GoldenMask(int index) {
    const size_t words = (*golden_)["mask_words"];
    std::vector<uint32_t> mask(words);
    std::memcpy(mask.data(), masks_->data() + index * words * 4, words * 4);
    return mask;
  }

  static Json* golden_;
  static std::string* masks_;
  static std::shared_ptr<const VocabularyIndex>* vocab_;
};

Json* GoldenMaskTest::golden_ = nullptr;
std::string* GoldenMaskTest::masks_ = nullptr;
std::shared_ptr<const VocabularyIndex>* GoldenMaskTest::vocab_ = nullptr;

// Which tokens differ, for the failure message.
std::string Difference(const std::vector<uint32_t>& ours, const std::vector<uint32_t>& theirs,
                       const VocabularyIndex& vocab) {
  std::string out;
  int shown = 0;
  for (size_t t = 0; t < vocab.size() && shown < 8; ++t) {
    const bool a = (ours[t / 32] >> (t % 32)) & 1;
    const bool b = (theirs[t / 32] >> (t % 32)) & 1;
    if (a == b) continue;
    out += (a ? " +" : " -") + std::to_string(t) + "'" + vocab.token(static_cast<int32_t>(t)) + "'";
    ++shown;
  }
  return out;
}

TEST_F(GoldenMaskTest, GoldenGbnfIsWhatTheConvertersEmitNow) {
  const Json corpus = Json::parse(ReadFile(kDataDir + "corpus.json"));
  ASSERT_EQ(corpus.size(), (*golden_)["cases"].size()) << "rerun make_grammar_golden.py";
  for (size_t i = 0; i < corpus.size(); ++i) {
    GrammarSpec spec;
    const std::string kind = corpus[i]["kind"];
    spec.kind = kind == "gbnf"          ? GrammarSpec::Kind::kGbnf
                : kind == "json_schema" ? GrammarSpec::Kind::kJsonSchema
                : kind == "json_object" ? GrammarSpec::Kind::kJsonObject
                : kind == "regex"       ? GrammarSpec::Kind::kRegex
                                        : GrammarSpec::Kind::kChoice;
    if (spec.kind == GrammarSpec::Kind::kChoice) {
      spec.choices = Json::parse(corpus[i]["text"].get<std::string>()).get<std::vector<std::string>>();
    } else {
      spec.text = corpus[i]["text"];
    }
    const auto gbnf = SpecToGbnf(spec, GrammarLimits());
    ASSERT_TRUE(gbnf.ok()) << gbnf.status().ToString();
    EXPECT_EQ(*gbnf, (*golden_)["cases"][i]["gbnf"].get<std::string>())
        << corpus[i]["name"] << ": rerun make_grammar_golden.py";
  }
}

TEST_F(GoldenMaskTest, MasksEqualXgrammarsAtEveryStep) {
  const VocabularyIndex& vocab = **vocab_;
  int steps = 0;
  for (const Json& c : (*golden_)["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    GrammarSpec spec{GrammarSpec::Kind::kGbnf, c["gbnf"], {}};
    const auto compiled = CompileGrammar(spec, *vocab_, GrammarLimits());
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    int index = 0;
    for (const Json& seq : c["sequences"]) {
      SCOPED_TRACE("sequence " + std::to_string(index++));
      GrammarMatcher matcher(*compiled);
      const std::vector<int32_t> tokens = seq["tokens"];
      const std::vector<int> masks = seq["masks"];
      const int rejected_at = seq["rejected_at"];
      std::vector<uint32_t> ours(BitmaskWords(vocab.size()));
      for (size_t k = 0; k < masks.size(); ++k) {
        matcher.FillNextTokenMask(ours);
        const std::vector<uint32_t> theirs = GoldenMask(masks[k]);
        ASSERT_TRUE(ours == theirs) << "step " << k << ":" << Difference(ours, theirs, vocab);
        ++steps;
        const bool accepted = matcher.AcceptToken(tokens[k]);
        ASSERT_EQ(accepted, static_cast<int>(k) != rejected_at) << "step " << k;
      }
      if (seq["final_mask"].get<int>() >= 0) {
        matcher.FillNextTokenMask(ours);
        const std::vector<uint32_t> theirs = GoldenMask(seq["final_mask"]);
        ASSERT_TRUE(ours == theirs) << "final:" << Difference(ours, theirs, vocab);
      }
      // xgrammar terminates on EOS only; ours also where nothing but EOS may follow.
      if (rejected_at < 0) {
        bool only_eos = seq["final_mask"].get<int>() >= 0;
        if (only_eos) {
          std::vector<uint32_t> eos_only(ours.size(), 0);
          for (const int32_t eos : vocab.vocabulary().eos_tokens) {
            eos_only[eos / 32] |= uint32_t{1} << (eos % 32);
          }
          only_eos = GoldenMask(seq["final_mask"]) == eos_only;
        }
        EXPECT_EQ(matcher.IsTerminated(), seq["terminated"].get<bool>() || only_eos);
      }
    }
  }
  EXPECT_GT(steps, 500);
}

}  // namespace
}  // namespace tokenmill::grammar
