// Moves sets of stacks through the automaton: expanding a position until every stack's top
// is a byte element, and advancing a set by one byte. Expansions are memoized by (position,
// stack below), since a mask or a precomputation expands the same ones at every token: call
// ForgetExpansions when the pool drops nodes.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/stack_pool.h"

namespace tokenmill::grammar {

class Stepper {
 public:
  Stepper(const Automaton& automaton, StackPool& pool) : automaton_(automaton), pool_(pool) {}

  // The stacks where the root rule starts, below which is kBottomOfStack.
  void Start(StateSet& out);
  // out = the stacks after `byte` from any stack of in (sorted, unique).
  void Advance(const StateSet& in, uint8_t byte, StateSet& out);
  void ForgetExpansions();

  // A compilation's time limit: an expansion past it stops (nested repeats of patterns that
  // match the empty string, "a+++...", can take exponentially many stacks in one expansion),
  // and timed_out() says the results since are incomplete. No deadline by default.
  void set_deadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }
  bool timed_out() const { return timed_out_; }

 private:
  struct Expansion {
    uint32_t begin, end;  // in expansion_stacks_
    bool accepting, left_scope;
  };

  // Appends what (pos, parent) expands to, from the memo or computed once.
  void AppendExpansion(int32_t pos, int32_t parent, StateSet& out);
  // Adds the stacks that (pos, parent) expands to.
  void Expand(int32_t pos, int32_t parent, StateSet& out);
  // False when (pos, below) was expanded already in this expansion.
  bool FirstVisit(int32_t pos, int32_t below);
  // Queues the unit's alternatives on top of frame.
  void StartIteration(const Repeat& repeat, int32_t frame);
  // The unit below frame matched once more: another iteration and/or what follows the repeat.
  void EndIteration(int32_t frame_id, const StackNode& frame, StateSet& out);
  void Finish(StateSet& out);

  const Automaton& automaton_;
  StackPool& pool_;
  std::vector<std::pair<int32_t, int32_t>> work_;
  std::vector<uint64_t> expanded_;  // rule references expanded in one expansion
  NodeIdMap expansion_ids_;
  std::vector<Expansion> expansions_;
  std::vector<int32_t> expansion_stacks_;
  StateSet scratch_;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  bool timed_out_ = false;
  uint32_t steps_ = 0;  // expansion steps, the clock read every kStepsPerClockRead
};

}  // namespace tokenmill::grammar
