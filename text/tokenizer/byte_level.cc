#include "text/tokenizer/byte_level.h"

#include "text/tokenizer/utf8.h"

namespace tokenmill::tokenizer {
namespace {

// Printable Latin-1 bytes spell themselves; the others map to U+0100.. in byte order
// (GPT-2's bytes_to_unicode).
bool SpellsItself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

}  // namespace

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_codepoint_.fill(-1);
  uint32_t next_shifted = 256;
  for (int byte = 0; byte < 256; ++byte) {
    const uint32_t codepoint = SpellsItself(byte) ? byte : next_shifted++;
    AppendUtf8(codepoint, spelling_[byte]);
    byte_of_codepoint_[codepoint] = static_cast<int16_t>(byte);
  }
}

void ByteLevelAlphabet::Spell(std::string_view bytes, std::string& out) const {
  for (const char c : bytes) out += spelling_[static_cast<uint8_t>(c)];
}

std::string ByteLevelAlphabet::Unspell(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Sequence seq = ClassifyUtf8(text, pos);
    const size_t length = seq.kind == Utf8Sequence::Kind::kComplete ? seq.length : 1;
    uint32_t codepoint = 0x110000;  // none
    if (seq.kind != Utf8Sequence::Kind::kComplete) {
      // a stray byte: kept below
    } else if (length == 1) {
      codepoint = static_cast<uint8_t>(text[pos]);
    } else if (length == 2) {
      codepoint = ((static_cast<uint8_t>(text[pos]) & 0x1F) << 6) |
                  (static_cast<uint8_t>(text[pos + 1]) & 0x3F);
    }
    if (codepoint < byte_of_codepoint_.size() && byte_of_codepoint_[codepoint] >= 0) {
      out.push_back(static_cast<char>(byte_of_codepoint_[codepoint]));
    } else {
      out.append(text.substr(pos, length));
    }
    pos += length;
  }
  return out;
}

}  // namespace tokenmill::tokenizer
