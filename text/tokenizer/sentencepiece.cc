#include "text/tokenizer/sentencepiece.h"

#include <algorithm>
#include <queue>
#include <string>

#include "text/tokenizer/utf8.h"

namespace tokenmill::tokenizer {
namespace {

struct PieceSymbol {
  uint32_t offset;
  uint32_t length;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct PieceMerge {
  float score;
  int32_t left;
  int32_t right;
  uint32_t length;  // of the merged text, to spot candidates made stale by other merges
  // Best score first, then leftmost (llama.cpp's llm_bigram_spm order).
  bool operator<(const PieceMerge& other) const {
    return score != other.score ? score < other.score : left > other.left;
  }
};

}  // namespace

int SentencePieceModel::ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (const char c : text.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

SentencePieceModel::SentencePieceModel(const Vocab& vocab) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int byte = 0; byte < 256; ++byte) {
    const char name[] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
    TokenId id = vocab.Find(std::string_view(name, sizeof(name)));
    if (id == kNoToken) id = vocab.Find(std::string(1, static_cast<char>(byte)));
    byte_tokens_[byte] = id == kNoToken ? vocab.unknown() : id;
  }
}

void SentencePieceModel::Encode(std::string_view text, const Vocab& vocab,
                                std::vector<TokenId>& out) const {
  if (text.empty()) return;
  std::vector<PieceSymbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t length =
        std::min<size_t>(Utf8LeadLength(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(length), index - 1,
                       offset + length == text.size() ? -1 : index + 1});
    offset += length;
  }

  std::priority_queue<PieceMerge> queue;
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    const TokenId id = vocab.Find(text.substr(symbols[left].offset, length));
    if (id == kNoToken) return;
    queue.push({vocab.score(id), left, right, length});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const PieceMerge candidate = queue.top();
    queue.pop();
    PieceSymbol& left = symbols[candidate.left];
    PieceSymbol& right = symbols[candidate.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != candidate.length) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = candidate.left;
    consider(left.prev, candidate.left);
    consider(candidate.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].offset, symbols[i].length);
    if (const TokenId id = vocab.Find(piece); id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (const char c : piece) {
      const TokenId id = byte_tokens_[static_cast<uint8_t>(c)];
      if (id != kNoToken) out.push_back(id);
    }
  }
}

}  // namespace tokenmill::tokenizer
