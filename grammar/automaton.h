// A grammar lowered to bytes: rules whose alternatives are sequences of byte sets and rule
// references, flattened into one array of elements. A position is an element's index; every
// alternative ends with a kEnd element. Characters are UTF-8, so a multi-byte character class
// is a rule of byte sequences and a token may end inside a character.
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
  kEnd,        // the alternative is complete: return to the caller
};

struct Element {
  ElementKind kind;
  int32_t arg;
};

struct Automaton {
  struct Rule {
    std::string name;
    std::vector<int32_t> alternatives;  // the position each alternative starts at
  };

  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  std::vector<Rule> rules;
  int32_t root = 0;

  bool IsBytePosition(int32_t pos) const {
    return elements[pos].kind == ElementKind::kBytes ||
           elements[pos].kind == ElementKind::kBytesStar;
  }
};

}  // namespace tokenmill::grammar
