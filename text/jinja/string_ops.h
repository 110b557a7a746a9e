// Python's str methods and Jinja's string filters over UTF-8 text. Case mapping covers ASCII
// only; other characters keep their case.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace tokenmill::jinja {

std::string Upper(const std::string& s);
std::string Lower(const std::string& s);
// str.capitalize(): first character upper, the rest lower.
std::string Capitalize(const std::string& s);
// str.strip/lstrip/rstrip: whitespace, or any of `chars`.
std::string Strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                  bool right);
// The code points [first, second) of `text` that Strip keeps.
std::pair<size_t, size_t> StripRange(const std::u32string& text,
                                     const std::optional<std::string>& chars, bool left,
                                     bool right);
// str.split(sep, maxsplit); no `sep`: runs of whitespace. Throws on an empty separator.
Json Split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.replace(old, new, count); count < 0: all.
std::string Replace(const std::string& s, const std::string& old, const std::string& with,
                    int64_t count);
// str.startswith/endswith with a str or a tuple (list) of str.
bool MatchesAffix(const std::string& s, const Value& affix, bool prefix);
// str.title() and Jinja's `title` filter, which split words differently.
std::string PyTitle(const std::string& s);
std::string JinjaTitle(const std::string& s);
// Jinja's `escape`: & < > " ' as HTML entities.
std::string HtmlEscape(const std::string& s);
// str.splitlines() for \n, \r and \r\n.
std::vector<std::string> SplitLines(const std::string& s);

}  // namespace tokenmill::jinja
