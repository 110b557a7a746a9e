// UTF-8 helpers shared by the tokenizers and the incremental decoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tokenmill::tokenizer {

// Length of the sequence a lead byte announces, as llama.cpp counts it (1 for continuation
// bytes and 0xF8..0xFF, so that a walk over any bytes always advances).
int Utf8LeadLength(uint8_t lead);

// Appends the UTF-8 encoding of `codepoint` (at most U+10FFFF).
void AppendUtf8(uint32_t codepoint, std::string& out);

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// How the bytes at `pos` begin: a complete well-formed character (strict UTF-8: no overlong
// forms, no surrogates, at most U+10FFFF) of `length` bytes, a well-formed prefix that the
// end of `text` cuts short, or a byte that can never begin a character here.
struct Utf8Sequence {
  enum class Kind { kComplete, kIncomplete, kInvalid } kind;
  size_t length;  // bytes of the character (kComplete) or of the prefix seen (kIncomplete)
};
Utf8Sequence ClassifyUtf8(std::string_view text, size_t pos);

// The code point at `pos` (< text.size()) and its length in bytes; a byte that does not begin
// a complete well-formed character reads as U+FFFD, one byte long.
struct DecodedCodepoint {
  uint32_t codepoint;
  size_t length;
};
DecodedCodepoint DecodeUtf8At(std::string_view text, size_t pos);

// True when `text` is well-formed UTF-8.
bool IsValidUtf8(std::string_view text);

// `text` with every byte that is not part of a well-formed character replaced by U+FFFD.
std::string SanitizeUtf8(std::string_view text);

}  // namespace tokenmill::tokenizer
