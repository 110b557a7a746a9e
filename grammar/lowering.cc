#include "grammar/lowering.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tokenmill::grammar {
namespace {

constexpr uint32_t kSurrogateFirst = 0xD800;
constexpr uint32_t kSurrogateLast = 0xDFFF;

struct Symbol {
  ElementKind kind;  // kBytes, kBytesStar, kRule or kRepeat
  int32_t arg;
};
using Sequence = std::vector<Symbol>;
struct IrRule {
  std::string name;
  std::vector<Sequence> alternatives;
};

// Bounds up to this are copies (fully precomputed masks); larger ones count in the stack.
constexpr int64_t kMaxCopiedRepetition = 8;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

// Sorted, merged, negated if asked, without surrogates (no UTF-8 encodes them).
Ranges NormalizeClass(const CharClass& cls) {
  Ranges ranges = cls.ranges;
  std::sort(ranges.begin(), ranges.end());
  Ranges merged;
  for (const auto& [lo, hi] : ranges) {
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  if (cls.negated) {
    Ranges complement;
    uint32_t next = 0;
    for (const auto& [lo, hi] : merged) {
      if (lo > next) complement.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) complement.emplace_back(next, kMaxCodePoint);
    merged = std::move(complement);
  }
  Ranges out;
  for (const auto& [lo, hi] : merged) {
    if (hi < kSurrogateFirst || lo > kSurrogateLast) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < kSurrogateFirst) out.emplace_back(lo, kSurrogateFirst - 1);
    if (hi > kSurrogateLast) out.emplace_back(kSurrogateLast + 1, hi);
  }
  return out;
}

std::vector<uint8_t> EncodeUtf8(uint32_t cp) {
  std::string s;
  AppendUtf8(cp, s);
  return {s.begin(), s.end()};
}

// [lo, hi] (same UTF-8 length) as byte-range sequences: the split of Russ Cox's RE2 and
// Rust's regex-syntax, cutting at continuation-byte boundaries until each sequence is a
// product of ranges.
void SplitSameLength(uint32_t lo, uint32_t hi, int length, std::vector<ByteRanges>& out) {
  for (int i = 1; i < length; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitSameLength(lo, lo | m, length, out);
        SplitSameLength((lo | m) + 1, hi, length, out);
        return;
      }
      if ((hi & m) != m) {
        SplitSameLength(lo, (hi & ~m) - 1, length, out);
        SplitSameLength(hi & ~m, hi, length, out);
        return;
      }
    }
  }
  const std::vector<uint8_t> a = EncodeUtf8(lo);
  const std::vector<uint8_t> b = EncodeUtf8(hi);
  ByteRanges seq;
  for (size_t k = 0; k < a.size(); ++k) seq.emplace_back(a[k], b[k]);
  out.push_back(std::move(seq));
}

void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  constexpr uint32_t kLast[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  uint32_t first = 0;
  for (int length = 1; length <= 4; ++length) {
    const uint32_t a = std::max(lo, first);
    const uint32_t b = std::min(hi, kLast[length - 1]);
    if (a <= b) SplitSameLength(a, b, length, out);
    first = kLast[length - 1] + 1;
  }
}

// Tarjan's strongly connected components of a graph, iteratively (chains of rules may be
// long): component[v] for each vertex.
std::vector<int32_t> StronglyConnected(const std::vector<std::vector<int32_t>>& edges) {
  const int32_t n = static_cast<int32_t>(edges.size());
  std::vector<int32_t> index(n, -1), low(n, 0), component(n, -1), stack;
  std::vector<bool> on_stack(n, false);
  int32_t next_index = 0;
  int32_t components = 0;
  for (int32_t start = 0; start < n; ++start) {
    if (index[start] >= 0) continue;
    std::vector<std::pair<int32_t, size_t>> work{{start, 0}};
    index[start] = low[start] = next_index++;
    stack.push_back(start);
    on_stack[start] = true;
    while (!work.empty()) {
      auto& [v, edge] = work.back();
      if (edge < edges[v].size()) {
        const int32_t w = edges[v][edge++];
        if (index[w] < 0) {
          index[w] = low[w] = next_index++;
          stack.push_back(w);
          on_stack[w] = true;
          work.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      const int32_t done = v;
      work.pop_back();
      if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[done]);
      if (low[done] == index[done]) {
        int32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          component[w] = components;
        } while (w != done);
        ++components;
      }
    }
  }
  return component;
}

