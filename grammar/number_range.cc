#include "grammar/number_range.h"

#include <algorithm>
#include <string>
#include <vector>

namespace tokenmill::grammar {
namespace {

constexpr int64_t kLargest = 9'999'999'999'999'999;  // kMaxIntegerDigits nines

std::string Digit(char d) { return std::string("\"") + d + "\""; }

std::string DigitClass(char lo, char hi) {
  std::string out = "[";
  out += lo;
  out += '-';
  out += hi;
  out += ']';
  return out;
}

std::string AnyDigits(size_t n) {
  if (n == 0) return "";
  return n == 1 ? " [0-9]" : " [0-9]{" + std::to_string(n) + "}";
}

// Same-length decimal strings a <= b: the alternatives matching a..b.
void SameLength(const std::string& a, const std::string& b, const std::string& prefix,
                std::vector<std::string>& out) {
  const size_t n = a.size();
  if (n == 0) {
    out.push_back(prefix);
    return;
  }
  const bool a_rest_zero = std::all_of(a.begin() + 1, a.end(), [](char c) { return c == '0'; });
  const bool b_rest_nine = std::all_of(b.begin() + 1, b.end(), [](char c) { return c == '9'; });
  if (a_rest_zero && b_rest_nine) {
    std::string first = " ";
    first += a[0] == b[0] ? Digit(a[0]) : DigitClass(a[0], b[0]);
    out.push_back(prefix + first + AnyDigits(n - 1));
    return;
  }
  if (a[0] == b[0]) {
    SameLength(a.substr(1), b.substr(1), prefix + " " + Digit(a[0]), out);
    return;
  }
  SameLength(a.substr(1), std::string(n - 1, '9'), prefix + " " + Digit(a[0]), out);
  if (a[0] + 1 <= b[0] - 1) {
    out.push_back(prefix + " " + DigitClass(static_cast<char>(a[0] + 1),
                                            static_cast<char>(b[0] - 1)) + AnyDigits(n - 1));
  }
  SameLength(std::string(n - 1, '0'), b.substr(1), prefix + " " + Digit(b[0]), out);
}

int64_t Pow10(size_t n) {
  int64_t p = 1;
  for (size_t i = 0; i < n; ++i) p *= 10;
  return p;
}

// Alternatives for the non-negative integers in [x, y], without leading zeros.
void NonNegative(int64_t x, int64_t y, const std::string& prefix, std::vector<std::string>& out) {
  const size_t from = std::to_string(x).size();
  const size_t to = std::to_string(y).size();
  for (size_t length = from; length <= to; ++length) {
    const int64_t lo = std::max(x, length == 1 ? 0 : Pow10(length - 1));
    const int64_t hi = std::min(y, Pow10(length) - 1);
    if (lo <= hi) SameLength(std::to_string(lo), std::to_string(hi), prefix, out);
  }
}

}  // namespace

std::string IntegerRangeGbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const int64_t a = std::max(lo.value_or(-kLargest), -kLargest);
  const int64_t b = std::min(hi.value_or(kLargest), kLargest);
  if (a > b) return "";
  std::vector<std::string> alternatives;
  if (a < 0) NonNegative(std::max<int64_t>(-b, 1), -a, "\"-\"", alternatives);
  if (b >= 0) NonNegative(std::max<int64_t>(a, 0), b, "", alternatives);
  std::string out = "(";
  for (size_t i = 0; i < alternatives.size(); ++i) {
    std::string alt = alternatives[i];
    if (!alt.empty() && alt[0] == ' ') alt.erase(0, 1);
    out += (i ? " | " : "") + alt;
  }
  return out + ")";
}

}  // namespace tokenmill::grammar
