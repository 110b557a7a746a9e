// WordPiece (BERT) beyond the golden corpus: ill-formed UTF-8 and every code point against
// llama.cpp's ids (ggml-vocab-bert-bge.json's byte_cases, wordpiece_codepoints.json, both
// written by tests/reference/make_tokenizer_golden.py), hostile lengths, and the metadata a
// BERT GGUF can carry, on small vocabularies made here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/gguf/gguf_builder.h"
#include "tests/test_paths.h"
#include "text/tokenizer/incremental_decoder.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/utf8.h"

namespace tokenmill {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

nlohmann::json LoadJson(const std::string& name) {
  std::ifstream in(TestDataDir() + "/tokenizer/" + name);
  TM_CHECK(in.good()) << "missing " << name;
  return nlohmann::json::parse(in);
}

const Tokenizer& Bge() {
  static const Tokenizer* tokenizer = [] {
    StatusOr<GgufFile> file = GgufFile::Open(TestModelsDir() + "/ggml-vocab-bert-bge.gguf");
    TM_CHECK(file.ok()) << file.status().ToString() << " (run scripts/setup)";
    StatusOr<Tokenizer> t = Tokenizer::FromGguf(*file);
    TM_CHECK(t.ok()) << t.status().ToString();
    return new Tokenizer(std::move(t).value());
  }();
  return *tokenizer;
}

std::vector<TokenId> Encode(const Tokenizer& t, std::string_view text, EncodeOptions o = {}) {
  StatusOr<std::vector<TokenId>> ids = t.Encode(text, o);
  TM_CHECK(ids.ok()) << ids.status().ToString();
  return *ids;
}

// --- bge-small-en against llama.cpp ------------------------------------------------------------

TEST(WordPieceBgeTest, SpecialTokensAsLlamaCppReadsThem) {
  const Vocab& vocab = Bge().vocab();
  EXPECT_EQ(Bge().model_name(), "bert");
  EXPECT_EQ(vocab.bos(), 101);  // [CLS]
  EXPECT_EQ(vocab.sep(), 102);
  EXPECT_EQ(vocab.unknown(), 100);
  EXPECT_EQ(vocab.padding(), 0);
  EXPECT_EQ(vocab.eos(), kNoToken);  // llama.cpp's token_eos() is -1 for this file
  EXPECT_TRUE(vocab.add_bos() && vocab.add_sep() && !vocab.add_eos());
  EXPECT_THAT(Encode(Bge(), "[MASK]", {.parse_special = true}), ElementsAre(101, 103, 102));
}

TEST(WordPieceBgeTest, IllFormedUtf8AsLlamaCpp) {
  const nlohmann::json golden = LoadJson("ggml-vocab-bert-bge.json");
  ASSERT_FALSE(golden.at("byte_cases").empty());
  for (const nlohmann::json& c : golden.at("byte_cases")) {
    const std::string hex = c.at("hex").get<std::string>();
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    EXPECT_EQ(Encode(Bge(), bytes), c.at("ids").get<std::vector<TokenId>>()) << hex;
  }
}

uint64_t Fnv1a64(const std::vector<TokenId>& ids) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const TokenId id : ids) {
    const auto value = static_cast<uint32_t>(id);
    for (int shift = 0; shift < 32; shift += 8) {
      hash = (hash ^ ((value >> shift) & 0xFF)) * 0x100000001b3ULL;
    }
  }
  return hash;
}

