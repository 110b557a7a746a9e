// The Unicode properties WordPiece's normalizer reads, as llama.cpp's tables have them (Unicode
// 15.1; generated into unicode_data.inc by tests/reference/make_unicode_data.py).
#pragma once

#include <cstdint>

namespace tokenmill::tokenizer {

// A code point's general category, as far as WordPiece tells them apart.
enum class CategoryGroup : uint8_t {
  kOther,        // letters, numbers, separators, unassigned
  kControl,      // Cc, Cf, Co, Cs
  kMark,         // Mn, Mc, Me
  kPunctuation,  // P*
  kSymbol,       // S*
};
CategoryGroup CategoryOf(uint32_t codepoint);

// Unicode's White_Space (llama.cpp's list), which includes U+0085 but not U+001C..U+001F.
bool IsUnicodeWhitespace(uint32_t codepoint);

// The simple (one code point) lowercase mapping; the code point itself when it has none.
uint32_t SimpleLowercase(uint32_t codepoint);

// The first code point of the canonical decomposition (NFD): "é" -> "e", a Hangul syllable ->
// its leading consonant. llama.cpp's "NFD" keeps only that one.
uint32_t FirstOfDecomposition(uint32_t codepoint);

}  // namespace tokenmill::tokenizer
