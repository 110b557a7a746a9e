#include "grammar/matcher.h"

#include <algorithm>
#include <climits>
#include <string>

#include "common/check.h"
#include "grammar/compiled_grammar.h"
#include "grammar/stepper.h"

namespace tokenmill::grammar {
namespace {

void SetBit(std::span<uint32_t> mask, int32_t t) { mask[t / 32] |= uint32_t{1} << (t % 32); }
void ClearBit(std::span<uint32_t> mask, int32_t t) { mask[t / 32] &= ~(uint32_t{1} << (t % 32)); }
bool GetBit(std::span<const uint32_t> mask, int32_t t) { return (mask[t / 32] >> (t % 32)) & 1; }

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)) {
  TM_CHECK(grammar_ != nullptr);
  StateSet start;
  Stepper(grammar_->automaton(), pool_).Start(start);
  history_.push_back(std::move(start));
}

size_t GrammarMatcher::vocab_size() const { return grammar_->vocab().size(); }

bool GrammarMatcher::CanTerminate() const { return history_.back().accepting; }

bool GrammarMatcher::IsTerminated() const { return history_.back().stacks.empty(); }

bool GrammarMatcher::Advance(const StateSet& from, std::string_view bytes, StateSet& to) {
  Stepper stepper(grammar_->automaton(), pool_);
  StateSet scratch;
  const StateSet* current = &from;
  for (const char c : bytes) {
    stepper.Advance(*current, static_cast<uint8_t>(c), scratch);
    if (scratch.empty()) return false;
    std::swap(to, scratch);
    current = &to;
  }
  if (bytes.empty()) to = from;
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t token) {
  const VocabularyIndex& vocab = grammar_->vocab();
  TM_CHECK(token >= 0 && static_cast<size_t>(token) < vocab.size()) << "token " << token;
  const StateSet& current = history_.back();
  if (vocab.is_eos(token)) {
    if (!current.accepting) return false;
    history_.emplace_back();  // terminated: nothing follows
    return true;
  }
  const std::string& bytes = vocab.token(token);
  if (bytes.empty()) return false;
  StateSet next;
  if (!Advance(current, bytes, next)) return false;
  history_.push_back(std::move(next));
  return true;
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  StateSet next;
  if (!Advance(history_.back(), bytes, next)) return false;
  history_.back() = std::move(next);
  return true;
}

void GrammarMatcher::Rollback(int n_tokens) {
  TM_CHECK(n_tokens >= 0 && n_tokens <= num_accepted_tokens())
      << "rollback of " << n_tokens << " tokens, " << num_accepted_tokens() << " accepted";
  history_.resize(history_.size() - static_cast<size_t>(n_tokens));
}

void GrammarMatcher::FillNextTokenMask(std::span<uint32_t> bitmask) const {
  const VocabularyIndex& vocab = grammar_->vocab();
  TM_CHECK_EQ(bitmask.size(), BitmaskWords(vocab.size()));
  std::fill(bitmask.begin(), bitmask.end(), 0);
  const StateSet& current = history_.back();
  pool_.BeginScratch();
  Stepper stepper(grammar_->automaton(), pool_);
  int32_t previous_pos = -1;
  // Stacks are sorted by id, not position: remember which positions' lists are applied.
  applied_positions_.clear();
  for (const int32_t stack : current.stacks) {
    const StackNode node = pool_.node(stack);
    const PositionTokens& tokens = grammar_->tokens_at(node.pos);
    if (tokens.repeat >= 0) {
      const StackNode frame = pool_.node(node.parent);
      TM_CHECK(frame.is_frame() && frame.count >= 0) << "unit position without its frame";
      const uint32_t left =
          static_cast<uint32_t>(grammar_->automaton().repeats[tokens.repeat].max - frame.count);
      if (tokens.max_accepted_bytes >= left) {
        ApplyCounted(stepper, stack, tokens, left, bitmask);
        WalkTokens(stepper, stack, tokens.dependent, tokens.dependent_lcp, 0, bitmask);
        continue;
      }
    }
    if (node.pos != previous_pos &&
        std::find(applied_positions_.begin(), applied_positions_.end(), node.pos) ==
            applied_positions_.end()) {
      applied_positions_.push_back(node.pos);
      ApplyList(tokens, bitmask);
    }
    previous_pos = node.pos;
    WalkTokens(stepper, stack, tokens.dependent, tokens.dependent_lcp, 0, bitmask);
  }
  pool_.EndScratch();
  for (const auto& [dup, first] : vocab.duplicates()) {
    if (GetBit(bitmask, first)) SetBit(bitmask, dup);
  }
  for (const int32_t eos : vocab.vocabulary().eos_tokens) {
    if (current.accepting) {
      SetBit(bitmask, eos);
    } else {
      ClearBit(bitmask, eos);
    }
  }
}

