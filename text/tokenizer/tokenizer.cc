#include "text/tokenizer/tokenizer.h"

#include <algorithm>

#include "text/tokenizer/special_tokens.h"
#include "text/tokenizer/utf8.h"

namespace tokenmill {

using tokenizer::Fragment;

StatusOr<Tokenizer> Tokenizer::FromGguf(const GgufFile& file) {
  TM_ASSIGN_OR_RETURN(Vocab vocab, Vocab::FromGguf(file));
  Tokenizer result(std::move(vocab));
  if (result.vocab_.kind() == VocabKind::kBytePairGpt2) {
    std::string_view pre;
    if (file.Has("tokenizer.ggml.pre")) {
      TM_ASSIGN_OR_RETURN(pre, file.GetString("tokenizer.ggml.pre"));
    }
    TM_ASSIGN_OR_RETURN(tokenizer::PreTokenizer pre_tokenizer,
                        tokenizer::PreTokenizer::ForName(pre));
    if (pre_tokenizer.adds_bos_by_default() && !file.Has("tokenizer.ggml.add_bos_token") &&
        result.vocab_.bos() != kNoToken) {
      result.vocab_.set_add_bos(true);
    }
    result.pre_tokenizer_.emplace(std::move(pre_tokenizer));
    TM_ASSIGN_OR_RETURN(tokenizer::BytePairModel byte_pair,
                        tokenizer::BytePairModel::FromGguf(file, result.vocab_));
    result.byte_pair_.emplace(std::move(byte_pair));
  } else if (result.vocab_.kind() == VocabKind::kWordPiece) {
    TM_ASSIGN_OR_RETURN(tokenizer::WordPieceModel wordpiece,
                        tokenizer::WordPieceModel::FromGguf(file, result.vocab_));
    result.wordpiece_.emplace(std::move(wordpiece));
  } else {
    result.sentencepiece_.emplace(result.vocab_);
  }
  result.BuildPieces();
  return result;
}

void Tokenizer::BuildPieces() {
  const bool byte_level = vocab_.kind() == VocabKind::kBytePairGpt2;
  pieces_.resize(vocab_.size());
  for (TokenId id = 0; id < vocab_.size(); ++id) {
    const std::string& text = vocab_.text(id);
    std::string& piece = pieces_[id];
    switch (vocab_.type(id)) {
      case TokenType::kNormal:
        if (byte_level) {
          piece = alphabet_.Unspell(text);
        } else {
          // "▁" (U+2581) stands for a space (SentencePiece's, WordPiece's word start).
          for (size_t pos = 0; pos < text.size();) {
            if (text.compare(pos, 3, "\xE2\x96\x81") == 0) {
              piece.push_back(' ');
              pos += 3;
            } else {
              piece.push_back(text[pos++]);
            }
          }
        }
        break;
      case TokenType::kByte:
        if (const int byte = tokenizer::SentencePieceModel::ParseByteToken(text); byte >= 0) {
          piece.assign(1, static_cast<char>(byte));
        } else {
          piece = text;
        }
        break;
      case TokenType::kControl:
      case TokenType::kUserDefined:
      case TokenType::kUnknown:
        piece = text;  // stored as the text itself, not in the byte-level alphabet
        break;
      case TokenType::kUnused:
      case TokenType::kUndefined:
        break;
    }
  }
}

StatusOr<std::vector<TokenId>> Tokenizer::Encode(std::string_view text,
                                                 const EncodeOptions& options) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 2);
  const bool add_bos = options.add_special && vocab_.add_bos();
  if (add_bos) ids.push_back(vocab_.bos());
  const std::vector<Fragment> fragments =
      tokenizer::SplitOnSpecialTokens(text, vocab_, options.parse_special,
                                      options.special_token_ranges);

  if (!sentencepiece_) {
    for (const Fragment& fragment : fragments) {
      const std::string_view plain = text.substr(fragment.offset, fragment.length);
      if (fragment.token != kNoToken) {
        ids.push_back(fragment.token);
      } else if (byte_pair_) {
        TM_RETURN_IF_ERROR(EncodeBytePairText(plain, ids));
      } else {
        wordpiece_->Encode(plain, vocab_, ids);
      }
    }
  } else {
    // llama.cpp: a space goes before the first text and before text that follows a special
    // token, when the vocabulary asks for a space prefix.
    bool after_special = true;
    std::string escaped;
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        ids.push_back(fragment.token);
        after_special = true;
        continue;
      }
      escaped.clear();
      if (vocab_.add_space_prefix() && after_special) escaped.append("\xE2\x96\x81");
      for (const char c : text.substr(fragment.offset, fragment.length)) {
        if (c == ' ') {
          escaped.append("\xE2\x96\x81");
        } else {
          escaped.push_back(c);
        }
      }
      sentencepiece_->Encode(escaped, vocab_, ids);
      after_special = false;
    }
  }
  if (options.add_special && vocab_.add_eos()) ids.push_back(vocab_.eos());
  if (options.add_special && vocab_.add_sep()) ids.push_back(vocab_.sep());
  return ids;
}

Status Tokenizer::EncodeBytePairText(std::string_view text, std::vector<TokenId>& out) const {
  std::string sanitized;
  if (!tokenizer::IsValidUtf8(text)) {
    sanitized = tokenizer::SanitizeUtf8(text);
    text = sanitized;
  }
  std::vector<std::string_view> words;
  TM_RETURN_IF_ERROR(pre_tokenizer_->Split(text, words));
  std::string spelled;
  for (const std::string_view word : words) {
    spelled.clear();
    alphabet_.Spell(word, spelled);
    byte_pair_->EncodeWord(spelled, vocab_, pre_tokenizer_->ignore_merges(), out);
  }
  return OkStatus();
}

std::string_view Tokenizer::Piece(TokenId id, bool render_special) const {
  if (!vocab_.Contains(id)) return {};
  if (!render_special && vocab_.type(id) == TokenType::kControl) return {};
  return pieces_[id];
}

bool Tokenizer::PieceHasSpacePrefix(TokenId id) const {
  const bool prefixed = vocab_.kind() == VocabKind::kWordPiece ||
                        (vocab_.kind() == VocabKind::kSentencePiece && vocab_.add_space_prefix());
  return prefixed && vocab_.Contains(id) && vocab_.type(id) == TokenType::kNormal &&
         !pieces_[id].empty() && pieces_[id][0] == ' ';
}

std::string Tokenizer::Decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
  std::string out;
  bool strip = options.strip_space_prefix;
  for (const TokenId id : ids) {
    std::string_view piece = Piece(id, options.render_special);
    if (piece.empty()) continue;
    if (strip && PieceHasSpacePrefix(id)) piece.remove_prefix(1);
    strip = false;
    out.append(piece);
  }
  return out;
}

bool Tokenizer::IsEndOfGeneration(TokenId id) const {
  const std::vector<TokenId>& eog = vocab_.end_of_generation();
  return std::binary_search(eog.begin(), eog.end(), id);
}

std::string_view Tokenizer::model_name() const {
  switch (vocab_.kind()) {
    case VocabKind::kBytePairGpt2:
      return "gpt2";
    case VocabKind::kSentencePiece:
      return "llama";
    case VocabKind::kWordPiece:
      return "bert";
  }
  return "";
}

std::string_view Tokenizer::pre_tokenizer_name() const {
  return pre_tokenizer_ ? std::string_view(pre_tokenizer_->name()) : std::string_view();
}

}  // namespace tokenmill
