#include "grammar/regex.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "grammar/gbnf_parser.h"
#include "grammar/gbnf_writer.h"

namespace tokenmill::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};
// Groups nest at most this deep (the converter recurses on them).
constexpr int kMaxGroupDepth = 200;

class RegexConverter {
 public:
  RegexConverter(std::string_view regex, bool json_string, const GrammarLimits& limits)
      : re_(regex), json_(json_string), limits_(limits) {}

  StatusOr<std::string> Convert() {
    if (Peek() == '^') ++pos_;
    TM_ASSIGN_OR_RETURN(std::string expr, ParseAlternation());
    if (!AtEnd()) {
      return Peek() == ')' ? Error("unbalanced ')'") : Error("unexpected character");
    }
    return expr.empty() ? std::string("\"\"") : expr;
  }

 private:
  bool AtEnd() const { return pos_ >= re_.size(); }
  char Peek() const { return AtEnd() ? '\0' : re_[pos_]; }

  Status Error(const std::string& what) const { return ErrorAt(pos_, what); }
  static Status ErrorAt(size_t offset, const std::string& what) {
    return InvalidArgumentError("regex at offset " + std::to_string(offset) + ": " + what);
  }

  StatusOr<std::string> ParseAlternation() {
    std::vector<std::string> branches;
    while (true) {
      TM_ASSIGN_OR_RETURN(std::string branch, ParseConcatenation());
      branches.push_back(branch.empty() ? "\"\"" : branch);
      if (Peek() != '|') break;
      ++pos_;
    }
    if (branches.size() == 1) return branches[0];
    std::string out = "(";
    for (size_t i = 0; i < branches.size(); ++i) out += (i ? " | " : "") + branches[i];
    return out + ")";
  }

