// GBNF (llama.cpp's grammar syntax) parsed into rules of items: literals, character classes,
// rule references, groups, each with a repetition. Comments start with '#'; a rule's body
// runs until the next `name ::=`, so alternatives may span lines.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tokenmill::grammar {

// The last Unicode code point: character classes and their complements end here.
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Unicode code point ranges, inclusive; negated means every code point outside them.
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool negated = false;
};

inline constexpr int64_t kUnbounded = -1;

struct GbnfItem {
  enum class Kind { kLiteral, kCharClass, kRuleRef, kGroup };
  Kind kind = Kind::kLiteral;
  std::string literal;    // kLiteral: UTF-8 bytes
  CharClass char_class;   // kCharClass (`.` is the negation of nothing)
  std::string rule_name;  // kRuleRef
  std::vector<std::vector<GbnfItem>> alternatives;  // kGroup
  int64_t min_repeat = 1;
  int64_t max_repeat = 1;  // or kUnbounded
  int32_t offset = 0;      // in the source, for errors
};

struct GbnfRule {
  std::string name;
  std::vector<std::vector<GbnfItem>> alternatives;
  int32_t offset = 0;
};

struct GbnfGrammar {
  std::vector<GbnfRule> rules;
  std::string_view source;  // for "line:col" of an offset
};

// INVALID_ARGUMENT with the line:col of the first error.
StatusOr<GbnfGrammar> ParseGbnf(std::string_view source);

// "line L:C" of a byte offset in source (1-based).
std::string SourceLocation(std::string_view source, int32_t offset);

// Appends code point cp as UTF-8.
void AppendUtf8(uint32_t cp, std::string& out);

}  // namespace tokenmill::grammar
