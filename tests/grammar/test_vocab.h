// A small vocabulary for unit tests: every printable ASCII byte, a few multi-byte pieces
// (words, JSON punctuation, UTF-8 characters and a lone UTF-8 lead byte), an empty special
// token and EOS.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace tokenmill::grammar::testing {

inline std::shared_ptr<const VocabularyIndex> SmallVocabulary() {
  Vocabulary vocab;
  vocab.token_bytes.push_back("");  // special, e.g. <|im_start|>
  vocab.token_bytes.push_back("");  // EOS
  vocab.eos_tokens = {1};
  for (int c = 0x20; c < 0x7F; ++c) vocab.token_bytes.push_back(std::string(1, static_cast<char>(c)));
  for (const char* piece : {"\n", "ab", "abc", "yes", "no", "{\"", "\":", "\",", "\"}", "\"a",
                            "12", "true", "null", " \"", "é", "\xC3", "\xA9", "€", "ab"}) {
    vocab.token_bytes.push_back(piece);
  }
  return VocabularyIndex::Build(std::move(vocab));
}

inline int32_t TokenOf(const VocabularyIndex& vocab, const std::string& bytes) {
  for (size_t t = 0; t < vocab.size(); ++t) {
    if (vocab.token(static_cast<int32_t>(t)) == bytes) return static_cast<int32_t>(t);
  }
  return -1;
}

inline std::shared_ptr<const CompiledGrammar> MustCompile(
    GrammarSpec::Kind kind, const std::string& text,
    const std::shared_ptr<const VocabularyIndex>& vocab) {
  GrammarSpec spec;
  spec.kind = kind;
  spec.text = text;
  auto compiled = CompileGrammar(spec, vocab, GrammarLimits());
  TM_CHECK(compiled.ok()) << compiled.status().ToString();
  return *compiled;
}

inline std::vector<uint32_t> MaskOf(const GrammarMatcher& matcher) {
  std::vector<uint32_t> mask(BitmaskWords(matcher.vocab_size()));
  matcher.FillNextTokenMask(mask);
  return mask;
}

inline bool Allowed(const std::vector<uint32_t>& mask, int32_t token) {
  return (mask[token / 32] >> (token % 32)) & 1;
}

}  // namespace tokenmill::grammar::testing
