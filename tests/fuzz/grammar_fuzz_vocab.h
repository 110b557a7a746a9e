// The vocabulary and caps the grammar fuzzers compile against: small, so an input runs fast.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/vocabulary.h"

namespace tokenmill::grammar::fuzz {

inline std::shared_ptr<const VocabularyIndex> FuzzVocabulary() {
  Vocabulary vocab;
  vocab.token_bytes = {"", ""};  // a special token and EOS
  vocab.eos_tokens = {1};
  for (int c = 0x20; c < 0x7F; ++c) vocab.token_bytes.push_back(std::string(1, static_cast<char>(c)));
  for (const char* piece : {"\n", "ab", "{\"", "\":", "\",", " \"", "12", "true", "é", "\xC3",
                            "\xA9", "€", "\xF0\x9F", "null", "}}", "a1"}) {
    vocab.token_bytes.push_back(piece);
  }
  return VocabularyIndex::Build(std::move(vocab));
}

inline GrammarLimits FuzzLimits() {
  GrammarLimits limits;
  limits.max_elements = 20000;
  limits.max_rules = 4000;
  limits.max_repetition = 200;
  limits.max_compile_time = std::chrono::milliseconds(2000);
  return limits;
}

}  // namespace tokenmill::grammar::fuzz
