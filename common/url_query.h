// The parts of an HTTP request target that handlers read (the gateway's routes, the server's
// admin actions): a path segment and query string values, percent-decoded.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokenmill {

// "%20" -> " " (a model id in a path); a malformed escape stays as it is.
inline std::string PercentDecode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() &&
        std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The key=value pairs of a query string ("a=1&b" -> {a, 1}, {b, ""}), values decoded.
inline std::vector<std::pair<std::string, std::string>> QueryPairs(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> pairs;
  while (!query.empty()) {
    const std::string_view pair = query.substr(0, query.find('&'));
    query.remove_prefix(std::min(query.size(), pair.size() + 1));
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    pairs.emplace_back(PercentDecode(pair.substr(0, eq)),
                       eq == std::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1)));
  }
  return pairs;
}

}  // namespace tokenmill
