#include "grammar/gbnf_parser.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace tokenmill::grammar {
namespace {

// A repetition bound beyond any cap; larger numbers are refused while parsing.
constexpr int64_t kMaxParsedBound = 1'000'000'000;
// Parentheses nest at most this deep (the parser recurses on them).
constexpr int kMaxGroupDepth = 200;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  explicit Parser(std::string_view src) : src_(src) {}

  StatusOr<GbnfGrammar> Parse() {
    GbnfGrammar grammar;
    grammar.source = src_;
    SkipSpace();
    while (!AtEnd()) {
      GbnfRule rule;
      rule.offset = Pos();
      rule.name = ParseName();
      if (rule.name.empty()) return Error("expected a rule name");
      SkipSpace();
      if (src_.substr(pos_, 3) != "::=") {
        return Error("expected '::=' after the rule name '" + rule.name + "'");
      }
      pos_ += 3;
      TM_ASSIGN_OR_RETURN(rule.alternatives, ParseAlternatives(/*nested=*/false));
      if (!AtEnd() && !AtRuleStart()) return Error("unexpected character");
      grammar.rules.push_back(std::move(rule));
    }
    if (grammar.rules.empty()) return InvalidArgumentError("GBNF grammar has no rules");
    return grammar;
  }

 private:
  bool AtEnd() const { return pos_ >= src_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  int32_t Pos() const { return static_cast<int32_t>(pos_); }

  Status Error(const std::string& what) const {
    return InvalidArgumentError("GBNF " + SourceLocation(src_, Pos()) + ": " + what);
  }

  void SkipSpace() {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return std::string(src_.substr(start, pos_ - start));
  }

  // `name ::=` ahead: the current rule's body is over.
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < src_.size() && IsNameChar(src_[p])) ++p;
    if (p == pos_) return false;
    while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t')) ++p;
    return src_.substr(p, 3) == "::=";
  }

  StatusOr<std::vector<std::vector<GbnfItem>>> ParseAlternatives(bool nested) {
    std::vector<std::vector<GbnfItem>> alternatives;
    while (true) {
      TM_ASSIGN_OR_RETURN(std::vector<GbnfItem> sequence, ParseSequence(nested));
      alternatives.push_back(std::move(sequence));
      if (Peek() != '|') break;
      ++pos_;
    }
    return alternatives;
  }

  StatusOr<std::vector<GbnfItem>> ParseSequence(bool nested) {
    std::vector<GbnfItem> items;
    while (true) {
      SkipSpace();
      if (AtEnd() || Peek() == '|' || Peek() == ')' || AtRuleStart()) break;
      TM_ASSIGN_OR_RETURN(GbnfItem item, ParsePrimary());
      TM_RETURN_IF_ERROR(ParseRepetitions(item));
      items.push_back(std::move(item));
    }
    if (Peek() == ')' && !nested) return Error("')' without a matching '('");
    return items;
  }

  StatusOr<GbnfItem> ParsePrimary() {
    GbnfItem item;
    item.offset = Pos();
    const char c = Peek();
    if (c == '"') {
      ++pos_;
      item.kind = GbnfItem::Kind::kLiteral;
      while (true) {
        if (AtEnd()) return Error("unterminated string literal");
        if (Peek() == '"') break;
        TM_ASSIGN_OR_RETURN(uint32_t cp, ParseChar());
        AppendUtf8(cp, item.literal);
      }
      ++pos_;
    } else if (c == '[') {
      ++pos_;
      item.kind = GbnfItem::Kind::kCharClass;
      if (Peek() == '^') {
        item.char_class.negated = true;
        ++pos_;
      }
      while (true) {
        if (AtEnd()) return Error("unterminated character class");
        if (Peek() == ']') break;
        const size_t range_start = pos_;
        TM_ASSIGN_OR_RETURN(uint32_t lo, ParseChar());
        uint32_t hi = lo;
        if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0') {
          ++pos_;
          TM_ASSIGN_OR_RETURN(hi, ParseChar());
          if (hi < lo) {
            pos_ = range_start;
            return Error("character range is out of order");
          }
        }
        item.char_class.ranges.emplace_back(lo, hi);
      }
      ++pos_;
    } else if (c == '.') {
      ++pos_;
      item.kind = GbnfItem::Kind::kCharClass;
      item.char_class.negated = true;
    } else if (c == '(') {
      ++pos_;
      item.kind = GbnfItem::Kind::kGroup;
      if (++group_depth_ > kMaxGroupDepth) {
        return Error("groups nest deeper than " + std::to_string(kMaxGroupDepth));
      }
      TM_ASSIGN_OR_RETURN(item.alternatives, ParseAlternatives(/*nested=*/true));
      --group_depth_;
      if (Peek() != ')') return Error("expected ')'");
      ++pos_;
    } else if (IsNameChar(c)) {
      item.kind = GbnfItem::Kind::kRuleRef;
      item.rule_name = ParseName();
    } else {
      return Error(std::string("unexpected character '") + c + "'");
    }
    return item;
  }

  // One character of a literal or class: a UTF-8 sequence or an escape.
  StatusOr<uint32_t> ParseChar() {
    const unsigned char c = static_cast<unsigned char>(Peek());
    if (c == '\\') {
      ++pos_;
      const char e = Peek();
      ++pos_;
      switch (e) {
        case 'n': return uint32_t{'\n'};
        case 'r': return uint32_t{'\r'};
        case 't': return uint32_t{'\t'};
        case '0': return uint32_t{0};
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
          return static_cast<uint32_t>(e);
        case 'x': return ParseHex(2);
        case 'u': return ParseHex(4);
        case 'U': return ParseHex(8);
        default:
          --pos_;
          return Error(std::string("unknown escape '\\") + e + "'");
      }
    }
    // UTF-8 decoding of the source itself.
    int length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (length == 0 || pos_ + length > src_.size()) return Error("invalid UTF-8 in the grammar");
    uint32_t cp = length == 1 ? c : c & (0x7F >> length);
    for (int i = 1; i < length; ++i) {
      const unsigned char cont = static_cast<unsigned char>(src_[pos_ + i]);
      if ((cont >> 6) != 0x2) return Error("invalid UTF-8 in the grammar");
      cp = (cp << 6) | (cont & 0x3F);
    }
    if (cp > kMaxCodePoint) return Error("invalid UTF-8 in the grammar");  // lead bytes F5-F7
    pos_ += length;
    return cp;
  }

  StatusOr<uint32_t> ParseHex(int digits) {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      const int v = HexValue(Peek());
      if (v < 0) return Error("expected " + std::to_string(digits) + " hex digits");
      value = value * 16 + static_cast<uint32_t>(v);
      ++pos_;
    }
    if (value > kMaxCodePoint) return Error("code point beyond U+10FFFF");
    return value;
  }

  std::optional<int64_t> ParseNumber() {
    if (!(Peek() >= '0' && Peek() <= '9')) return std::nullopt;
    int64_t value = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      value = std::min(kMaxParsedBound, value * 10 + (Peek() - '0'));
      ++pos_;
    }
    return value;
  }

  Status ParseRepetitions(GbnfItem& item) {
    while (true) {
      const char c = Peek();
      int64_t min = 0;
      int64_t max = kUnbounded;
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_;
        min = 1;
      } else if (c == '?') {
        ++pos_;
        max = 1;
      } else if (c == '{') {
        ++pos_;
        SkipSpace();
        const std::optional<int64_t> lo = ParseNumber();
        if (!lo) return Error("expected a number after '{'");
        min = *lo;
        max = *lo;
        SkipSpace();
        if (Peek() == ',') {
          ++pos_;
          SkipSpace();
          const std::optional<int64_t> hi = ParseNumber();
          max = hi ? *hi : kUnbounded;
          SkipSpace();
        }
        if (Peek() != '}') return Error("expected '}'");
        ++pos_;
        if (max != kUnbounded && max < min) return Error("repetition {m,n} with n < m");
      } else {
        return OkStatus();
      }
      // A second repetition applies to the repeated item as a whole.
      if (item.min_repeat != 1 || item.max_repeat != 1) {
        GbnfItem group;
        group.kind = GbnfItem::Kind::kGroup;
        group.offset = item.offset;
        group.alternatives.push_back({std::move(item)});
        item = std::move(group);
      }
      item.min_repeat = min;
      item.max_repeat = max;
    }
  }

  std::string_view src_;
  size_t pos_ = 0;
  int group_depth_ = 0;
};

}  // namespace

StatusOr<GbnfGrammar> ParseGbnf(std::string_view source) { return Parser(source).Parse(); }

std::string SourceLocation(std::string_view source, int32_t offset) {
  int line = 1;
  int col = 1;
  for (int32_t i = 0; i < offset && i < static_cast<int32_t>(source.size()); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ":" + std::to_string(col);
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace tokenmill::grammar
