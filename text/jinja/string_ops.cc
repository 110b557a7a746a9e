#include "text/jinja/string_ops.h"

#include <algorithm>
#include <cctype>

#include "text/jinja/python_ops.h"

namespace tokenmill::jinja {
namespace {

std::string AsciiMap(std::string s, int (*f)(int)) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x80)
      c = static_cast<char>(f(static_cast<unsigned char>(c)));
  }
  return s;
}

}  // namespace

std::string Upper(const std::string& s) {
  return AsciiMap(s, [](int c) { return std::toupper(c); });
}
std::string Lower(const std::string& s) {
  return AsciiMap(s, [](int c) { return std::tolower(c); });
}

std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out = Upper(out.substr(0, 1)) + out.substr(1);
  return out;
}

// Python's str.strip/lstrip/rstrip: whitespace, or any of `chars`.
std::pair<size_t, size_t> StripRange(const std::u32string& text,
                                     const std::optional<std::string>& chars, bool left,
                                     bool right) {
  const std::u32string set = chars ? DecodeUtf8(*chars) : U"";
  auto strip = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : IsPyWhitespace(c);
  };
  size_t begin = 0, end = text.size();
  if (left)
    while (begin < end && strip(text[begin])) ++begin;
  if (right)
    while (end > begin && strip(text[end - 1])) --end;
  return {begin, end};
}

std::string Strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  const std::u32string text = DecodeUtf8(s);
  const auto [begin, end] = StripRange(text, chars, left, right);
  return EncodeUtf8(std::u32string_view(text).substr(begin, end - begin));
}

Json Split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  Json out = Json::array();
  if (!sep) {  // runs of whitespace, no empty strings
    const std::u32string text = DecodeUtf8(s);
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && IsPyWhitespace(text[i])) ++i;
      if (i == text.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t end = text.size();
        while (end > i && IsPyWhitespace(text[end - 1])) --end;
        out.push_back(EncodeUtf8(std::u32string_view(text).substr(i, end - i)));
        break;
      }
      size_t j = i;
      while (j < text.size() && !IsPyWhitespace(text[j])) ++j;
      out.push_back(EncodeUtf8(std::u32string_view(text).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  if (sep->empty()) throw TemplateError("empty separator");
  size_t start = 0;
  while (true) {
    const size_t found = s.find(*sep, start);
    if (found == std::string::npos ||
        (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, found - start));
    start = found + sep->size();
  }
}

std::string Replace(const std::string& s, const std::string& old, const std::string& with,
                    int64_t count) {
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  if (old.empty()) {  // Python inserts `with` around every character
    const std::u32string text = DecodeUtf8(s);
    for (size_t i = 0; i <= text.size(); ++i) {
      if (count < 0 || done < count) {
        out += with;
        CheckStringSize(out.size());
        ++done;
      }
      if (i < text.size()) out += EncodeUtf8(std::u32string(1, text[i]));
    }
    return out;
  }
  while (count < 0 || done < count) {
    const size_t found = s.find(old, start);
    if (found == std::string::npos) break;
    out += s.substr(start, found - start) + with;
    CheckStringSize(out.size());
    start = found + old.size();
    ++done;
  }
  return out + s.substr(start);
}

bool MatchesAffix(const std::string& s, const Value& affix, bool prefix) {
  std::vector<std::string> options;
  if (affix.is_list()) {
    for (const Json& item : affix.data()) {
      if (!item.is_string()) throw TemplateError("startswith/endswith: tuple items must be str");
      options.push_back(item.get<std::string>());
    }
  } else if (affix.is_string()) {
    options.push_back(affix.str());
  } else {
    throw TemplateError("startswith/endswith first arg must be str or a tuple of str, not " +
                        affix.TypeName());
  }
  for (const std::string& o : options) {
    if (prefix ? s.starts_with(o) : s.ends_with(o)) return true;
  }
  return false;
}

// Python's str.title(): a cased letter after an uncased one is upper case.
std::string PyTitle(const std::string& s) {
  std::string out = s;
  bool previous_cased = false;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    if (alpha) c = static_cast<char>(previous_cased ? std::tolower(c) : std::toupper(c));
    previous_cased = alpha;
  }
  return out;
}

// Jinja's `title` filter: words begin after '-', whitespace and opening brackets.
std::string JinjaTitle(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (const char c : s) {
    const bool boundary = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                          std::isspace(static_cast<unsigned char>(c));
    if (boundary) {
      out.push_back(c);
      word_start = true;
    } else {
      out.push_back(static_cast<char>(word_start ? std::toupper(static_cast<unsigned char>(c))
                                                 : std::tolower(static_cast<unsigned char>(c))));
      word_start = false;
    }
  }
  return out;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

}  // namespace tokenmill::jinja
