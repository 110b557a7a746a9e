#include "text/tokenizer/unicode_data.h"

#include <algorithm>
#include <iterator>

namespace tokenmill::tokenizer {
// Named, not anonymous: the one-letter groups below must not meet another file's names in a
// unity batch.
namespace unicode_tables {

struct CategoryRun {
  uint32_t first;
  CategoryGroup group;
};
struct CodepointPair {
  uint32_t from;
  uint32_t to;
};
struct NfdRun {
  uint32_t first;
  uint32_t last;
  uint32_t mapped;
};

constexpr CategoryGroup O = CategoryGroup::kOther;
constexpr CategoryGroup C = CategoryGroup::kControl;
constexpr CategoryGroup M = CategoryGroup::kMark;
constexpr CategoryGroup P = CategoryGroup::kPunctuation;
constexpr CategoryGroup S = CategoryGroup::kSymbol;

#include "text/tokenizer/unicode_data.inc"

// The last run that starts at or before `codepoint`, or null.
template <typename Run, size_t N>
const Run* RunOf(const Run (&runs)[N], uint32_t codepoint) {
  const Run* it = std::upper_bound(runs, runs + N, codepoint,
                                   [](uint32_t cp, const Run& run) { return cp < run.first; });
  return it == runs ? nullptr : it - 1;
}

}  // namespace unicode_tables

CategoryGroup CategoryOf(uint32_t codepoint) {
  // The first run starts at U+0000.
  return unicode_tables::RunOf(unicode_tables::kCategoryRuns, codepoint)->group;
}

bool IsUnicodeWhitespace(uint32_t codepoint) {
  return (codepoint >= 0x09 && codepoint <= 0x0D) || codepoint == 0x20 || codepoint == 0x85 ||
         codepoint == 0xA0 || codepoint == 0x1680 || (codepoint >= 0x2000 && codepoint <= 0x200A) ||
         codepoint == 0x2028 || codepoint == 0x2029 || codepoint == 0x202F ||
         codepoint == 0x205F || codepoint == 0x3000;
}

uint32_t SimpleLowercase(uint32_t codepoint) {
  const auto& pairs = unicode_tables::kLowercase;
  const auto* it = std::lower_bound(
      std::begin(pairs), std::end(pairs), codepoint,
      [](const unicode_tables::CodepointPair& pair, uint32_t cp) { return pair.from < cp; });
  return it != std::end(pairs) && it->from == codepoint ? it->to : codepoint;
}

uint32_t FirstOfDecomposition(uint32_t codepoint) {
  const auto* run = unicode_tables::RunOf(unicode_tables::kNfdRuns, codepoint);
  return run != nullptr && codepoint <= run->last ? run->mapped : codepoint;
}

}  // namespace tokenmill::tokenizer