class Lowerer {
 public:
  Lowerer(const GbnfGrammar& grammar, const GrammarLimits& limits)
      : grammar_(grammar), limits_(limits) {}

  StatusOr<Automaton> Lower() {
    for (const GbnfRule& rule : grammar_.rules) {
      if (rule_ids_.count(rule.name)) {
        return Error(rule.offset, "rule '" + rule.name + "' is defined twice");
      }
      rule_ids_[rule.name] = static_cast<int32_t>(rules_.size());
      rules_.push_back({rule.name, {}});
    }
    const auto root = rule_ids_.find("root");
    if (root == rule_ids_.end()) return InvalidArgumentError("GBNF grammar has no 'root' rule");
    for (const GbnfRule& rule : grammar_.rules) {
      std::vector<Sequence> alternatives;
      TM_RETURN_IF_ERROR(LowerAlternatives(rule.alternatives, alternatives));
      rules_[rule_ids_[rule.name]].alternatives = std::move(alternatives);
    }
    TM_RETURN_IF_ERROR(CopyRepeatsOfEmptyUnits());
    TM_RETURN_IF_ERROR(CheckLeftRecursion());
    TM_RETURN_IF_ERROR(CheckProductive(root->second));
    InlineSmallRules();
    return Flatten(root->second);
  }

 private:
  Status Error(int32_t offset, const std::string& what) const {
    return InvalidArgumentError("GBNF " + SourceLocation(grammar_.source, offset) + ": " + what);
  }

  Status CountElements(int64_t n) {
    elements_ += n;
    if (elements_ > limits_.max_elements) {
      return ResourceExhaustedError(
          "grammar expands to more than " + std::to_string(limits_.max_elements) + " elements" +
          CapHint("shorten the grammar or schema", "--grammar-max-elements"));
    }
    return OkStatus();
  }

  StatusOr<int32_t> NewRule(std::string name, std::vector<Sequence> alternatives) {
    if (static_cast<int64_t>(rules_.size()) >= limits_.max_rules) {
      return ResourceExhaustedError(
          "grammar needs more than " + std::to_string(limits_.max_rules) + " rules" +
          CapHint("shorten the grammar or schema", "--grammar-max-rules"));
    }
    rules_.push_back({std::move(name), std::move(alternatives)});
    return static_cast<int32_t>(rules_.size()) - 1;
  }

  int32_t InternByteSet(const ByteSet& set) {
    const auto [it, inserted] =
        byte_set_ids_.emplace(set.bits, static_cast<int32_t>(byte_sets_.size()));
    if (inserted) byte_sets_.push_back(set);
    return it->second;
  }

  Status LowerAlternatives(const std::vector<std::vector<GbnfItem>>& in,
                           std::vector<Sequence>& out) {
    for (const std::vector<GbnfItem>& items : in) {
      Sequence sequence;
      for (const GbnfItem& item : items) TM_RETURN_IF_ERROR(LowerItem(item, sequence));
      out.push_back(std::move(sequence));
    }
    return OkStatus();
  }