// Every code point's class (whitespace, control, mark, punctuation, CJK, other), lowercase and
// first-of-decomposition, as llama.cpp's tables give them: "a" + c + "a" splits, joins or
// stays one word by them.
TEST(WordPieceBgeTest, EveryCodePointAsLlamaCpp) {
  const nlohmann::json golden = LoadJson("wordpiece_codepoints.json");
  const uint32_t block_size = golden.at("block_size").get<uint32_t>();
  const std::vector<std::string> hashes = golden.at("hashes").get<std::vector<std::string>>();
  ASSERT_EQ(hashes.size() * block_size, 0x110000u);
  int mismatches = 0;
  for (uint32_t block = 0; block < hashes.size(); ++block) {
    std::string probe;
    for (uint32_t cp = block * block_size; cp < (block + 1) * block_size; ++cp) {
      if (cp >= 0xD800 && cp < 0xE000) continue;
      if (!probe.empty()) probe += ' ';
      probe += 'a';
      tokenizer::AppendUtf8(cp, probe);
      probe += 'a';
    }
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx",
                  static_cast<unsigned long long>(
                      Fnv1a64(Encode(Bge(), probe, {.add_special = false}))));
    if (hash != hashes[block] && ++mismatches <= 10) {
      ADD_FAILURE() << "code points from U+" << std::hex << block * block_size
                    << " tokenize unlike llama.cpp's";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// llama.cpp decodes overlong forms ("\xc1\x81" as "A") and forms past U+10FFFF (then fails to
// encode them again); tokenmill reads both as ill-formed, so they are dropped. The overlong NUL
// is dropped by both.
TEST(WordPieceBgeTest, OverlongAndOutOfRangeFormsAreDropped) {
  for (const std::string text : {"\xc1\x81", "\xf4\x90\x80\x80", "\xe0\x81\x81"}) {
    EXPECT_THAT(Encode(Bge(), text), ElementsAre(101, 102));
  }
  EXPECT_EQ(Encode(Bge(), "a\xc0\x80" "b"), Encode(Bge(), "ab"));
}

TEST(WordPieceBgeTest, RandomBytesEncodeAndDecode) {
  std::mt19937 rng(7);
  const std::string alphabet = "aZ 9!\x80\xbf\xc3\xe4\xed\xf0\xf4\xff\xa9\x81";
  for (int round = 0; round < 2000; ++round) {
    std::string text(rng() % 40, ' ');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    const std::vector<TokenId> ids = Encode(Bge(), text, {.parse_special = true});
    ASSERT_GE(ids.size(), 2u);
    const std::string decoded = Bge().Decode(ids);
    EXPECT_TRUE(tokenizer::IsValidUtf8(decoded));
    IncrementalDecoder stream(Bge());
    std::string streamed;
    for (const TokenId id : ids) streamed += stream.Add(id);
    EXPECT_EQ(streamed + stream.Finish(), decoded);
  }
}

// Each position of a word looks up at most one token per distinct token length (llama.cpp
// bounds it by the longest token), so time grows linearly with the input, whatever its shape.
double SecondsToEncode(const std::string& text) {
  double best = 1e9;
  for (int i = 0; i < 2; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<TokenId> ids = Encode(Bge(), text);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                              .count());
    EXPECT_GE(ids.size(), 2u);
  }
  return best;
}

TEST(WordPieceBgeTest, HostileInputsStayLinear) {
  std::mt19937 rng(11);
  const auto make = [&](int kind, size_t size) {
    std::string s;
    while (s.size() < size) {
      switch (kind) {
        case 0: s += 'a'; break;                           // one long word of one letter
        case 1: s += static_cast<char>('a' + rng() % 26); break;  // one long random word
        case 2: s += "\xff"; break;                        // ill-formed, all dropped
        case 3: s += "!"; break;                           // a word per character
        default: s += "q\xcc\x81"; break;                  // letters and marks to strip
      }
    }
    if (kind <= 1) s += "\xf0\x9f\xa6\x99";  // an emoji at the end: the whole word is unknown
    return s;
  };
  for (int kind = 0; kind < 5; ++kind) {
    const double small = SecondsToEncode(make(kind, 1 << 18));
    const double large = SecondsToEncode(make(kind, 1 << 20));
    // Linear is 4x; quadratic would be 16x. Slack for timer noise on tiny runs.
    EXPECT_LT(large, 10 * small + 0.05) << "input kind " << kind << ": " << small << " s for "
                                        << (1 << 18) << " bytes, " << large << " s for 4x";
  }
  EXPECT_THAT(Encode(Bge(), make(0, 1 << 20)), ElementsAre(101, 100, 102));
}

// --- vocabularies made here -----------------------------------------------------------------

// [PAD] [UNK] [CLS] [SEP], then word starts and continuations.
const std::vector<std::string> kTokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "▁hello",
                                          "▁world", "llo",  "▁he",   "▁!",    "▁é",
                                          "▁Hello", "o",    "▁ᄒ"};

// The first four are control tokens, as in BERT's GGUFs.
testing::GgufBuilder& AddTokens(testing::GgufBuilder& b) {
  std::vector<uint8_t> types;
  testing::GgufBuilder::Put<uint32_t>(types, 5);  // int32 elements
  testing::GgufBuilder::Put<uint64_t>(types, kTokens.size());
  for (size_t i = 0; i < kTokens.size(); ++i) {
    testing::GgufBuilder::Put<int32_t>(types, i < 4 ? 3 : 1);
  }
  return b.KeyString("tokenizer.ggml.model", "bert")
      .KeyStrings("tokenizer.ggml.tokens", kTokens)
      .KeyRaw("tokenizer.ggml.token_type", 9, types);
}

testing::GgufBuilder BertVocab() {
  testing::GgufBuilder b;
  AddTokens(b)
      .KeyU32("tokenizer.ggml.bos_token_id", 2)
      .KeyU32("tokenizer.ggml.seperator_token_id", 3)
      .KeyU32("tokenizer.ggml.unknown_token_id", 1);
  return b;
}

