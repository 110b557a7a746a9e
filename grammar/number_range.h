// GBNF for JSON integers (and the integer parts of numbers) within bounds, as digit classes:
// the alternatives of each digit count, split at the first digit that differs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tokenmill::grammar {

// Digits of an integer without a bound on that side: a JSON integer of at most 16 digits.
inline constexpr int kMaxIntegerDigits = 16;

// A GBNF expression for the integers in [lo, hi] (either side open), or "" when empty.
std::string IntegerRangeGbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace tokenmill::grammar