void GrammarMatcher::ApplyList(const PositionTokens& tokens, std::span<uint32_t> bitmask) const {
  if (!tokens.accepted_mask.empty()) {
    for (size_t w = 0; w < bitmask.size(); ++w) bitmask[w] |= tokens.accepted_mask[w];
    return;
  }
  if (!tokens.list_is_rejected) {
    for (const int32_t t : tokens.list) SetBit(bitmask, t);
    return;
  }
  const std::vector<uint32_t>& nonempty = grammar_->vocab().nonempty_mask();
  all_but_.assign(nonempty.begin(), nonempty.end());
  for (const int32_t t : tokens.list) ClearBit(all_but_, t);
  for (const int32_t t : tokens.dependent) ClearBit(all_but_, t);
  // Duplicates get their bits from the token they repeat.
  for (const auto& [dup, first] : grammar_->vocab().duplicates()) ClearBit(all_but_, dup);
  for (size_t w = 0; w < bitmask.size(); ++w) bitmask[w] |= all_but_[w];
}

void GrammarMatcher::ApplyCounted(Stepper& stepper, int32_t stack, const PositionTokens& tokens,
                                  uint32_t iterations_left, std::span<uint32_t> bitmask) const {
  counted_.assign(bitmask.size(), 0);
  ApplyList(tokens, counted_);
  const VocabularyIndex& vocab = grammar_->vocab();
  for (const int32_t t : tokens.accepted_in_order) {
    if (vocab.token(t).size() >= iterations_left) ClearBit(counted_, t);
  }
  for (size_t w = 0; w < bitmask.size(); ++w) bitmask[w] |= counted_[w];
  WalkTokens(stepper, stack, tokens.accepted_in_order, tokens.accepted_lcp, iterations_left,
             bitmask);
}

void GrammarMatcher::WalkTokens(Stepper& stepper, int32_t stack, std::span<const int32_t> tokens,
                                std::span<const uint16_t> lcp, size_t min_bytes,
                                std::span<uint32_t> bitmask) const {
  const VocabularyIndex& vocab = grammar_->vocab();
  if (depth_sets_.empty()) depth_sets_.resize(1);
  depth_sets_[0].stacks.assign(1, stack);
  depth_sets_[0].accepting = false;
  size_t valid = 0;            // depth_sets_[0..valid] hold the previous token's prefix
  size_t dead_at = SIZE_MAX;   // the previous prefix died at this depth
  for (size_t k = 0; k < tokens.size(); ++k) {
    const int32_t t = tokens[k];
    const size_t common = lcp[k];
    valid = std::min(valid, common);
    if (dead_at <= common) continue;  // shares the prefix that died
    dead_at = SIZE_MAX;
    if (GetBit(bitmask, t)) continue;
    const std::string& bytes = vocab.token(t);
    if (bytes.size() < min_bytes) continue;
    if (depth_sets_.size() < bytes.size() + 1) depth_sets_.resize(bytes.size() + 1);
    size_t d = valid;
    while (d < bytes.size()) {
      stepper.Advance(depth_sets_[d], static_cast<uint8_t>(bytes[d]), depth_sets_[d + 1]);
      ++d;
      if (depth_sets_[d].empty()) break;
    }
    valid = d;
    if (depth_sets_[d].empty()) {
      dead_at = d;
    } else {
      SetBit(bitmask, t);
    }
  }
}

}  // namespace tokenmill::grammar
