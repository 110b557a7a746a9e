// The vocabulary a GGUF file describes: token texts, their types and scores, the special token
// ids and the flags that say how to encode (tokenizer.ggml.* keys, llama.cpp's defaults).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"

namespace tokenmill {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// tokenizer.ggml.model gpt2, llama and bert.
enum class VocabKind { kBytePairGpt2, kSentencePiece, kWordPiece };

class Vocab {
 public:
  // Reads tokenizer.ggml.{model,tokens,token_type,scores,*_token_id,add_*}. An unsupported
  // model value is an error naming it.
  static StatusOr<Vocab> FromGguf(const GgufFile& file);

  // Move-only: the text index views the token strings.
  Vocab(Vocab&&) = default;
  Vocab& operator=(Vocab&&) = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  VocabKind kind() const { return kind_; }
  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  bool Contains(TokenId id) const { return id >= 0 && id < size(); }

  // The text as the file stores it (byte-level characters or "▁" for spaces).
  const std::string& text(TokenId id) const { return texts_[id]; }
  TokenType type(TokenId id) const { return types_[id]; }
  float score(TokenId id) const { return scores_[id]; }
  // The token whose stored text is exactly `text`, or kNoToken.
  TokenId Find(std::string_view text) const;

  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  TokenId eot() const { return eot_; }
  TokenId unknown() const { return unknown_; }
  TokenId padding() const { return padding_; }
  // tokenizer.ggml.seperator_token_id (sic): BERT's [SEP].
  TokenId sep() const { return sep_; }
  // What Encode adds with add_special: BOS first; EOS, then SEP, last. WordPiece adds [CLS] (its
  // BOS) and [SEP] whatever the file's add_bos_token and add_eos_token, as llama.cpp does, and
  // no EOS; no other kind adds SEP (tokenizer.ggml.add_sep_token is about pairs of texts).
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_sep() const { return add_sep_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  void set_add_bos(bool add_bos) { add_bos_ = add_bos; }

  // Tokens that end a generation: EOS, EOT, EOM and the end-of-turn tokens llama.cpp recognizes
  // by their text (<|im_end|>, <|eot_id|>, <end_of_turn>, ...), sorted.
  const std::vector<TokenId>& end_of_generation() const { return end_of_generation_; }

  // Tokens matched as a whole in the input before any other splitting: control, user-defined
  // and unknown tokens, longest text first.
  const std::vector<TokenId>& special_tokens() const { return special_tokens_; }
  // Whether the whitespace after this special token is dropped from the text that follows
  // (llama.cpp's LLAMA_TOKEN_ATTR_RSTRIP, which it sets for Phi-3's special tokens).
  bool rstrip(TokenId id) const { return rstrip_[id]; }

 private:
  Vocab() = default;
  Status ReadSpecialIds(const GgufFile& file);
  void FindEndOfGeneration();
  Status SetRstrip(const GgufFile& file);

  VocabKind kind_ = VocabKind::kSentencePiece;
  std::vector<std::string> texts_;
  std::vector<TokenType> types_;
  std::vector<float> scores_;
  std::unordered_map<std::string_view, TokenId> by_text_;  // views into texts_

  TokenId bos_ = kNoToken;
  TokenId eos_ = kNoToken;
  TokenId eot_ = kNoToken;
  TokenId eom_ = kNoToken;
  TokenId unknown_ = kNoToken;
  TokenId padding_ = kNoToken;
  TokenId sep_ = kNoToken;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_sep_ = false;
  bool add_space_prefix_ = false;
  std::vector<TokenId> end_of_generation_;
  std::vector<TokenId> special_tokens_;
  std::vector<bool> rstrip_;
};

}  // namespace tokenmill
