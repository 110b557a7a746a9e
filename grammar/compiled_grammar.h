// A grammar compiled for one vocabulary: the automaton, and for each byte position the tokens
// decided without the stack below it (xgrammar's adaptive token mask). A token is accepted
// at a position when it is matched within the position's rule (or completes that rule with
// its last byte), rejected when it fails there without leaving it, and context-dependent
// otherwise: only those are walked against the real stack when a mask is made. A position
// inside a counted repeat's unit is classified as if every further iteration were allowed;
// the matcher walks the accepted tokens too where the count left runs shorter than them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "grammar/automaton.h"
#include "grammar/vocabulary.h"

namespace tokenmill::grammar {

struct PositionTokens {
  // When both lists would be larger: a bitmask of the accepted tokens (list is empty).
  std::vector<uint32_t> accepted_mask;
  // Otherwise `list` holds the accepted tokens, or (when fewer) the rejected ones: then every
  // non-empty token in neither list nor dependent is accepted.
  bool list_is_rejected = false;
  std::vector<int32_t> list;
  // Context-dependent tokens in trie (byte) order, and each one's common prefix length with
  // the one before (so a walk reuses the states of the shared prefix).
  std::vector<int32_t> dependent;
  std::vector<uint16_t> dependent_lcp;
  // Inside the unit of a repeat with a maximum: that repeat, the longest accepted token (it
  // completes at most that many iterations), and the accepted tokens in trie order.
  int32_t repeat = -1;
  uint32_t max_accepted_bytes = 0;
  std::vector<int32_t> accepted_in_order;
  std::vector<uint16_t> accepted_lcp;
};

class CompiledGrammar {
 public:
  // Classifies the vocabulary at every byte position of automaton. RESOURCE_EXHAUSTED when
  // that runs past the deadline or the grammar's memory (memory_bytes) past max_bytes.
  static StatusOr<std::shared_ptr<const CompiledGrammar>> Build(
      Automaton automaton, std::shared_ptr<const VocabularyIndex> vocab,
      std::chrono::steady_clock::time_point deadline, int64_t max_bytes);

  const Automaton& automaton() const { return automaton_; }
  const VocabularyIndex& vocab() const { return *vocab_; }
  // For a byte position.
  const PositionTokens& tokens_at(int32_t pos) const { return tables_[table_of_pos_[pos]]; }
  // What this object holds in memory: the automaton, and the token tables (mostly), counted
  // by their vectors' capacities. The vocabulary index is shared and not counted.
  int64_t memory_bytes() const { return memory_bytes_; }

 private:
  CompiledGrammar(Automaton automaton, std::shared_ptr<const VocabularyIndex> vocab)
      : automaton_(std::move(automaton)), vocab_(std::move(vocab)) {}

  Automaton automaton_;
  std::shared_ptr<const VocabularyIndex> vocab_;
  std::vector<int32_t> table_of_pos_;  // -1 for positions that are not byte elements
  std::vector<PositionTokens> tables_;
  int64_t memory_bytes_ = 0;
};

}  // namespace tokenmill::grammar
