#include "text/tokenizer/utf8.h"

namespace tokenmill::tokenizer {

int Utf8LeadLength(uint8_t lead) {
  static constexpr int kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

void AppendUtf8(uint32_t codepoint, std::string& out) {
  if (codepoint < 0x80) {
    out.push_back(static_cast<char>(codepoint));
  } else if (codepoint < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (codepoint >> 6)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else if (codepoint < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (codepoint >> 12)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (codepoint >> 18)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  }
}

Utf8Sequence ClassifyUtf8(std::string_view text, size_t pos) {
  using Kind = Utf8Sequence::Kind;
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return {Kind::kComplete, 1};
  size_t length;
  // The allowed range of the second byte excludes overlong forms, surrogates and > U+10FFFF
  // (Unicode table 3-7).
  uint8_t second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;
    if (lead == 0xED) second_max = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;
    if (lead == 0xF4) second_max = 0x8F;
  } else {
    return {Kind::kInvalid, 1};
  }
  for (size_t i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return {Kind::kIncomplete, i};
    const uint8_t b = byte(i);
    const uint8_t lo = i == 1 ? second_min : 0x80;
    const uint8_t hi = i == 1 ? second_max : 0xBF;
    if (b < lo || b > hi) return {Kind::kInvalid, 1};
  }
  return {Kind::kComplete, length};
}

DecodedCodepoint DecodeUtf8At(std::string_view text, size_t pos) {
  const Utf8Sequence seq = ClassifyUtf8(text, pos);
  if (seq.kind != Utf8Sequence::Kind::kComplete) return {0xFFFD, 1};
  static constexpr uint8_t kLeadMask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  uint32_t codepoint = static_cast<uint8_t>(text[pos]) & kLeadMask[seq.length];
  for (size_t i = 1; i < seq.length; ++i) {
    codepoint = (codepoint << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3F);
  }
  return {codepoint, seq.length};
}

bool IsValidUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Sequence seq = ClassifyUtf8(text, pos);
    if (seq.kind != Utf8Sequence::Kind::kComplete) return false;
    pos += seq.length;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Sequence seq = ClassifyUtf8(text, pos);
    if (seq.kind == Utf8Sequence::Kind::kComplete) {
      out.append(text.substr(pos, seq.length));
      pos += seq.length;
    } else {
      out.append(kReplacementCharacter);
      pos += 1;
    }
  }
  return out;
}

}  // namespace tokenmill::tokenizer
