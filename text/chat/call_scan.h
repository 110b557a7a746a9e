// Small scanners the tool-call parsers share (tool_call_parser.cc, section_tool_calls.cc):
// each looks at the start of text that may still be arriving.
#pragma once

#include <cctype>
#include <string_view>

namespace tokenmill::call_scan {

// Outcome of matching a prefix of the text against a pattern that may still be arriving.
enum class Match { kYes, kNeedMore, kNo };

inline constexpr std::string_view kWhitespace = " \t\r\n";
inline constexpr std::string_view kFence = "```";

inline size_t SkipSpace(std::string_view text) {
  const size_t at = text.find_first_not_of(kWhitespace);
  return at == std::string_view::npos ? text.size() : at;
}

inline bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

// A Markdown fence's opening line at text[0] that may hold JSON: ``` or ```json, then the line
// break (`size`: up to after it).
inline Match ScanJsonFence(std::string_view text, size_t& size) {
  constexpr size_t kLongest = 16;  // ```json and some spaces: anything longer is another fence
  if (text.size() < kFence.size()) return kFence.starts_with(text) ? Match::kNeedMore : Match::kNo;
  if (!text.starts_with(kFence)) return Match::kNo;
  const size_t end = text.find('\n');
  if (end == std::string_view::npos) return text.size() < kLongest ? Match::kNeedMore : Match::kNo;
  std::string_view info = text.substr(kFence.size(), end - kFence.size());
  info = info.substr(0, info.find_last_not_of(" \t\r") + 1);
  if (!info.empty() && info != "json" && info != "JSON") return Match::kNo;
  size = end + 1;
  return Match::kYes;
}

}  // namespace tokenmill::call_scan