  StatusOr<std::string> ParseConcatenation() {
    std::string out;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '$') {
        ++pos_;
        if (!AtEnd() && Peek() != '|' && Peek() != ')') return Error("'$' before the end");
        continue;
      }
      TM_ASSIGN_OR_RETURN(std::string atom, ParseAtom());
      TM_RETURN_IF_ERROR(ParseQuantifier(atom));
      if (!out.empty()) out += ' ';
      out += atom;
    }
    return out;
  }

  Status ParseQuantifier(std::string& atom) {
    while (true) {
      const char c = Peek();
      std::string suffix;
      if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        suffix = std::string(1, c);
      } else if (c == '{' && IsBoundAhead()) {
        const size_t start = pos_;
        ++pos_;
        int64_t lo = ParseNumber();
        int64_t hi = lo;
        if (Peek() == ',') {
          ++pos_;
          hi = (Peek() == '}') ? -1 : ParseNumber();
        }
        ++pos_;  // '}'
        if (std::max(lo, hi) > limits_.max_repetition) {
          pos_ = start;
          return ResourceExhaustedError(
              "regex at offset " + std::to_string(start) + ": repetition bound " +
              std::to_string(std::max(lo, hi)) + " is over the limit of " +
              std::to_string(limits_.max_repetition) +
              CapHint("use a smaller bound or * / +", "--grammar-max-repetition"));
        }
        if (hi >= 0 && hi < lo) return Error("repetition {m,n} with n < m");
        suffix = GbnfRepetition(lo, hi < 0 ? std::nullopt : std::optional<int64_t>(hi));
      } else {
        return OkStatus();
      }
      if (Peek() == '?' || Peek() == '+') ++pos_;  // lazy or possessive: the same language
      atom = "(" + atom + ")" + suffix;
    }
  }

  bool IsBoundAhead() const {
    size_t p = pos_ + 1;
    const size_t digits = p;
    while (p < re_.size() && re_[p] >= '0' && re_[p] <= '9') ++p;
    if (p == digits) return false;
    if (p < re_.size() && re_[p] == ',') {
      ++p;
      while (p < re_.size() && re_[p] >= '0' && re_[p] <= '9') ++p;
    }
    return p < re_.size() && re_[p] == '}';
  }

  int64_t ParseNumber() {
    int64_t value = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      value = std::min<int64_t>(value * 10 + (Peek() - '0'), 1'000'000'000);
      ++pos_;
    }
    return value;
  }

  StatusOr<std::string> ParseAtom() {
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      if (Peek() == '?') {
        ++pos_;
        if (Peek() == ':') {
          ++pos_;
        } else if (Peek() == 'P' || Peek() == '<') {
          if (Peek() == 'P') ++pos_;
          if (Peek() != '<' || re_.substr(pos_, 2) == "<=" || re_.substr(pos_, 2) == "<!") {
            return Error("lookbehind and (?P=name) are not supported");
          }
          while (!AtEnd() && Peek() != '>') ++pos_;
          if (AtEnd()) return Error("unterminated group name");
          ++pos_;
        } else {
          return Error("lookahead, flags and other (?...) groups are not supported");
        }
      }
      if (++group_depth_ > kMaxGroupDepth) {
        return Error("groups nest deeper than " + std::to_string(kMaxGroupDepth));
      }
      TM_ASSIGN_OR_RETURN(std::string inner, ParseAlternation());
      --group_depth_;
      if (Peek() != ')') return Error("missing ')'");
      ++pos_;
      return "(" + inner + ")";
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      return ClassExpr({{'\n', '\n'}}, /*negated=*/true);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("nothing to repeat");
    if (c == '\\') {
      ++pos_;
      const char e = Peek();
      if (e == 'd' || e == 'w' || e == 's' || e == 'D' || e == 'W' || e == 'S') {
        ++pos_;
        const Ranges& r = (e == 'd' || e == 'D') ? kDigit : (e == 'w' || e == 'W') ? kWord : kSpace;
        return ClassExpr(r, e >= 'A' && e <= 'Z');
      }
      TM_ASSIGN_OR_RETURN(uint32_t cp, ParseEscape());
      return Literal(cp);
    }
    TM_ASSIGN_OR_RETURN(uint32_t cp, ParseUtf8());
    return Literal(cp);
  }

  StatusOr<uint32_t> ParseUtf8() {
    const unsigned char c = static_cast<unsigned char>(Peek());
    const int length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (length == 0 || pos_ + length > re_.size()) return Error("invalid UTF-8");
    uint32_t cp = length == 1 ? c : c & (0x7F >> length);
    for (int i = 1; i < length; ++i) {
      const unsigned char cont = static_cast<unsigned char>(re_[pos_ + i]);
      if ((cont >> 6) != 0x2) return Error("invalid UTF-8");
      cp = (cp << 6) | (cont & 0x3F);
    }
    if (cp > 0x10FFFF) return Error("invalid UTF-8");  // lead bytes F5-F7
    pos_ += length;
    return cp;
  }

  // After a backslash: one character (not a class shorthand).
  StatusOr<uint32_t> ParseEscape() {
    const size_t backslash = pos_ - 1;
    if (AtEnd()) return ErrorAt(backslash, "trailing backslash");
    const char e = Peek();
    ++pos_;
    switch (e) {
      case 'n': return uint32_t{'\n'};
      case 't': return uint32_t{'\t'};
      case 'r': return uint32_t{'\r'};
      case 'f': return uint32_t{'\f'};
      case 'v': return uint32_t{'\v'};
      case '0': return uint32_t{0};
      case 'x': return ParseHex(2);
      case 'u': return ParseHex(4);
      default: break;
    }
    if ((e >= '1' && e <= '9') || e == 'k') {
      return ErrorAt(backslash, "backreferences are not supported");
    }
    if (e == 'b' || e == 'B' || e == 'A' || e == 'Z' || e == 'z' || e == 'G') {
      return ErrorAt(backslash, std::string("the assertion \\") + e + " is not supported");
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
      return ErrorAt(backslash, std::string("unknown escape \\") + e);
    }
    --pos_;
    return ParseUtf8();
  }

  StatusOr<uint32_t> ParseHex(int digits) {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = Peek();
      int v = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (v < 0) return Error("expected " + std::to_string(digits) + " hex digits");
      value = value * 16 + static_cast<uint32_t>(v);
      ++pos_;
    }
    return value;
  }

  StatusOr<std::string> ParseClass() {
    ++pos_;  // '['
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges ranges;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("unterminated character class");
      if (Peek() == ']' && !first) break;
      first = false;
      uint32_t lo;
      if (Peek() == '\\') {
        ++pos_;
        const char e = Peek();
        if (e == 'd' || e == 'w' || e == 's') {
          ++pos_;
          const Ranges& r = e == 'd' ? kDigit : e == 'w' ? kWord : kSpace;
          ranges.insert(ranges.end(), r.begin(), r.end());
          continue;
        }
        if (e == 'D' || e == 'W' || e == 'S') return Error("negated shorthand inside a class");
        if (e == 'b') {
          ++pos_;
          lo = '\b';
        } else {
          TM_ASSIGN_OR_RETURN(lo, ParseEscape());
        }
      } else {
        TM_ASSIGN_OR_RETURN(lo, ParseUtf8());
      }
      uint32_t hi = lo;
      if (Peek() == '-' && pos_ + 1 < re_.size() && re_[pos_ + 1] != ']') {
        ++pos_;
        if (Peek() == '\\') {
          ++pos_;
          TM_ASSIGN_OR_RETURN(hi, ParseEscape());
        } else {
          TM_ASSIGN_OR_RETURN(hi, ParseUtf8());
        }
        if (hi < lo) return Error("character range is out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;  // ']'
    return ClassExpr(ranges, negated);
  }

  // In a JSON string, '"', '\\' and control characters are written escaped.
  static bool NeedsJsonEscape(uint32_t cp) { return cp == '"' || cp == '\\' || cp < 0x20; }

  static std::string JsonEscaped(uint32_t cp) {
    std::string text;
    if (cp == '"' || cp == '\\') {
      text = std::string("\\") + static_cast<char>(cp);
    } else {
      static const char* kHex = "0123456789abcdef";
      text = std::string("\\u00") + kHex[cp >> 4] + kHex[cp & 15];
    }
    return GbnfLiteral(text);
  }

  std::string Literal(uint32_t cp) const {
    if (json_ && NeedsJsonEscape(cp)) return JsonEscaped(cp);
    std::string utf8;
    AppendUtf8(cp, utf8);
    return GbnfLiteral(utf8);
  }

  std::string ClassExpr(Ranges ranges, bool negated) const {
    std::vector<uint32_t> escaped;  // characters written as JSON escapes instead
    if (json_) {
      Ranges kept;
      for (auto [lo, hi] : ranges) {
        for (const uint32_t special : {0x22u, 0x5Cu}) {
          if (!negated && lo <= special && special <= hi) escaped.push_back(special);
        }
        kept.emplace_back(lo, hi);
      }
      if (negated) {
        kept.emplace_back(0, 0x1F);
        kept.emplace_back('"', '"');
        kept.emplace_back('\\', '\\');
      } else {
        // Remove the specials from the positive class.
        Ranges cut;
        for (auto [lo, hi] : kept) {
          uint32_t next = lo;
          for (const uint32_t special : {0x1Fu, 0x22u, 0x5Cu}) {
            const uint32_t s_lo = special == 0x1F ? 0 : special;
            if (special < next || s_lo > hi) continue;
            if (s_lo > next) cut.emplace_back(next, s_lo - 1);
            next = special + 1;
          }
          if (next <= hi) cut.emplace_back(next, hi);
        }
        kept = std::move(cut);
      }
      ranges = std::move(kept);
    }
    std::string cls = negated ? "[^" : "[";
    for (const auto& [lo, hi] : ranges) {
      cls += GbnfClassChar(lo);
      if (hi != lo) {
        cls += '-';
        cls += GbnfClassChar(hi);
      }
    }
    cls += "]";
    if (!negated && ranges.empty()) cls.clear();
    if (escaped.empty()) return cls.empty() ? "[^\\x00-\\U0010FFFF]" : cls;
    std::string out = "(";
    if (!cls.empty()) out += cls;
    for (const uint32_t special : escaped) {
      if (out.size() > 1) out += " | ";
      out += JsonEscaped(special);
    }
    return out + ")";
  }

  std::string_view re_;
  const bool json_;
  const GrammarLimits& limits_;
  size_t pos_ = 0;
  int group_depth_ = 0;
};

}  // namespace

StatusOr<std::string> RegexToGbnfExpression(std::string_view regex, bool json_string,
                                            const GrammarLimits& limits) {
  return RegexConverter(regex, json_string, limits).Convert();
}

StatusOr<std::string> RegexToGbnf(std::string_view regex, const GrammarLimits& limits) {
  TM_ASSIGN_OR_RETURN(std::string expr, RegexToGbnfExpression(regex, false, limits));
  return "root ::= " + expr + "\n";
}

}  // namespace tokenmill::grammar
