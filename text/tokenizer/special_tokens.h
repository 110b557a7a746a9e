// Cuts the input at special-token text before any other tokenization, as llama.cpp's
// tokenizer_st_partition does: special tokens are tried longest first, and each one splits
// every piece of plain text left by the longer ones.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "text/tokenizer/text_range.h"
#include "text/tokenizer/vocab.h"

namespace tokenmill::tokenizer {

struct Fragment {
  size_t offset;  // plain text: the bytes [offset, offset + length) of the input
  size_t length;
  TokenId token;  // a special token, or kNoToken for plain text
};

// Control and unknown tokens are matched only with `parse_special`, and then, when
// `special_ranges` is given, only wholly inside one of those byte ranges (sorted, disjoint);
// user-defined tokens always (as Hugging Face tokenizers does with added tokens).
std::vector<Fragment> SplitOnSpecialTokens(
    std::string_view text, const Vocab& vocab, bool parse_special,
    const std::vector<TextRange>* special_ranges = nullptr);

}  // namespace tokenmill::tokenizer
