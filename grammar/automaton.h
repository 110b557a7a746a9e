// A grammar lowered to bytes: rules whose alternatives are sequences of byte sets and rule
// references, flattened into one array of elements. A position is an element's index; every
// alternative ends with a kEnd element. Characters are UTF-8, so a multi-byte character class
// is a rule of byte sequences and a token may end inside a character. A repetition with a
// large bound is one kRepeat element whose count lives in the stack (see Repeat).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tokenmill::grammar {

// 256 bits: which bytes an element matches.
struct ByteSet {
  std::array<uint64_t, 4> bits{};

  bool Contains(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet&) const = default;
};

enum class ElementKind : uint8_t {
  kBytes,      // one byte of byte_sets[arg]
  kBytesStar,  // any number of bytes of byte_sets[arg] (x* of a one-byte class, in place)
  kRule,       // the rule rules[arg]
  kRepeat,     // repeats[arg]: its unit rule min..max times, counted in a stack frame
  kEnd,        // the alternative is complete: return to the caller
};

struct Element {
  ElementKind kind;
  int32_t arg;
};

// x{min,max} without copies: a frame below the unit rule counts the iterations done, so a
// bound of 10^5 costs what a bound of 10 does. The unit rule is the repeat's own (no other
// element refers to it) and matches at least one byte (a unit that may be empty is expanded
// into copies instead), so a token of L bytes completes at most L iterations.
struct Repeat {
  int32_t unit;     // rules[unit]
  int32_t min;
  int32_t max;      // or kUnboundedRepeat: the count then stops growing at min
  int32_t element;  // a kRepeat element of this repeat (inlining may copy it)
};
inline constexpr int32_t kUnboundedRepeat = -1;

struct Automaton {
  struct Rule {
    std::string name;
    std::vector<int32_t> alternatives;  // the position each alternative starts at
    int32_t repeat = -1;                // this rule is the unit of repeats[repeat]
  };

  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  std::vector<Rule> rules;
  std::vector<Repeat> repeats;
  int32_t root = 0;

  bool IsBytePosition(int32_t pos) const {
    return elements[pos].kind == ElementKind::kBytes ||
           elements[pos].kind == ElementKind::kBytesStar;
  }
};

}  // namespace tokenmill::grammar