  // The item once, without its repetition.
  Status LowerOnce(const GbnfItem& item, Sequence& out) {
    switch (item.kind) {
      case GbnfItem::Kind::kLiteral:
        TM_RETURN_IF_ERROR(CountElements(static_cast<int64_t>(item.literal.size())));
        for (const char c : item.literal) {
          ByteSet set;
          set.Add(static_cast<uint8_t>(c));
          out.push_back({ElementKind::kBytes, InternByteSet(set)});
        }
        return OkStatus();
      case GbnfItem::Kind::kCharClass: {
        TM_ASSIGN_OR_RETURN(Symbol symbol, LowerClass(item.char_class));
        out.push_back(symbol);
        return CountElements(1);
      }
      case GbnfItem::Kind::kRuleRef: {
        const auto it = rule_ids_.find(item.rule_name);
        if (it == rule_ids_.end()) {
          return Error(item.offset, "undefined rule '" + item.rule_name + "'");
        }
        out.push_back({ElementKind::kRule, it->second});
        return CountElements(1);
      }
      case GbnfItem::Kind::kGroup: {
        std::vector<Sequence> alternatives;
        TM_RETURN_IF_ERROR(LowerAlternatives(item.alternatives, alternatives));
        if (alternatives.size() == 1) {
          out.insert(out.end(), alternatives[0].begin(), alternatives[0].end());
          return OkStatus();
        }
        TM_ASSIGN_OR_RETURN(int32_t rule, NewRule(GeneratedName("group"), std::move(alternatives)));
        out.push_back({ElementKind::kRule, rule});
        return CountElements(1);
      }
    }
    return OkStatus();
  }

  std::string GeneratedName(const char* what) {
    return std::string(what) + "#" + std::to_string(rules_.size());
  }

  StatusOr<Symbol> LowerClass(const CharClass& cls) {
    const Ranges ranges = NormalizeClass(cls);
    if (ranges.empty() || ranges.back().second < 0x80) {
      ByteSet set;
      for (const auto& [lo, hi] : ranges) {
        set.AddRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
      }
      return Symbol{ElementKind::kBytes, InternByteSet(set)};
    }
    const auto cached = class_rules_.find(ranges);
    if (cached != class_rules_.end()) return Symbol{ElementKind::kRule, cached->second};
    std::vector<ByteRanges> sequences;
    for (const auto& [lo, hi] : ranges) SplitUtf8(lo, hi, sequences);
    // The one-byte sequences share one byte set; longer ones are alternatives.
    ByteSet ascii;
    bool has_ascii = false;
    std::vector<Sequence> alternatives;
    for (const ByteRanges& seq : sequences) {
      if (seq.size() == 1) {
        ascii.AddRange(seq[0].first, seq[0].second);
        has_ascii = true;
        continue;
      }
      Sequence alternative;
      for (const auto& [lo, hi] : seq) {
        ByteSet set;
        set.AddRange(lo, hi);
        alternative.push_back({ElementKind::kBytes, InternByteSet(set)});
      }
      alternatives.push_back(std::move(alternative));
    }
    if (has_ascii) alternatives.insert(alternatives.begin(), {{ElementKind::kBytes, InternByteSet(ascii)}});
    TM_ASSIGN_OR_RETURN(int32_t rule, NewRule(GeneratedName("class"), std::move(alternatives)));
    class_rules_[ranges] = rule;
    return Symbol{ElementKind::kRule, rule};
  }

  Status LowerItem(const GbnfItem& item, Sequence& out) {
    if (item.min_repeat == 1 && item.max_repeat == 1) return LowerOnce(item, out);
    const int64_t bound = std::max(item.min_repeat, item.max_repeat);
    if (bound > limits_.max_repetition) {
      return ResourceExhaustedError(
          "GBNF " + SourceLocation(grammar_.source, item.offset) + ": repetition bound " +
          std::to_string(bound) + " is over the limit of " +
          std::to_string(limits_.max_repetition) +
          CapHint("use a smaller bound or * / +", "--grammar-max-repetition"));
    }
    Sequence once;
    TM_RETURN_IF_ERROR(LowerOnce(item, once));
    if (bound > kMaxCopiedRepetition) {
      // The repeat's own unit rule, so that its positions know they are inside it.
      TM_ASSIGN_OR_RETURN(int32_t unit, NewRule(GeneratedName("repeat"), {once}));
      repeats_.push_back({unit, static_cast<int32_t>(item.min_repeat),
                          item.max_repeat == kUnbounded ? kUnboundedRepeat
                                                        : static_cast<int32_t>(item.max_repeat),
                          -1});
      out.push_back({ElementKind::kRepeat, static_cast<int32_t>(repeats_.size()) - 1});
      return CountElements(1);
    }
    Symbol unit{};
    if (once.size() == 1) {
      unit = once[0];
    } else {
      TM_ASSIGN_OR_RETURN(int32_t rule, NewRule(GeneratedName("repeat"), {once}));
      unit = {ElementKind::kRule, rule};
    }
    return AppendCopies(unit, item.min_repeat, item.max_repeat, out);
  }

