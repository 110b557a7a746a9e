// The model's tokens as the grammar engine sees them: byte strings, plus the end-of-sequence
// tokens. The engine builds one per model from its tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tokenmill::grammar {

struct Vocabulary {
  // token_bytes[t]: the bytes token t decodes to. Special and control tokens are empty
  // strings: a grammar never allows them (EOS tokens are allowed where the grammar can end).
  std::vector<std::string> token_bytes;
  std::vector<int32_t> eos_tokens;
};

// 32-bit words of a token bitmask over `vocab_size` tokens: ceil(vocab_size / 32).
inline size_t BitmaskWords(size_t vocab_size) { return (vocab_size + 31) / 32; }

// Sets row[t] to -infinity for every token t the bitmask (over vocab_size tokens) does not
// allow, and for every id past vocab_size (padding rows of an output matrix). A word at a
// time: a mask is mostly whole words allowed or refused.
void MaskLogits(std::span<const uint32_t> bitmask, size_t vocab_size, std::span<float> row);

// The vocabulary as a byte trie in depth-first order (built once per model, shared by every
// grammar compiled for it): walking it visits every token once, and a prefix no grammar state
// accepts skips its whole subtree.
class VocabularyIndex {
 public:
  // Token ids must be dense (0..n-1); eos_tokens must lie in range (a programmer error).
  static std::shared_ptr<const VocabularyIndex> Build(Vocabulary vocab);

  size_t size() const { return vocab_.token_bytes.size(); }
  const Vocabulary& vocabulary() const { return vocab_; }
  const std::string& token(int32_t id) const { return vocab_.token_bytes[id]; }
  bool is_eos(int32_t id) const { return is_eos_[id]; }

  // The trie in preorder. Node 0 is the root (the empty prefix); node i's byte is the last
  // byte of its prefix, its subtree is nodes i..subtree_end(i)-1, and token_at(i) is the token
  // whose bytes are exactly that prefix (-1 if none).
  size_t trie_size() const { return byte_.size(); }
  uint8_t trie_byte(size_t node) const { return byte_[node]; }
  uint32_t trie_depth(size_t node) const { return depth_[node]; }
  uint32_t subtree_end(size_t node) const { return subtree_end_[node]; }
  int32_t token_at(size_t node) const { return token_at_[node]; }
  // Tokens whose bytes equal an earlier token's (dup, first): the trie holds the first, and
  // a mask copies its bit.
  const std::vector<std::pair<int32_t, int32_t>>& duplicates() const { return duplicates_; }
  // Non-empty tokens (the only ones a grammar state can allow), as a bitmask.
  const std::vector<uint32_t>& nonempty_mask() const { return nonempty_mask_; }

 private:
  explicit VocabularyIndex(Vocabulary vocab);

  Vocabulary vocab_;
  std::vector<bool> is_eos_;
  std::vector<uint8_t> byte_;
  std::vector<uint32_t> depth_;
  std::vector<uint32_t> subtree_end_;
  std::vector<int32_t> token_at_;
  std::vector<std::pair<int32_t, int32_t>> duplicates_;
  std::vector<uint32_t> nonempty_mask_;
};

}  // namespace tokenmill::grammar
