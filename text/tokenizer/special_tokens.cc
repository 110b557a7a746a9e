#include "text/tokenizer/special_tokens.h"

#include <cctype>

namespace tokenmill::tokenizer {

std::vector<Fragment> SplitOnSpecialTokens(std::string_view text, const Vocab& vocab,
                                           bool parse_special) {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({0, text.size(), kNoToken});
  std::vector<Fragment> next;
  for (const TokenId special : vocab.special_tokens()) {
    const TokenType type = vocab.type(special);
    if (!parse_special && (type == TokenType::kControl || type == TokenType::kUnknown)) continue;
    const std::string_view needle = vocab.text(special);
    next.clear();
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        next.push_back(fragment);
        continue;
      }
      const std::string_view plain = text.substr(fragment.offset, fragment.length);
      size_t start = 0;
      for (size_t match = plain.find(needle); match != std::string_view::npos;
           match = plain.find(needle, start)) {
        if (match > start) next.push_back({fragment.offset + start, match - start, kNoToken});
        next.push_back({0, 0, special});
        start = match + needle.size();
        if (vocab.rstrip(special)) {
          while (start < plain.size() && std::isspace(static_cast<unsigned char>(plain[start]))) {
            ++start;
          }
        }
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
