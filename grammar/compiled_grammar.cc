#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "grammar/compiler.h"
#include "grammar/stack_pool.h"
#include "grammar/stepper.h"

namespace tokenmill::grammar {
namespace {

// Each token's common prefix length with the one before (tokens in trie order).
std::vector<uint16_t> CommonPrefixes(const VocabularyIndex& vocab,
                                     const std::vector<int32_t>& tokens) {
  std::vector<uint16_t> lcp;
  lcp.reserve(tokens.size());
  const std::string* previous = nullptr;
  for (const int32_t t : tokens) {
    const std::string& bytes = vocab.token(t);
    size_t common = 0;
    if (previous != nullptr) {
      const size_t limit = std::min({previous->size(), bytes.size(), size_t{UINT16_MAX}});
      while (common < limit && (*previous)[common] == bytes[common]) ++common;
    }
    lcp.push_back(static_cast<uint16_t>(common));
    previous = &bytes;
  }
  return lcp;
}

// Classifies every token at one byte position by a walk of the vocabulary trie from the
// stack [pos] over an unknown caller.
class PositionClassifier {
 public:
  PositionClassifier(const Automaton& automaton, const VocabularyIndex& vocab,
                     std::chrono::steady_clock::time_point deadline)
      : automaton_(automaton), vocab_(vocab), stepper_(automaton, pool_) {
    stepper_.set_deadline(deadline);
  }

  // The deadline passed inside a Classify, whose tables are then incomplete.
  bool timed_out() const { return stepper_.timed_out(); }

  // repeat: the repeat whose unit holds pos, or -1.
  PositionTokens Classify(int32_t pos, int32_t repeat) {
    pool_.BeginScratch();
    std::vector<int32_t> accepted, dependent;
    size_t max_depth = 1;
    sets_.resize(2);
    left_.assign(2, false);
    const int32_t below =
        repeat < 0 ? kUnknownCaller
                   : pool_.Intern(automaton_.repeats[repeat].element, kUnknownCaller, kAnyCount);
    sets_[0].stacks = {pool_.Intern(pos, below)};
    const size_t n = vocab_.trie_size();
    for (size_t i = 1; i < n;) {
      const uint32_t d = vocab_.trie_depth(i);
      if (d + 1 > max_depth) {
        max_depth = d + 1;
        sets_.resize(max_depth + 1);
        left_.resize(max_depth + 1, false);
      }
      StateSet& here = sets_[d];
      stepper_.Advance(sets_[d - 1], vocab_.trie_byte(i), here);
      if (stepper_.timed_out()) break;  // Build reports it
      left_[d] = left_[d - 1] || here.left_scope;
      const bool alive = !here.stacks.empty();
      const int32_t token = vocab_.token_at(i);
      if (token >= 0) {
        if (alive || here.left_scope) {
          accepted.push_back(token);
        } else if (left_[d - 1]) {
          dependent.push_back(token);
        }
      }
      if (alive) {
        ++i;
        continue;
      }
      // Nothing inside the rule continues: the subtree is rejected, or up to the caller.
      const uint32_t end = vocab_.subtree_end(i);
      if (left_[d]) {
        for (size_t j = i + 1; j < end; ++j) {
          if (vocab_.token_at(j) >= 0) dependent.push_back(vocab_.token_at(j));
        }
      }
      i = end;
    }
    pool_.EndScratch();
    stepper_.ForgetExpansions();
    PositionTokens out;
    if (repeat >= 0 && automaton_.repeats[repeat].max != kUnboundedRepeat) {
      out.repeat = repeat;
      for (const int32_t t : accepted) {
        out.max_accepted_bytes =
            std::max(out.max_accepted_bytes, static_cast<uint32_t>(vocab_.token(t).size()));
      }
      out.accepted_in_order = accepted;
      out.accepted_lcp = CommonPrefixes(vocab_, accepted);
    }
    Pack(std::move(accepted), std::move(dependent), out);
    return out;
  }

 private:
  void Pack(std::vector<int32_t> accepted, std::vector<int32_t> dependent,
            PositionTokens& out) const {
    const size_t in_trie = vocab_.size() - CountEmpty() - vocab_.duplicates().size();
    const size_t rejected = in_trie - accepted.size() - dependent.size();
    const size_t words = BitmaskWords(vocab_.size());
    if (std::min(rejected, accepted.size()) > words) {
      // Either list would be larger than a bitmask of the accepted tokens.
      out.accepted_mask.assign(words, 0);
      for (const int32_t t : accepted) out.accepted_mask[t / 32] |= uint32_t{1} << (t % 32);
    } else if (rejected < accepted.size()) {
      std::vector<bool> decided(vocab_.size(), false);
      for (const int32_t t : accepted) decided[t] = true;
      for (const int32_t t : dependent) decided[t] = true;
      for (size_t i = 1; i < vocab_.trie_size(); ++i) {
        const int32_t t = vocab_.token_at(i);
        if (t >= 0 && !decided[t]) out.list.push_back(t);
      }
      out.list_is_rejected = true;
    } else {
      out.list = std::move(accepted);
    }
    out.dependent_lcp = CommonPrefixes(vocab_, dependent);
    out.dependent = std::move(dependent);
  }