  // unit{min,max} as copies: min of them, then max-min nested optionals (or a star).
  Status AppendCopies(Symbol unit, int64_t min, int64_t max, Sequence& out) {
    TM_RETURN_IF_ERROR(CountElements(std::max(min, max) + 1));
    for (int64_t i = 0; i < min; ++i) out.push_back(unit);
    if (max == kUnbounded) {
      if (unit.kind == ElementKind::kBytes) {
        out.push_back({ElementKind::kBytesStar, unit.arg});
        return OkStatus();
      }
      // star ::= unit star | ε
      const int32_t star = static_cast<int32_t>(rules_.size());
      TM_ASSIGN_OR_RETURN(int32_t rule, NewRule(GeneratedName("star"), {}));
      rules_[rule].alternatives = {{unit, {ElementKind::kRule, star}}, {}};
      out.push_back({ElementKind::kRule, rule});
      return OkStatus();
    }
    // optional_k ::= unit optional_{k-1} | ε, innermost first.
    int32_t inner = -1;
    for (int64_t k = 0; k < max - min; ++k) {
      Sequence first{unit};
      if (inner >= 0) first.push_back({ElementKind::kRule, inner});
      TM_ASSIGN_OR_RETURN(inner, NewRule(GeneratedName("optional"), {std::move(first), {}}));
    }
    if (inner >= 0) out.push_back({ElementKind::kRule, inner});
    return OkStatus();
  }

