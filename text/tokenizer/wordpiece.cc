#include "text/tokenizer/wordpiece.h"

#include <algorithm>
#include <functional>
#include <set>

#include "text/tokenizer/unicode_data.h"
#include "text/tokenizer/utf8.h"

namespace tokenmill::tokenizer {
namespace {

constexpr std::string_view kWordStart = "\xE2\x96\x81";  // "▁"

// BERT's _is_chinese_char ranges, with llama.cpp's 0x2B920 (not 0x2B820) as in HF's Rust code.
bool IsCjkIdeograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

StatusOr<WordPieceModel> WordPieceModel::FromGguf(const GgufFile& file, const Vocab& vocab) {
  WordPieceModel model;
  if (file.Has("tokenizer.ggml.normalizer.lowercase")) {
    TM_ASSIGN_OR_RETURN(model.lowercase_, file.GetBool("tokenizer.ggml.normalizer.lowercase"));
  }
  model.strip_accents_ = model.lowercase_;
  if (file.Has("tokenizer.ggml.normalizer.strip_accents")) {
    TM_ASSIGN_OR_RETURN(model.strip_accents_,
                        file.GetBool("tokenizer.ggml.normalizer.strip_accents"));
  }
  std::set<size_t, std::greater<>> lengths;
  for (TokenId id = 0; id < vocab.size(); ++id) {
    if (!vocab.text(id).empty()) lengths.insert(vocab.text(id).size());
  }
  model.token_lengths_.assign(lengths.begin(), lengths.end());
  return model;
}

void WordPieceModel::Encode(std::string_view text, const Vocab& vocab,
                            std::vector<TokenId>& out) const {
  // One word at a time, normalized into `word` after its "▁".
  std::string word(kWordStart);
  const auto finish_word = [&] {
    if (word.size() > kWordStart.size()) EncodeWord(word, vocab, out);
    word.resize(kWordStart.size());
  };
  for (size_t pos = 0; pos < text.size();) {
    const DecodedCodepoint decoded = DecodeUtf8At(text, pos);
    pos += decoded.length;
    uint32_t cp = strip_accents_ ? FirstOfDecomposition(decoded.codepoint) : decoded.codepoint;
    if (IsUnicodeWhitespace(cp)) {
      finish_word();
      continue;
    }
    const CategoryGroup group = CategoryOf(cp);
    if (cp == 0 || cp == 0xFFFD || group == CategoryGroup::kControl) continue;
    if (strip_accents_ && group == CategoryGroup::kMark) continue;
    const bool alone = group == CategoryGroup::kPunctuation ||
                       (cp < 0x7F && group == CategoryGroup::kSymbol) || IsCjkIdeograph(cp);
    if (lowercase_) cp = SimpleLowercase(cp);
    if (alone) finish_word();
    AppendUtf8(cp, word);
    if (alone) finish_word();
  }
  finish_word();
}

void WordPieceModel::EncodeWord(std::string_view word, const Vocab& vocab,
                                std::vector<TokenId>& out) const {
  const size_t first = out.size();
  for (size_t pos = 0; pos < word.size();) {
    TokenId id = kNoToken;
    size_t length = 0;
    for (const size_t candidate : token_lengths_) {
      if (candidate > word.size() - pos) continue;
      id = vocab.Find(word.substr(pos, candidate));
      if (id != kNoToken) {
        length = candidate;
        break;
      }
    }
    if (id == kNoToken) {
      // No token starts here: the whole word is unknown (dropped if the vocabulary has no
      // unknown token).
      out.resize(first);
      if (vocab.unknown() != kNoToken) out.push_back(vocab.unknown());
      return;
    }
    out.push_back(id);
    pos += length;
  }
}

}  // namespace tokenmill::tokenizer
