// GPT-2's byte-level alphabet: every byte is spelled as one printable character, so that
// byte-level BPE vocabularies and merges are plain Unicode strings.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tokenmill::tokenizer {

class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();

  // Appends the spelling of every byte of `bytes`.
  void Spell(std::string_view bytes, std::string& out) const;
  // The bytes a spelled text stands for. Characters outside the alphabet (which byte-level
  // vocabularies should not contain) are kept as they are.
  std::string Unspell(std::string_view text) const;

 private:
  std::array<std::string, 256> spelling_;       // byte -> UTF-8 of its character
  std::array<int16_t, 512> byte_of_codepoint_;  // codepoint -> byte, or -1
};

}  // namespace tokenmill::tokenizer