  // A repeat whose unit may match nothing is copied instead: its counter could not tell an
  // empty iteration from one that moved on. (Hand-written grammars only; the converters'
  // units all match a character.)
  Status CopyRepeatsOfEmptyUnits() {
    const std::vector<bool> nullable = Nullable();
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (size_t a = 0; a < rules_[r].alternatives.size(); ++a) {
        Sequence seq = rules_[r].alternatives[a];
        Sequence out;
        bool changed = false;
        for (const Symbol& s : seq) {
          if (s.kind != ElementKind::kRepeat || !nullable[repeats_[s.arg].unit]) {
            out.push_back(s);
            continue;
          }
          const Repeat& repeat = repeats_[s.arg];
          TM_RETURN_IF_ERROR(AppendCopies({ElementKind::kRule, repeat.unit}, repeat.min,
                                          repeat.max == kUnboundedRepeat ? kUnbounded : repeat.max,
                                          out));
          changed = true;
        }
        if (changed) rules_[r].alternatives[a] = std::move(out);
      }
    }
    return OkStatus();
  }

  std::vector<bool> Nullable() const {
    std::vector<bool> nullable(rules_.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        if (nullable[r]) continue;
        for (const Sequence& seq : rules_[r].alternatives) {
          const bool all = std::all_of(seq.begin(), seq.end(), [&](const Symbol& s) {
            return s.kind == ElementKind::kBytesStar ||
                   (s.kind == ElementKind::kRule && nullable[s.arg]) ||
                   (s.kind == ElementKind::kRepeat &&
                    (repeats_[s.arg].min == 0 || nullable[repeats_[s.arg].unit]));
          });
          if (all) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    return nullable;
  }

  // A rule the root reaches that can match no text at all (it only refers to itself, as
  // `a ::= a` or JSON Schema's {"$ref": "#"}) would leave a request with no allowed token.
  Status CheckProductive(int32_t root) const {
    std::vector<bool> productive(rules_.size(), false);
    const auto symbol_productive = [&](const Symbol& s) {
      switch (s.kind) {
        case ElementKind::kRule: return static_cast<bool>(productive[s.arg]);
        case ElementKind::kRepeat:
          return repeats_[s.arg].min == 0 || productive[repeats_[s.arg].unit];
        default: return true;
      }
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        if (productive[r]) continue;
        for (const Sequence& seq : rules_[r].alternatives) {
          if (std::all_of(seq.begin(), seq.end(), symbol_productive)) {
            productive[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    std::vector<bool> seen(rules_.size(), false);
    std::vector<int32_t> work{root};
    seen[root] = true;
    while (!work.empty()) {
      const int32_t r = work.back();
      work.pop_back();
      if (!productive[r]) {
        return InvalidArgumentError("grammar rule '" + rules_[r].name +
                                    "' can never match: it only refers to itself (in JSON "
                                    "Schema, a $ref that reaches itself before any value)");
      }
      for (const Sequence& seq : rules_[r].alternatives) {
        for (const Symbol& s : seq) {
          int32_t to = -1;
          if (s.kind == ElementKind::kRule) to = s.arg;
          if (s.kind == ElementKind::kRepeat) to = repeats_[s.arg].unit;
          if (to >= 0 && !seen[to]) {
            seen[to] = true;
            work.push_back(to);
          }
        }
      }
    }
    return OkStatus();
  }

  // A rule that reaches itself before consuming a byte, through a reference with more to
  // match after it, would grow the stack forever. (Reaching itself only through last
  // references is harmless: those replace the caller's frame.)
  Status CheckLeftRecursion() const {
    const std::vector<bool> nullable = Nullable();
    struct Edge {
      int32_t to;
      bool grows;
    };
    std::vector<std::vector<Edge>> edges(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Sequence& seq : rules_[r].alternatives) {
        for (size_t i = 0; i < seq.size(); ++i) {
          if (seq[i].kind == ElementKind::kBytes) break;
          if (seq[i].kind == ElementKind::kBytesStar) continue;
          if (seq[i].kind == ElementKind::kRepeat) {
            // The frame stays below the unit: a reference that grows the stack.
            const Repeat& repeat = repeats_[seq[i].arg];
            edges[r].push_back({repeat.unit, true});
            if (repeat.min > 0) break;
            continue;
          }
          edges[r].push_back({seq[i].arg, i + 1 != seq.size()});
          if (!nullable[seq[i].arg]) break;
        }
      }
    }
    std::vector<std::vector<int32_t>> targets(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Edge& e : edges[r]) targets[r].push_back(e.to);
    }
    const std::vector<int32_t> component = StronglyConnected(targets);
    const int32_t n = static_cast<int32_t>(rules_.size());
    for (int32_t r = 0; r < n; ++r) {
      for (const Edge& e : edges[r]) {
        if (e.grows && component[e.to] == component[r]) {
          return InvalidArgumentError("GBNF rule '" + rules_[r].name +
                                      "' is left-recursive (it reaches itself before "
                                      "matching a character): rewrite it with repetition");
        }
      }
    }
    return OkStatus();
  }

  // Splices small rules that are not recursive into the alternatives referring to them (a
  // one-alternative rule anywhere, a rule of several alternatives where it starts one), so
  // that a byte position's rule holds what follows it: a character class, an escape or a
  // group stops being a rule that ends after one character, and more of the vocabulary is
  // decided when the grammar is compiled.
  void InlineSmallRules() {
    constexpr size_t kMaxInlinedAlternatives = 16;
    constexpr size_t kMaxInlinedLength = 16;
    constexpr size_t kMaxHostAlternatives = 64;
    constexpr size_t kMaxHostLength = 64;
    const size_t n = rules_.size();
    std::vector<std::vector<int32_t>> refs(n);
    std::vector<bool> recursive(n, false);
    for (size_t r = 0; r < n; ++r) {
      for (const Sequence& seq : rules_[r].alternatives) {
        for (const Symbol& s : seq) {
          if (s.kind != ElementKind::kRule && s.kind != ElementKind::kRepeat) continue;
          const int32_t to = s.kind == ElementKind::kRule ? s.arg : repeats_[s.arg].unit;
          refs[r].push_back(to);
          if (static_cast<size_t>(to) == r) recursive[r] = true;
        }
      }
    }
    const std::vector<int32_t> component = StronglyConnected(refs);
    std::vector<int32_t> size(n, 0);
    for (size_t r = 0; r < n; ++r) ++size[component[r]];
    for (size_t r = 0; r < n; ++r) recursive[r] = recursive[r] || size[component[r]] > 1;
    const auto small = [&](int32_t rule) {
      if (recursive[rule] || rules_[rule].alternatives.size() > kMaxInlinedAlternatives) {
        return false;
      }
      return std::all_of(rules_[rule].alternatives.begin(), rules_[rule].alternatives.end(),
                         [&](const Sequence& seq) { return seq.size() <= kMaxInlinedLength; });
    };
    for (size_t host = 0; host < n; ++host) {
      for (bool changed = true; changed;) {
        changed = false;
        std::vector<Sequence>& alternatives = rules_[host].alternatives;
        std::vector<Sequence> out;
        for (size_t a = 0; a < alternatives.size(); ++a) {
          const Sequence& seq = alternatives[a];
          size_t i = 0;
          while (i < seq.size() &&
                 !(seq[i].kind == ElementKind::kRule && small(seq[i].arg) &&
                   (i == 0 || rules_[seq[i].arg].alternatives.size() == 1))) {
            ++i;
          }
          const size_t later = alternatives.size() - a - 1;
          if (i == seq.size() ||
              out.size() + rules_[seq[i].arg].alternatives.size() + later > kMaxHostAlternatives) {
            out.push_back(seq);
            continue;
          }
          const std::vector<Sequence>& inlined = rules_[seq[i].arg].alternatives;
          const bool fits = std::all_of(inlined.begin(), inlined.end(), [&](const Sequence& b) {
            return seq.size() - 1 + b.size() <= kMaxHostLength;
          });
          if (!fits) {
            out.push_back(seq);
            continue;
          }
          for (const Sequence& b : inlined) {
            Sequence spliced(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(i));
            spliced.insert(spliced.end(), b.begin(), b.end());
            spliced.insert(spliced.end(), seq.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                           seq.end());
            out.push_back(std::move(spliced));
          }
          changed = true;
        }
        alternatives = std::move(out);
      }
    }
  }

  Automaton Flatten(int32_t root) {
    Automaton a;
    a.byte_sets = std::move(byte_sets_);
    a.root = root;
    a.repeats = std::move(repeats_);
    for (IrRule& rule : rules_) {
      Automaton::Rule out{std::move(rule.name), {}};
      for (const Sequence& seq : rule.alternatives) {
        out.alternatives.push_back(static_cast<int32_t>(a.elements.size()));
        for (const Symbol& s : seq) {
          if (s.kind == ElementKind::kRepeat && a.repeats[s.arg].element < 0) {
            a.repeats[s.arg].element = static_cast<int32_t>(a.elements.size());
          }
          a.elements.push_back({s.kind, s.arg});
        }
        a.elements.push_back({ElementKind::kEnd, 0});
      }
      a.rules.push_back(std::move(out));
    }
    // Repeats that no element kept (copied, or in a rule never reached) have no unit rule.
    for (size_t r = 0; r < a.repeats.size(); ++r) {
      if (a.repeats[r].element >= 0) a.rules[a.repeats[r].unit].repeat = static_cast<int32_t>(r);
    }
    return a;
  }

  const GbnfGrammar& grammar_;
  const GrammarLimits& limits_;
  std::vector<IrRule> rules_;
  std::vector<Repeat> repeats_;
  std::unordered_map<std::string, int32_t> rule_ids_;
  std::vector<ByteSet> byte_sets_;
  std::map<std::array<uint64_t, 4>, int32_t> byte_set_ids_;
  std::map<Ranges, int32_t> class_rules_;
  int64_t elements_ = 0;
};

}  // namespace

StatusOr<Automaton> LowerGrammar(const GbnfGrammar& grammar, const GrammarLimits& limits) {
  return Lowerer(grammar, limits).Lower();
}

}  // namespace tokenmill::grammar