  size_t CountEmpty() const {
    if (empty_count_ < 0) {
      empty_count_ = 0;
      for (size_t t = 0; t < vocab_.size(); ++t) empty_count_ += vocab_.token(t).empty();
    }
    return static_cast<size_t>(empty_count_);
  }

  const Automaton& automaton_;
  const VocabularyIndex& vocab_;
  StackPool pool_;
  Stepper stepper_;
  std::vector<StateSet> sets_;
  std::vector<bool> left_;
  mutable int64_t empty_count_ = -1;
};

template <typename T>
int64_t HeapBytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

// What one position's table holds on the heap.
int64_t HeapBytes(const PositionTokens& t) {
  return HeapBytes(t.accepted_mask) + HeapBytes(t.list) + HeapBytes(t.dependent) +
         HeapBytes(t.dependent_lcp) + HeapBytes(t.accepted_in_order) + HeapBytes(t.accepted_lcp);
}

int64_t AutomatonBytes(const Automaton& a) {
  int64_t bytes = HeapBytes(a.elements) + HeapBytes(a.byte_sets) + HeapBytes(a.rules) +
                  HeapBytes(a.repeats);
  for (const Automaton::Rule& rule : a.rules) {
    bytes += static_cast<int64_t>(rule.name.capacity()) + HeapBytes(rule.alternatives);
  }
  return bytes;
}

// A table's lists grow by doubling while classified; keeping the slack would cost up to half
// again of what the grammar needs.
void ShrinkToFit(PositionTokens& t) {
  t.accepted_mask.shrink_to_fit();
  t.list.shrink_to_fit();
  t.dependent.shrink_to_fit();
  t.dependent_lcp.shrink_to_fit();
  t.accepted_in_order.shrink_to_fit();
  t.accepted_lcp.shrink_to_fit();
}

}  // namespace

StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Build(
    Automaton automaton, std::shared_ptr<const VocabularyIndex> vocab,
    std::chrono::steady_clock::time_point deadline, int64_t max_bytes) {
  std::shared_ptr<CompiledGrammar> grammar(
      new CompiledGrammar(std::move(automaton), std::move(vocab)));
  const Automaton& a = grammar->automaton_;
  PositionClassifier classifier(a, *grammar->vocab_, deadline);
  grammar->table_of_pos_.assign(a.elements.size(), -1);
  std::vector<int32_t> repeat_of_pos(a.elements.size(), -1);
  for (const Automaton::Rule& rule : a.rules) {
    if (rule.repeat < 0) continue;
    for (const int32_t alt : rule.alternatives) {
      for (int32_t p = alt; a.elements[p].kind != ElementKind::kEnd; ++p) {
        repeat_of_pos[p] = rule.repeat;
      }
    }
  }
  const auto past_deadline = [] {
    return ResourceExhaustedError(
        "compiling the grammar ran past its time limit" +
        CapHint("simplify the grammar or schema", "--grammar-max-compile-ms"));
  };
  // Counted as the tables grow, so a grammar over the cap stops there instead of first
  // taking all it would need.
  int64_t bytes = static_cast<int64_t>(sizeof(CompiledGrammar)) + AutomatonBytes(a) +
                  HeapBytes(grammar->table_of_pos_);
  const auto over_cap = [max_bytes] {
    return ResourceExhaustedError(
        "the compiled grammar (its token tables) needs more than " +
        std::to_string(max_bytes >> 20) + " MiB" +
        CapHint("simplify the grammar or schema", "--grammar-max-table-mib"));
  };
  for (int32_t pos = 0; pos < static_cast<int32_t>(a.elements.size()); ++pos) {
    if (!a.IsBytePosition(pos)) continue;
    if (std::chrono::steady_clock::now() > deadline) return past_deadline();
    grammar->table_of_pos_[pos] = static_cast<int32_t>(grammar->tables_.size());
    grammar->tables_.push_back(classifier.Classify(pos, repeat_of_pos[pos]));
    if (classifier.timed_out()) return past_deadline();
    ShrinkToFit(grammar->tables_.back());
    bytes += static_cast<int64_t>(sizeof(PositionTokens)) + HeapBytes(grammar->tables_.back());
    if (bytes > max_bytes) return over_cap();
  }
  grammar->tables_.shrink_to_fit();
  grammar->memory_bytes_ = bytes;
  return std::shared_ptr<const CompiledGrammar>(std::move(grammar));
}

}  // namespace tokenmill::grammar