StatusOr<Tokenizer> Build(testing::GgufBuilder& builder) {
  // The file's bytes must outlive only the load: the tokenizer copies what it needs.
  const std::vector<uint8_t> bytes = builder.Build();
  TM_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Parse(bytes));
  return Tokenizer::FromGguf(file);
}

Tokenizer MustBuild(testing::GgufBuilder builder) {
  StatusOr<Tokenizer> t = Build(builder);
  TM_CHECK(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(WordPieceTest, LongestTokenFirstAndUnknownWords) {
  const Tokenizer t = MustBuild(BertVocab());
  EXPECT_THAT(Encode(t, "Hello WORLD!"), ElementsAre(2, 4, 5, 8, 3));
  EXPECT_THAT(Encode(t, "hellollo"), ElementsAre(2, 4, 6, 3));
  EXPECT_THAT(Encode(t, "hex hello"), ElementsAre(2, 1, 4, 3));  // no token at "x": [UNK]
  EXPECT_THAT(Encode(t, "héllo"), ElementsAre(2, 4, 3));         // accents stripped
  EXPECT_THAT(Encode(t, "훈"), ElementsAre(2, 12, 3));            // Hangul: its first jamo
  EXPECT_THAT(Encode(t, "", {.add_special = false}), IsEmpty());
  EXPECT_THAT(Encode(t, " \t\n"), ElementsAre(2, 3));
}

TEST(WordPieceTest, NormalizerFlags) {
  testing::GgufBuilder cased = BertVocab();
  cased.KeyBool("tokenizer.ggml.normalizer.lowercase", false);  // strip_accents follows it
  const Tokenizer c = MustBuild(cased);
  EXPECT_THAT(Encode(c, "Hello é"), ElementsAre(2, 10, 9, 3));
  EXPECT_THAT(Encode(c, "hello"), ElementsAre(2, 4, 3));

  testing::GgufBuilder accents = BertVocab();
  accents.KeyBool("tokenizer.ggml.normalizer.strip_accents", false);
  const Tokenizer a = MustBuild(accents);
  EXPECT_THAT(Encode(a, "É"), ElementsAre(2, 9, 3));  // lowercased, accent kept
}

TEST(WordPieceTest, ClsAndSepWhateverTheFlags) {
  testing::GgufBuilder b = BertVocab();
  b.KeyBool("tokenizer.ggml.add_bos_token", false).KeyBool("tokenizer.ggml.add_eos_token", true);
  const Tokenizer t = MustBuild(b);
  EXPECT_THAT(Encode(t, "hello"), ElementsAre(2, 4, 3));
  EXPECT_THAT(Encode(t, "hello", {.add_special = false}), ElementsAre(4));
  EXPECT_THAT(Encode(t, "[SEP]hello[CLS]", {.add_special = false, .parse_special = true}),
              ElementsAre(3, 4, 2));
}

TEST(WordPieceTest, NoUnknownTokenDropsTheWord) {
  testing::GgufBuilder b;
  AddTokens(b)
      .KeyU32("tokenizer.ggml.bos_token_id", 2)
      .KeyU32("tokenizer.ggml.seperator_token_id", 3);  // [UNK]'s default, 100, is past the end
  const Tokenizer t = MustBuild(b);
  EXPECT_EQ(t.vocab().unknown(), kNoToken);
  EXPECT_THAT(Encode(t, "hex hello"), ElementsAre(2, 4, 3));
}

TEST(WordPieceTest, MissingClsOrSepIsAnError) {
  testing::GgufBuilder b;
  AddTokens(b);
  const StatusOr<Tokenizer> t = Build(b);  // the defaults, 101 and 102, are past the end
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("separator ([SEP])"));
}

TEST(WordPieceTest, DecodeJoinsPiecesWithTheirSpaces) {
  const Tokenizer t = MustBuild(BertVocab());
  const std::vector<TokenId> ids = Encode(t, "Hello hellollo world!");
  EXPECT_EQ(t.Decode(ids), "hello hellollo world !");
  EXPECT_EQ(t.Decode(ids, {.render_special = true}), "[CLS] hello hellollo world ![SEP]");
  EXPECT_EQ(t.Decode(ids, {.strip_space_prefix = false}), " hello hellollo world !");
  IncrementalDecoder stream(t);
  std::string streamed;
  for (const TokenId id : ids) streamed += stream.Add(id);
  EXPECT_EQ(streamed + stream.Finish(), "hello hellollo world !");
}

}  // namespace
}  // namespace tokenmill
