// WordPiece (tokenizer.ggml.model = bert), as llama.cpp's WPM tokenizer does it: BERT's
// normalizer (lowercase, accents stripped), words split at whitespace and around punctuation,
// ASCII symbols and CJK ideographs, then per word the longest token first, left to right.
// The GGUF converter marks word-initial tokens with "▁" (U+2581) where BERT marks the others
// with "##", so each word is looked up with a "▁" in front; a word where at some point no
// token matches becomes the unknown token as a whole.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "text/tokenizer/vocab.h"

namespace tokenmill::tokenizer {

class WordPieceModel {
 public:
  // Reads tokenizer.ggml.normalizer.{lowercase,strip_accents} (llama.cpp's defaults: both on,
  // strip_accents following lowercase).
  static StatusOr<WordPieceModel> FromGguf(const GgufFile& file, const Vocab& vocab);

  // Appends the tokens of `text`, any bytes: those not well-formed UTF-8 are dropped, as
  // llama.cpp drops the U+FFFD it reads them as.
  void Encode(std::string_view text, const Vocab& vocab, std::vector<TokenId>& out) const;

 private:
  // `word` starts with "▁".
  void EncodeWord(std::string_view word, const Vocab& vocab, std::vector<TokenId>& out) const;

  bool lowercase_ = true;
  bool strip_accents_ = true;
  // The byte lengths of the vocabulary's tokens, longest first: the only lengths worth a
  // lookup, and the bound on each one's search (llama.cpp's max_token_len).
  std::vector<size_t> token_lengths_;
};

}  // namespace tokenmill::tokenizer
