#include "common/bearer_token.h"

#include <cctype>

namespace tokenmill {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of `a` is compared whatever the lengths, so timing leaks only the length.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    const char other = b.empty() ? '\0' : b[i % b.size()];
    diff |= static_cast<unsigned char>(a[i] ^ other);
  }
  return diff == 0;
}

bool BearerTokenMatches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  }
  return ConstantTimeEquals(authorization.substr(kScheme.size()), key);
}

}  // namespace tokenmill
