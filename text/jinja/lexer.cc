#include "text/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <optional>

#include "text/jinja/python_ops.h"

namespace tokenmill::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// "\r\n" and "\r" become "\n"; one trailing newline goes unless kept.
std::string NormalizeNewlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : src_(std::move(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> Run() {
    size_t pos = 0;
    bool line_starting = true;  // the previous tag's end consumed a newline (or start of file)
    while (pos < src_.size()) {
      const size_t start = FindTagStart(pos);
      std::string text = src_.substr(pos, start - pos);
      if (start == src_.size()) {
        Emit(TokenKind::kText, std::move(text), pos);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      size_t cursor = start + 2;
      const char sign = cursor < src_.size() ? src_[cursor] : '\0';
      if (kind == '{') {
        if (sign == '-') StripTrailingSpace(text);
      } else {
        StripBeforeBlockTag(text, sign, line_starting);
      }
      Emit(TokenKind::kText, std::move(text), pos);
      if (sign == '-' || sign == '+') ++cursor;
      if (kind == '#') {
        pos = SkipComment(start, cursor);
      } else if (const std::optional<TagEnd> raw = MatchTag(cursor, "raw");
                 kind == '%' && raw && raw->sign != '+') {
        pos = LexRaw(start, *raw);
      } else {
        pos = LexTag(start, cursor, kind == '{');
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{TokenKind::kEnd, "", PosAt(src_.size())});
    return std::move(tokens_);
  }

 private:
  static void StripTrailingSpace(std::string& text) {
    text.erase(std::find_if(text.rbegin(), text.rend(), [](char c) { return !IsSpace(c); }).base(),
               text.end());
  }

  // Text before a block or comment tag: `-` strips all trailing whitespace; lstrip_blocks the
  // blanks between the last line start and the tag.
  void StripBeforeBlockTag(std::string& text, char sign, bool line_starting) const {
    if (sign == '-') {
      StripTrailingSpace(text);
    } else if (sign != '+' && options_.lstrip_blocks) {
      const size_t newline = text.rfind('\n');
      const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
      const bool only_blanks = std::all_of(text.begin() + line_start, text.end(), IsSpace);
      if ((line_start > 0 || line_starting) && only_blanks) text.erase(line_start);
    }
  }

  SourcePos PosAt(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_start = *(it - 1);
    const size_t column =
        CodepointCount(std::string_view(src_).substr(line_start, offset - line_start));
    return {static_cast<int>(it - line_starts_.begin()), static_cast<int>(column) + 1};
  }

  [[noreturn]] void Fail(const std::string& message, size_t offset) const {
    throw TemplateError(message, PosAt(offset));
  }

  void Emit(TokenKind kind, std::string text, size_t offset) {
    if (kind == TokenKind::kText && text.empty()) return;
    tokens_.push_back(Token{kind, std::move(text), PosAt(offset)});
  }

  size_t FindTagStart(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  // After a block or comment end: `-` eats all whitespace, trim_blocks one newline.
  size_t AfterBlockEnd(size_t end, bool minus, bool plus) const {
    if (minus) {
      while (end < src_.size() && IsSpace(src_[end])) ++end;
    } else if (!plus && options_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  // Where a tag that holds only `word` ends: {% word %}, {%- word -%}, ...
  struct TagEnd {
    size_t end;  // after "%}"
    char sign;   // '-', '+' or '\0' before "%}"
  };
  std::optional<TagEnd> MatchTag(size_t at, std::string_view word) const {
    while (at < src_.size() && IsSpace(src_[at])) ++at;
    if (std::string_view(src_).substr(at, word.size()) != word) return std::nullopt;
    at += word.size();
    if (at < src_.size() && IsNameChar(src_[at])) return std::nullopt;
    while (at < src_.size() && IsSpace(src_[at])) ++at;
    char sign = '\0';
    if (at < src_.size() && (src_[at] == '-' || src_[at] == '+')) sign = src_[at++];
    if (std::string_view(src_).substr(at, 2) != "%}") return std::nullopt;
    return TagEnd{at + 2, sign};
  }

  // {% raw %}...{% endraw %}: the text between is literal. As in Jinja, `-%}` after raw eats
  // whitespace but trim_blocks does not apply there; the endraw tag strips like any block tag.
  size_t LexRaw(size_t start, TagEnd raw) {
    size_t content_start = raw.end;
    if (raw.sign == '-') {
      while (content_start < src_.size() && IsSpace(src_[content_start])) ++content_start;
    }
    const bool line_starting = content_start > 0 && src_[content_start - 1] == '\n';
    for (size_t at = src_.find("{%", content_start); at != std::string::npos;
         at = src_.find("{%", at + 2)) {
      const char sign = at + 2 < src_.size() ? src_[at + 2] : '\0';
      const size_t name_at = at + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      const std::optional<TagEnd> end = MatchTag(name_at, "endraw");
      if (!end) continue;
      std::string text = src_.substr(content_start, at - content_start);
      StripBeforeBlockTag(text, sign, line_starting);
      Emit(TokenKind::kText, std::move(text), content_start);
      return AfterBlockEnd(end->end, end->sign == '-', end->sign == '+');
    }
    Fail("unclosed raw block: missing '{% endraw %}'", start);
  }

  size_t SkipComment(size_t start, size_t cursor) {
    const size_t close = src_.find("#}", cursor);
    if (close == std::string::npos) Fail("unclosed comment: missing '#}'", start);
    const bool minus = close > cursor && src_[close - 1] == '-';
    const bool plus = close > cursor && src_[close - 1] == '+';
    return AfterBlockEnd(close + 2, minus, plus);
  }

  // Lexes the inside of {{ ... }} or {% ... %}; returns the offset after its end.
  size_t LexTag(size_t start, size_t cursor, bool is_var) {
    Emit(is_var ? TokenKind::kVarBegin : TokenKind::kBlockBegin, is_var ? "{{" : "{%", start);
    int depth = 0;  // open brackets: a `}` inside them is not the end of the tag
    size_t i = cursor;
    while (true) {
      while (i < src_.size() && IsSpace(src_[i])) ++i;
      if (i >= src_.size()) {
        Fail(is_var ? "unclosed expression: missing '}}'" : "unclosed tag: missing '%}'", start);
      }
      const std::string_view rest = std::string_view(src_).substr(i);
      if (depth == 0) {
        if (is_var && (rest.starts_with("}}") || rest.starts_with("-}}"))) {
          const bool minus = rest[0] == '-';
          Emit(TokenKind::kVarEnd, "}}", i);
          size_t end = i + (minus ? 3 : 2);
          if (minus)
            while (end < src_.size() && IsSpace(src_[end])) ++end;
          return end;
        }
        if (!is_var &&
            (rest.starts_with("%}") || rest.starts_with("-%}") || rest.starts_with("+%}"))) {
          const bool minus = rest[0] == '-', plus = rest[0] == '+';
          Emit(TokenKind::kBlockEnd, "%}", i);
          return AfterBlockEnd(i + (minus || plus ? 3 : 2), minus, plus);
        }
      }
      i = LexExpressionToken(i, depth);
    }
  }

  size_t LexExpressionToken(size_t i, int& depth) {
    const char c = src_[i];
    if (IsNameStart(c)) {
      size_t j = i;
      while (j < src_.size() && IsNameChar(src_[j])) ++j;
      Emit(TokenKind::kName, src_.substr(i, j - i), i);
      return j;
    }
    if (IsDigit(c)) return LexNumber(i);
    if (c == '\'' || c == '"') return LexString(i);
    static constexpr std::string_view kTwoChar[] = {"**", "//", "==", "!=", ">=", "<="};
    for (const std::string_view op : kTwoChar) {
      if (std::string_view(src_).substr(i, 2) == op) {
        Emit(TokenKind::kOperator, std::string(op), i);
        return i + 2;
      }
    }
    static constexpr std::string_view kOneChar = "+-*/%~<>()[]{},.:|=";
    if (kOneChar.find(c) == std::string_view::npos) {
      Fail(std::string("unexpected character '") + c + "' in expression", i);
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') {
      if (depth == 0) Fail(std::string("unexpected '") + c + "'", i);
      --depth;
    }
    Emit(TokenKind::kOperator, std::string(1, c), i);
    return i + 1;
  }

  size_t LexNumber(size_t i) {
    auto digits = [&](size_t j) {
      while (j < src_.size() && (IsDigit(src_[j]) ||
                                 (src_[j] == '_' && j + 1 < src_.size() && IsDigit(src_[j + 1])))) {
        ++j;
      }
      return j;
    };
    size_t j = digits(i);
    bool is_float = false;
    if (j + 1 < src_.size() && src_[j] == '.' && IsDigit(src_[j + 1])) {
      is_float = true;
      j = digits(j + 1);
    }
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && IsDigit(src_[k])) {
        is_float = true;
        j = digits(k);
      }
    }
    std::string text;
    for (size_t k = i; k < j; ++k) {
      if (src_[k] != '_') text.push_back(src_[k]);
    }
    Token token{is_float ? TokenKind::kFloat : TokenKind::kInteger, text, PosAt(i)};
    if (is_float) {
      token.number = std::strtod(text.c_str(), nullptr);
    } else {
      const auto result = std::from_chars(text.data(), text.data() + text.size(), token.integer);
      if (result.ec != std::errc()) Fail("integer literal " + text + " is too large", i);
    }
    tokens_.push_back(std::move(token));
    return j;
  }

  // Python string escapes, as Jinja decodes them ("unicode-escape").
  size_t LexString(size_t i) {
    const char quote = src_[i];
    std::u32string value;
    size_t j = i + 1;
    auto hex = [&](size_t at, int n) -> char32_t {
      if (at + n > src_.size()) Fail("truncated escape in string literal", at);
      char32_t v = 0;
      for (int k = 0; k < n; ++k) {
        const char h = src_[at + k];
        if (!std::isxdigit(static_cast<unsigned char>(h))) Fail("bad escape in string literal", at);
        v = v * 16 +
            static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h))
                                      ? h - '0'
                                      : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
      }
      return v;
    };
    while (true) {
      if (j >= src_.size()) Fail("unterminated string literal", i);
      const char c = src_[j];
      if (c == quote) break;
      if (c != '\\') {
        const size_t start = j;
        while (j < src_.size() && src_[j] != quote && src_[j] != '\\') ++j;
        value += DecodeUtf8(std::string_view(src_).substr(start, j - start));
        continue;
      }
      if (j + 1 >= src_.size()) Fail("unterminated string literal", i);
      const char e = src_[j + 1];
      j += 2;
      switch (e) {
        case 'n':
          value.push_back('\n');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case '\\':
          value.push_back('\\');
          break;
        case '\'':
          value.push_back('\'');
          break;
        case '"':
          value.push_back('"');
          break;
        case '\n':
          break;  // line continuation
        case 'x':
          value.push_back(hex(j, 2));
          j += 2;
          break;
        case 'u':
          value.push_back(hex(j, 4));
          j += 4;
          break;
        case 'U':
          value.push_back(hex(j, 8));
          j += 8;
          break;
        default:
          if (e >= '0' && e <= '7') {  // up to three octal digits
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && j < src_.size() && src_[j] >= '0' && src_[j] <= '7';
                 ++k, ++j) {
              v = v * 8 + static_cast<char32_t>(src_[j] - '0');
            }
            value.push_back(v);
          } else {  // unknown escapes stay as written
            value.push_back('\\');
            j -= 1;
          }
      }
    }
    Emit(TokenKind::kString, EncodeUtf8(value), i);
    return j + 1;
  }

  std::string src_;
  LexerOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(NormalizeNewlines(source, options.keep_trailing_newline), options).Run();
}

}  // namespace tokenmill::jinja
