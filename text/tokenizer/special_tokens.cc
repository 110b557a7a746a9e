#include "text/tokenizer/special_tokens.h"

#include <algorithm>
#include <cctype>

namespace tokenmill::tokenizer {
namespace {

// Whether bytes [begin, end) lie wholly inside one of `ranges` (sorted, disjoint).
bool InsideOne(const std::vector<TextRange>& ranges, size_t begin, size_t end) {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                                   [](size_t at, const TextRange& r) { return at < r.end; });
  return it != ranges.end() && it->begin <= begin && end <= it->end;
}

}  // namespace

std::vector<Fragment> SplitOnSpecialTokens(std::string_view text, const Vocab& vocab,
                                           bool parse_special,
                                           const std::vector<TextRange>* special_ranges) {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({0, text.size(), kNoToken});
  std::vector<Fragment> next;
  for (const TokenId special : vocab.special_tokens()) {
    const TokenType type = vocab.type(special);
    const bool needs_parse_special = type == TokenType::kControl || type == TokenType::kUnknown;
    if (!parse_special && needs_parse_special) continue;
    const std::vector<TextRange>* allowed = needs_parse_special ? special_ranges : nullptr;
    const std::string_view needle = vocab.text(special);
    next.clear();
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        next.push_back(fragment);
        continue;
      }
      const std::string_view plain = text.substr(fragment.offset, fragment.length);
      size_t start = 0;   // the plain text not yet passed on begins here
      size_t search = 0;  // the next match is looked for from here
      for (size_t match = plain.find(needle); match != std::string_view::npos;
           match = plain.find(needle, search)) {
        const size_t at = fragment.offset + match;
        if (allowed != nullptr && !InsideOne(*allowed, at, at + needle.size())) {
          search = match + 1;  // not the markup's: it stays text
          continue;
        }
        if (match > start) next.push_back({fragment.offset + start, match - start, kNoToken});
        next.push_back({0, 0, special});
        start = match + needle.size();
        if (vocab.rstrip(special)) {
          while (start < plain.size() && std::isspace(static_cast<unsigned char>(plain[start]))) {
            ++start;
          }
        }
        search = start;
      }
      if (start < plain.size()) {
        next.push_back({fragment.offset + start, plain.size() - start, kNoToken});
      }
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace tokenmill::tokenizer
