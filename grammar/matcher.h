// One sequence's position in a compiled grammar: which tokens may come next, and the tokens
// accepted so far (undoable, for speculative decoding). Not thread-safe: one thread at a time
// per matcher; the CompiledGrammar it reads is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/stack_pool.h"
#include "grammar/stepper.h"

namespace tokenmill::grammar {

struct PositionTokens;

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // bitmask: BitmaskWords(vocab_size()) words; bit t % 32 of word t / 32 set = token t
  // allowed. EOS tokens are allowed exactly where the grammar can end; nothing is allowed
  // once terminated.
  void FillNextTokenMask(std::span<uint32_t> bitmask) const;
  // False: not allowed here; the state is unchanged.
  bool AcceptToken(int32_t token);
  // Undo the last n accepted tokens (n <= num_accepted_tokens()).
  void Rollback(int n_tokens);
  // The grammar accepts the output so far (EOS allowed).
  bool CanTerminate() const;
  // EOS accepted, or nothing but the end can follow.
  bool IsTerminated() const;

  // Bytes outside the token stream (tests, tools): false and unchanged when not allowed.
  // Not undoable by Rollback.
  bool AcceptBytes(std::string_view bytes);
  int num_accepted_tokens() const { return static_cast<int>(history_.size()) - 1; }
  size_t vocab_size() const;

 private:
  // to = from after bytes; false (to unspecified) when some byte is not allowed.
  bool Advance(const StateSet& from, std::string_view bytes, StateSet& to);
  void ApplyList(const PositionTokens& tokens, std::span<uint32_t> bitmask) const;
  // Inside a repeat's unit with fewer iterations left than the longest accepted token has
  // bytes: the accepted tokens that short, and the longer ones walked against the stack.
  void ApplyCounted(Stepper& stepper, int32_t stack, const PositionTokens& tokens,
                    uint32_t iterations_left, std::span<uint32_t> bitmask) const;
  // Sets the bits of the tokens (in trie order, with their common prefix lengths) of at least
  // min_bytes bytes that the stack accepts.
  void WalkTokens(Stepper& stepper, int32_t stack, std::span<const int32_t> tokens,
                  std::span<const uint16_t> lcp, size_t min_bytes,
                  std::span<uint32_t> bitmask) const;

  std::shared_ptr<const CompiledGrammar> grammar_;
  // The stacks the grammar may be in (StackPool nodes), after each accepted token; the front
  // entry is the start.
  mutable StackPool pool_;
  std::vector<StateSet> history_;
  // Scratch of FillNextTokenMask, kept to reuse its memory.
  mutable std::vector<StateSet> depth_sets_;
  mutable std::vector<uint32_t> all_but_;
  mutable std::vector<uint32_t> counted_;
  mutable std::vector<int32_t> applied_positions_;
};

}  // namespace tokenmill::grammar
