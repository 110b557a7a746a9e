#include "grammar/vocabulary.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "common/check.h"

namespace tokenmill::grammar {

void MaskLogits(std::span<const uint32_t> bitmask, size_t vocab_size, std::span<float> row) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(vocab_size, row.size());
  for (size_t base = 0; base < n; base += 32) {
    const uint32_t word = bitmask[base / 32];
    const size_t end = std::min(n, base + 32);
    if (word == ~uint32_t{0}) continue;
    if (word == 0) {
      std::fill(row.begin() + static_cast<std::ptrdiff_t>(base),
                row.begin() + static_cast<std::ptrdiff_t>(end), kMasked);
      continue;
    }
    for (size_t t = base; t < end; ++t) {
      if (((word >> (t - base)) & 1u) == 0) row[t] = kMasked;
    }
  }
  if (row.size() > n) std::fill(row.begin() + static_cast<std::ptrdiff_t>(n), row.end(), kMasked);
}

std::shared_ptr<const VocabularyIndex> VocabularyIndex::Build(Vocabulary vocab) {
  return std::shared_ptr<const VocabularyIndex>(new VocabularyIndex(std::move(vocab)));
}

VocabularyIndex::VocabularyIndex(Vocabulary vocab) : vocab_(std::move(vocab)) {
  const size_t n = vocab_.token_bytes.size();
  is_eos_.assign(n, false);
  for (const int32_t eos : vocab_.eos_tokens) {
    TM_CHECK(eos >= 0 && static_cast<size_t>(eos) < n) << "EOS token " << eos << " of " << n;
    is_eos_[eos] = true;
  }
  nonempty_mask_.assign(BitmaskWords(n), 0);
  std::vector<int32_t> order;
  for (size_t t = 0; t < n; ++t) {
    if (vocab_.token_bytes[t].empty()) continue;
    order.push_back(static_cast<int32_t>(t));
    nonempty_mask_[t / 32] |= uint32_t{1} << (t % 32);
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return vocab_.token_bytes[a] < vocab_.token_bytes[b];
  });

  // Preorder: a token's nodes follow its longest common prefix with the previous token.
  byte_.push_back(0);
  depth_.push_back(0);
  subtree_end_.push_back(0);
  token_at_.push_back(-1);
  std::vector<uint32_t> path{0};  // path[d]: the node at depth d of the current prefix
  const std::string* previous = nullptr;
  for (const int32_t t : order) {
    const std::string& bytes = vocab_.token_bytes[t];
    if (previous != nullptr && *previous == bytes) {
      duplicates_.emplace_back(t, token_at_[path.back()]);
      continue;
    }
    size_t common = 0;
    if (previous != nullptr) {
      const size_t limit = std::min(previous->size(), bytes.size());
      while (common < limit && (*previous)[common] == bytes[common]) ++common;
    }
    while (path.size() > common + 1) {
      subtree_end_[path.back()] = static_cast<uint32_t>(byte_.size());
      path.pop_back();
    }
    for (size_t d = common; d < bytes.size(); ++d) {
      path.push_back(static_cast<uint32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(bytes[d]));
      depth_.push_back(static_cast<uint32_t>(d + 1));
      subtree_end_.push_back(0);
      token_at_.push_back(-1);
    }
    token_at_[path.back()] = t;
    previous = &bytes;
  }
  while (!path.empty()) {
    subtree_end_[path.back()] = static_cast<uint32_t>(byte_.size());
    path.pop_back();
  }
}

}  // namespace tokenmill::grammar
