#include "grammar/stepper.h"

#include <algorithm>

namespace tokenmill::grammar {

void Stepper::Start(StateSet& out) {
  out.stacks.clear();
  out.accepting = out.left_scope = false;
  expanded_.clear();
  for (const int32_t alt : automaton_.rules[automaton_.root].alternatives) {
    Expand(alt, kBottomOfStack, out);
  }
  Finish(out);
}

void Stepper::Advance(const StateSet& in, uint8_t byte, StateSet& out) {
  out.stacks.clear();
  out.accepting = out.left_scope = false;
  int expansions = 0;
  for (const int32_t stack : in.stacks) {
    const StackNode node = pool_.node(stack);
    const Element& e = automaton_.elements[node.pos];
    if (!automaton_.byte_sets[e.arg].Contains(byte)) continue;
    // A star stays where it is (and may also move on); a single byte moves on.
    AppendExpansion(e.kind == ElementKind::kBytesStar ? node.pos : node.pos + 1, node.parent,
                    out);
    ++expansions;
  }
  // One expansion is sorted and unique already (the memo keeps them so).
  if (expansions > 1) Finish(out);
}

void Stepper::ForgetExpansions() {
  expansion_ids_.Clear();
  expansions_.clear();
  expansion_stacks_.clear();
}

void Stepper::AppendExpansion(int32_t pos, int32_t parent, StateSet& out) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) |
                       static_cast<uint32_t>(parent);
  int32_t id = expansion_ids_.Find(key);
  if (id < 0) {
    scratch_.stacks.clear();
    scratch_.accepting = scratch_.left_scope = false;
    expanded_.clear();
    Expand(pos, parent, scratch_);
    Finish(scratch_);
    id = static_cast<int32_t>(expansions_.size());
    const uint32_t begin = static_cast<uint32_t>(expansion_stacks_.size());
    expansion_stacks_.insert(expansion_stacks_.end(), scratch_.stacks.begin(),
                             scratch_.stacks.end());
    expansions_.push_back({begin, static_cast<uint32_t>(expansion_stacks_.size()),
                           scratch_.accepting, scratch_.left_scope});
    expansion_ids_.Insert(key, id);
  }
  const Expansion& x = expansions_[id];
  out.stacks.insert(out.stacks.end(), expansion_stacks_.begin() + x.begin,
                    expansion_stacks_.begin() + x.end);
  out.accepting = out.accepting || x.accepting;
  out.left_scope = out.left_scope || x.left_scope;
}

void Stepper::Expand(int32_t pos, int32_t parent, StateSet& out) {
  work_.clear();
  work_.emplace_back(pos, parent);
  while (!work_.empty()) {
    const auto [p, below] = work_.back();
    work_.pop_back();
    const Element& e = automaton_.elements[p];
    switch (e.kind) {
      case ElementKind::kBytes:
        out.stacks.push_back(pool_.Intern(p, below));
        break;
      case ElementKind::kBytesStar:
        out.stacks.push_back(pool_.Intern(p, below));
        work_.emplace_back(p + 1, below);
        break;
      case ElementKind::kEnd:
        if (below == kBottomOfStack) {
          out.accepting = true;
        } else if (below == kUnknownCaller) {
          out.left_scope = true;
        } else {
          const StackNode caller = pool_.node(below);
          work_.emplace_back(caller.pos, caller.parent);
        }
        break;
      case ElementKind::kRule: {
        const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(p)) << 32) |
                             static_cast<uint32_t>(below);
        if (std::find(expanded_.begin(), expanded_.end(), key) != expanded_.end()) break;
        expanded_.push_back(key);
        // A last reference returns straight to our caller (the stack does not grow).
        const int32_t ret = automaton_.elements[p + 1].kind == ElementKind::kEnd
                                ? below
                                : pool_.Intern(p + 1, below);
        for (const int32_t alt : automaton_.rules[e.arg].alternatives) {
          work_.emplace_back(alt, ret);
        }
        break;
      }
    }
  }
}

void Stepper::Finish(StateSet& out) {
  std::sort(out.stacks.begin(), out.stacks.end());
  out.stacks.erase(std::unique(out.stacks.begin(), out.stacks.end()), out.stacks.end());
}

}  // namespace tokenmill::grammar
