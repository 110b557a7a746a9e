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

std::optional<std::string_view> BearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) {
      return std::nullopt;
    }
  }
  return authorization.substr(kScheme.size());
}

bool BearerTokenMatches(std::string_view authorization, std::string_view key) {
  const std::optional<std::string_view> token = BearerToken(authorization);
  return token && ConstantTimeEquals(*token, key);
}

}  // namespace tokenmill
