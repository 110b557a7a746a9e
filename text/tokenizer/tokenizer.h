// Text <-> token ids for the vocabulary of a GGUF file: byte-level BPE (gpt2),
// SentencePiece-style (llama) or WordPiece (bert), producing the same ids as llama.cpp's
// tokenizer.
//
//   TM_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
//   TM_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromGguf(file));
//   TM_ASSIGN_OR_RETURN(std::vector<TokenId> ids, tokenizer.Encode("Hello"));
//
// The tokenizer copies what it needs: the GgufFile may be closed afterwards. All methods are
// const and safe to call from several threads at once.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "text/tokenizer/bpe.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/pre_tokenizer.h"
#include "text/tokenizer/sentencepiece.h"
#include "text/tokenizer/text_range.h"
#include "text/tokenizer/vocab.h"
#include "text/tokenizer/wordpiece.h"

namespace tokenmill {

struct EncodeOptions {
  // Add BOS/EOS where the model's metadata (tokenizer.ggml.add_bos_token, ...) says so, and
  // WordPiece's [CLS] and [SEP] (Vocab::add_sep).
  bool add_special = true;
  // Turn special-token text in the input ("<|im_start|>", "</s>") into those tokens. Off, it is
  // tokenized as plain text, so user input cannot forge control tokens.
  bool parse_special = false;
  // With parse_special: only special-token text lying wholly inside one of these ranges
  // (sorted, disjoint) becomes a control token; elsewhere it is text. A rendered chat's
  // markup, so that what the client wrote stays text (PromptMarkup). Null: anywhere.
  const std::vector<TextRange>* special_token_ranges = nullptr;
};

struct DecodeOptions {
  // Control tokens (BOS, <|im_end|>, ...) as their text; off, they produce nothing.
  bool render_special = false;
  // SentencePiece vocabularies that add a space before the text (add_space_prefix), and
  // WordPiece, whose words all start with one: drop the leading space of the first piece, so
  // that Decode(Encode(s)) == s (for WordPiece, s normalized, as llama-cpp-python's detokenize
  // gives it). Streams that continue a prompt want it off.
  bool strip_space_prefix = true;
};

class Tokenizer {
 public:
  static StatusOr<Tokenizer> FromGguf(const GgufFile& file);

  // Token ids of `text`. Bytes that are not well-formed UTF-8 are tokenized as U+FFFD by
  // byte-level BPE (as llama.cpp does), as byte tokens by SentencePiece, and dropped by
  // WordPiece.
  StatusOr<std::vector<TokenId>> Encode(std::string_view text,
                                        const EncodeOptions& options = {}) const;

  // The text of `ids`, concatenated. Ids outside the vocabulary produce nothing. The result
  // is raw bytes: a prefix of a token sequence may end inside a character (IncrementalDecoder
  // holds those back).
  std::string Decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;

  // The bytes one token stands for; empty for ids outside the vocabulary, unused tokens, and
  // control tokens unless `render_special`.
  std::string_view Piece(TokenId id, bool render_special = false) const;
  // Whether the space-prefix stripping of DecodeOptions applies to this token's piece.
  bool PieceHasSpacePrefix(TokenId id) const;

  // Tokens that end a generation (EOS, EOT, <|im_end|>, ...), for the engine's stop check.
  const std::vector<TokenId>& end_of_generation_ids() const {
    return vocab_.end_of_generation();
  }
  bool IsEndOfGeneration(TokenId id) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t vocab_size() const { return vocab_.size(); }
  TokenId bos() const { return vocab_.bos(); }
  TokenId eos() const { return vocab_.eos(); }
  // "gpt2", "llama" or "bert", and the pre-tokenizer name ("" for SentencePiece and WordPiece).
  std::string_view model_name() const;
  std::string_view pre_tokenizer_name() const;

 private:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
  void BuildPieces();
  Status EncodeBytePairText(std::string_view text, std::vector<TokenId>& out) const;

  Vocab vocab_;
  std::optional<tokenizer::PreTokenizer> pre_tokenizer_;     // byte-level BPE only
  std::optional<tokenizer::BytePairModel> byte_pair_;        // byte-level BPE only
  std::optional<tokenizer::SentencePieceModel> sentencepiece_;  // SentencePiece only
  std::optional<tokenizer::WordPieceModel> wordpiece_;          // WordPiece only
  tokenizer::ByteLevelAlphabet alphabet_;
  std::vector<std::string> pieces_;  // decoded bytes of each token
};

}  // namespace tokenmill
