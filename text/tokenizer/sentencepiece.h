// SentencePiece-style BPE (tokenizer.ggml.model = llama): the adjacent pair whose merged text
// is the token with the best score merges first; characters no token covers fall back to
// <0xNN> byte tokens.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "text/tokenizer/vocab.h"

namespace tokenmill::tokenizer {

class SentencePieceModel {
 public:
  explicit SentencePieceModel(const Vocab& vocab);

  // Appends the tokens of `text`, whose spaces are already "▁".
  void Encode(std::string_view text, const Vocab& vocab, std::vector<TokenId>& out) const;

  // The byte a <0xNN> token stands for, or -1.
  static int ParseByteToken(std::string_view text);

 private:
  std::array<TokenId, 256> byte_tokens_;  // <0xNN> (or the byte itself), else the unknown token
};

}  // namespace tokenmill::tokenizer
