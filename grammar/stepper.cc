#include "grammar/stepper.h"

#include <algorithm>

namespace tokenmill::grammar {
namespace {

constexpr uint32_t kStepsPerClockRead = 4096;  // a clock read per ~4096 cheap steps

}  // namespace

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
  const NodeKey key{pos, parent, 0};
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
    if (++steps_ % kStepsPerClockRead == 0 && std::chrono::steady_clock::now() > deadline_) {
      timed_out_ = true;
      work_.clear();
      break;
    }
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
        } else if (const StackNode caller = pool_.node(below); caller.is_frame()) {
          EndIteration(below, caller, out);
        } else {
          work_.emplace_back(caller.pos, caller.parent);
        }
        break;
      case ElementKind::kRule: {
        if (!FirstVisit(p, below)) break;
        // A last reference returns straight to our caller (the stack does not grow).
        const int32_t ret = automaton_.elements[p + 1].kind == ElementKind::kEnd
                                ? below
                                : pool_.Intern(p + 1, below);
        for (const int32_t alt : automaton_.rules[e.arg].alternatives) {
          work_.emplace_back(alt, ret);
        }
        break;
      }
      case ElementKind::kRepeat: {
        if (!FirstVisit(p, below)) break;
        const Repeat& repeat = automaton_.repeats[e.arg];
        StartIteration(repeat, pool_.Intern(p, below, 0));
        if (repeat.min == 0) work_.emplace_back(p + 1, below);
        break;
      }
    }
  }
}

bool Stepper::FirstVisit(int32_t pos, int32_t below) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) |
                       static_cast<uint32_t>(below);
  if (std::find(expanded_.begin(), expanded_.end(), key) != expanded_.end()) return false;
  expanded_.push_back(key);
  return true;
}

void Stepper::StartIteration(const Repeat& repeat, int32_t frame) {
  // Keyed apart from the rule references (no element is at position -3).
  if (!FirstVisit(-3, frame)) return;
  for (const int32_t alt : automaton_.rules[repeat.unit].alternatives) {
    work_.emplace_back(alt, frame);
  }
}

void Stepper::EndIteration(int32_t frame_id, const StackNode& frame, StateSet& out) {
  const Repeat& repeat = automaton_.repeats[automaton_.elements[frame.pos].arg];
  if (frame.count == kAnyCount) {
    // A precomputation: as many more iterations as wanted, and leaving is up to the caller.
    StartIteration(repeat, frame_id);
    out.left_scope = true;
    return;
  }
  const int32_t done = frame.count + 1;
  if (repeat.max == kUnboundedRepeat) {
    StartIteration(repeat, pool_.Intern(frame.pos, frame.parent, std::min(done, repeat.min)));
  } else if (done < repeat.max) {
    StartIteration(repeat, pool_.Intern(frame.pos, frame.parent, done));
  }
  if (done >= repeat.min) work_.emplace_back(frame.pos + 1, frame.parent);
}

void Stepper::Finish(StateSet& out) {
  std::sort(out.stacks.begin(), out.stacks.end());
  out.stacks.erase(std::unique(out.stacks.begin(), out.stacks.end()), out.stacks.end());
}

}  // namespace tokenmill::grammar
