#include "text/tokenizer/bpe.h"

#include <functional>
#include <queue>
#include <string>

#include "text/tokenizer/utf8.h"

namespace tokenmill::tokenizer {
namespace {

struct Symbol {
  uint32_t offset;  // into the word
  uint32_t length;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
  TokenId id;  // kNoToken when the text is not a token (it then never merges)
};

struct Candidate {
  int32_t rank;
  int32_t left;  // symbol index; the right one is symbols[left].next when still current
  TokenId left_id;
  TokenId right_id;
  // Lowest rank first, then leftmost (llama.cpp's llm_bigram_bpe order).
  bool operator>(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : left > other.left;
  }
};

}  // namespace

StatusOr<BytePairModel> BytePairModel::FromGguf(const GgufFile& file, const Vocab& vocab) {
  TM_ASSIGN_OR_RETURN(const std::vector<std::string_view> merges,
                      file.GetStringArray("tokenizer.ggml.merges"));
  BytePairModel model;
  model.merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view merge = merges[rank];
    // The separator is the first space after the first character (a part may start with one).
    const size_t space = merge.find(' ', 1);
    if (space == std::string_view::npos) {
      return InvalidArgumentError("tokenizer.ggml.merges[" + std::to_string(rank) + "] '" +
                                  std::string(merge) + "' is not two parts separated by a space");
    }
    const std::string_view left = merge.substr(0, space), right = merge.substr(space + 1);
    joined.assign(left).append(right);
    const TokenId left_id = vocab.Find(left), right_id = vocab.Find(right);
    const TokenId result = vocab.Find(joined);
    // A merge whose parts or result are not tokens can never produce a token; skip it.
    if (left_id == kNoToken || right_id == kNoToken || result == kNoToken) continue;
    // The first (best) rank of a repeated pair wins, as in llama.cpp.
    model.merges_.emplace(Key(left_id, right_id), Merge{static_cast<int32_t>(rank), result});
  }
  return model;
}

const BytePairModel::Merge* BytePairModel::FindMerge(TokenId left, TokenId right) const {
  const auto it = merges_.find(Key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BytePairModel::EncodeWord(std::string_view word, const Vocab& vocab, bool ignore_merges,
                               std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (const TokenId id = vocab.Find(word); id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t offset = 0; offset < word.size();) {
    const size_t length =
        std::min<size_t>(Utf8LeadLength(static_cast<uint8_t>(word[offset])), word.size() - offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(length), index - 1,
                       offset + length == word.size() ? -1 : index + 1,
                       vocab.Find(word.substr(offset, length))});
    offset += length;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const TokenId left_id = symbols[left].id, right_id = symbols[right].id;
    if (left_id == kNoToken || right_id == kNoToken) return;
    if (const Merge* merge = FindMerge(left_id, right_id)) {
      queue.push({merge->rank, left, left_id, right_id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate candidate = queue.top();
    queue.pop();
    Symbol& left = symbols[candidate.left];
    if (left.length == 0 || left.id != candidate.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != candidate.right_id) continue;  // stale: a neighbour merged meanwhile
    left.length += right.length;
    left.id = FindMerge(candidate.left_id, candidate.right_id)->result;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = candidate.left;
    consider(left.prev);
    consider(candidate.left);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& symbol = symbols[i];
    if (symbol.id != kNoToken) {
      out.push_back(symbol.id);
      continue;
    }
    // Not a token (a vocabulary without the full byte alphabet): single-byte tokens where they
    // exist, as llama.cpp does.
    for (uint32_t j = 0; j < symbol.length; ++j) {
      const TokenId id = vocab.Find(word.substr(symbol.offset + j, 1));
      if (id != kNoToken) out.push_back(id);
    }
  }
}

}  // namespace tokenmill::tokenizer
