// Byte-level BPE (tokenizer.ggml.model = gpt2): merges applied by rank within one word.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "text/tokenizer/vocab.h"

namespace tokenmill::tokenizer {

class BytePairModel {
 public:
  // Reads tokenizer.ggml.merges ("left right" per line, best first).
  static StatusOr<BytePairModel> FromGguf(const GgufFile& file, const Vocab& vocab);

  // Appends the tokens of one pre-tokenized word spelled in the byte-level alphabet. With
  // `ignore_merges`, a word that is itself a token becomes that token (Llama 3).
  void EncodeWord(std::string_view word, const Vocab& vocab, bool ignore_merges,
                  std::vector<TokenId>& out) const;

  size_t num_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    TokenId result;
  };
  static uint64_t Key(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* FindMerge(TokenId left, TokenId right) const;

  // (left token, right token) -> rank and merged token: one hash lookup per candidate pair.
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace tokenmill::tokenizer
