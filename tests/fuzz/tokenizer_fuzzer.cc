// libFuzzer target: any input text must encode, and any ids decode (whole or streamed),
// without a crash; well-formed text must survive encode then decode, and the streamed
// text must equal the whole decode. The model comes from
// TOKENMILL_FUZZ_MODEL (scripts/fuzz runs this target once per model).
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "gguf/gguf.h"
#include "text/tokenizer/incremental_decoder.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/utf8.h"

namespace {

// Loaded once: libFuzzer calls the target millions of times in one process.
const tokenmill::Tokenizer& LoadTokenizer() {
  static const tokenmill::Tokenizer* const tokenizer = [] {
    const char* path = std::getenv("TOKENMILL_FUZZ_MODEL");
    if (path == nullptr) {
      std::fprintf(stderr, "set TOKENMILL_FUZZ_MODEL to a GGUF file\n");
      std::abort();
    }
    auto file = tokenmill::GgufFile::Open(path);
    auto tok = file.ok() ? tokenmill::Tokenizer::FromGguf(*file) : file.status();
    if (!tok.ok()) {
      std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
      std::abort();
    }
    return new tokenmill::Tokenizer(std::move(tok).value());
  }();
  return *tokenizer;
}

std::string Escape(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(c));
    out += (c >= 0x20 && c < 0x7f) ? std::string(1, c) : std::string(hex);
  }
  return out;
}

bool AllBytesHaveTokens(std::string_view text) {
  // Bytes that some token stands for on its own.
  static const std::bitset<256> encodable = [] {
    std::bitset<256> bytes;
    const tokenmill::Tokenizer& tokenizer = LoadTokenizer();
    for (tokenmill::TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
      const std::string_view piece = tokenizer.Piece(id);
      if (piece.size() == 1) bytes.set(static_cast<unsigned char>(piece[0]));
    }
    return bytes;
  }();
  for (const char c : text) {
    if (!encodable.test(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

[[noreturn]] void Die(const char* what, std::string_view expected, std::string_view got) {
  std::fprintf(stderr, "%s\nexpected: %s\ngot:      %s\n", what, Escape(expected).c_str(),
               Escape(got).c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tokenmill::Tokenizer& tokenizer = LoadTokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  for (const bool parse_special : {false, true}) {
    auto ids = tokenizer.Encode(text, {.add_special = true, .parse_special = parse_special});
    if (!ids.ok()) continue;
    tokenmill::IncrementalDecoder stream(tokenizer);
    std::string streamed;
    for (const tokenmill::TokenId id : *ids) streamed += stream.Add(id);
    streamed += stream.Finish();
    const std::string decoded = tokenizer.Decode(*ids);
    // Vocabularies may lack a token for some bytes (SmolLM2 has none for 0x04, 0x06, 0xf1,
    // ...): llama.cpp drops those bytes, and so do we.
    // SentencePiece spells spaces "\u2581", so that character itself decodes as a space.
    // WordPiece normalizes (lowercase, no accents, spaces around punctuation), so its decode
    // is not the text; streaming must still give the whole decode, whatever the bytes.
    if (tokenizer.model_name() == "bert") {
      if (streamed != decoded) Die("streamed text != decoded text", decoded, streamed);
      continue;
    }
    if (!tokenmill::tokenizer::IsValidUtf8(text) || !AllBytesHaveTokens(text) ||
        (tokenizer.model_name() == "llama" && text.find("\u2581") != text.npos)) {
      continue;
    }
    // Special-token text parsed as such may gain a SentencePiece space prefix after it.
    if (!parse_special && decoded != text) Die("decode(encode(text)) != text", text, decoded);
    if (streamed != decoded) Die("streamed text != decoded text", decoded, streamed);
  }

  // Special tokens parsed only inside a range, as a rendered chat's markup: no crash.
  const std::vector<tokenmill::TextRange> markup = {{size / 4, size / 2}, {size / 2 + 1, size}};
  (void)tokenizer.Encode(text, {.add_special = false, .parse_special = true,
                                .special_token_ranges = &markup});

  // The same bytes read as token ids, in or out of the vocabulary.
  std::vector<tokenmill::TokenId> ids(size / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int32_t));
  tokenmill::IncrementalDecoder stream(tokenizer, {.render_special = true});
  for (const tokenmill::TokenId id : ids) (void)stream.Add(id);
  (void)stream.Finish();
  (void)tokenizer.Decode(ids);
  return 0;
}
