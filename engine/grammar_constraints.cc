#include "engine/grammar_constraints.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace tokenmill {

void GrammarConstraints::Add(RequestId id,
                             std::shared_ptr<const grammar::CompiledGrammar> grammar,
                             std::vector<TokenId> starts_after,
                             std::vector<TokenId> reasoning_opens) {
  TM_CHECK(grammar != nullptr);
  TM_CHECK(reasoning_opens.empty() || !starts_after.empty()) << "an opening without an end";
  Sequence sequence{.grammar = grammar, .matcher = std::nullopt, .starts_after = {},
                    .start = std::nullopt, .tail = {}, .num_seen = 0, .opens = {}, .opened = 0,
                    .grammar_refused = false};
  if (starts_after.empty() || !reasoning_opens.empty()) {
    // Undecided too follows the output from the first token.
    sequence.matcher.emplace(std::move(grammar));
    sequence.start = 0;
  }
  sequence.starts_after = std::move(starts_after);
  sequence.opens = std::move(reasoning_opens);
  sequences_.insert_or_assign(id, std::move(sequence));
}

size_t GrammarConstraints::Decide(Sequence& sequence, std::span<const TokenId> tokens,
                                  bool& dead_end) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const TokenId token = tokens[i];
    ++sequence.num_seen;
    const bool in_grammar = !sequence.grammar_refused && sequence.matcher->AcceptToken(token);
    sequence.grammar_refused = !in_grammar;
    if (sequence.opened < sequence.opens.size() && token == sequence.opens[sequence.opened]) {
      if (++sequence.opened < sequence.opens.size()) continue;
      // The model opened its reasoning: free until starts_after.
      sequence.opens.clear();
      sequence.matcher.reset();
      sequence.start.reset();
      return i + 1;
    }
    dead_end = !in_grammar;
    sequence.opens.clear();  // the grammar's output, from the first token
    return i + 1;
  }
  return tokens.size();
}

size_t GrammarConstraints::WaitForStart(Sequence& sequence, std::span<const TokenId> tokens) {
  if (sequence.start) return 0;
  const size_t n = sequence.starts_after.size();
  for (size_t i = 0; i < tokens.size(); ++i) {
    sequence.tail.push_back(tokens[i]);
    if (sequence.tail.size() > n) sequence.tail.erase(sequence.tail.begin());
    ++sequence.num_seen;
    if (sequence.tail == sequence.starts_after) {
      sequence.start = sequence.num_seen;
      sequence.matcher.emplace(sequence.grammar);
      sequence.tail.clear();
      return i + 1;
    }
  }
  return tokens.size();
}

void GrammarConstraints::Remove(RequestId id) { sequences_.erase(id); }

void GrammarConstraints::Release(RequestId id) {
  if (const auto it = sequences_.find(id); it != sequences_.end()) it->second.matcher.reset();
}

grammar::GrammarMatcher& GrammarConstraints::MatcherOf(const Request& request) {
  const auto it = sequences_.find(request.id);
  TM_CHECK(it != sequences_.end()) << "request " << request.id << " has no grammar";
  Sequence& sequence = it->second;
  TM_CHECK(sequence.start.has_value()) << "request " << request.id << ": grammar not started";
  const size_t start = *sequence.start;
  const bool undecided = !sequence.opens.empty();
  if (!sequence.matcher) {
    sequence.matcher.emplace(sequence.grammar);
    for (const TokenId token : request.output_token_ids().subspan(start)) {
      const bool accepted = sequence.matcher->AcceptToken(token);
      // Undecided, the matcher stopped at the opening's first token the grammar refused.
      if (!accepted && undecided && sequence.grammar_refused) break;
      // Each was sampled under this grammar, so each is accepted.
      TM_CHECK(accepted) << "request " << request.id << ": output token " << token
                         << " leaves its grammar";
    }
  }
  if (!undecided || !sequence.grammar_refused) {
    TM_CHECK_EQ(sequence.matcher->num_accepted_tokens() + start,
                static_cast<size_t>(request.num_output_tokens()));
  }
  return *sequence.matcher;
}

void GrammarConstraints::MaskRow(std::span<float> row, size_t grammar_vocab) {
  if (std::all_of(bitmask_.begin(), bitmask_.end(), [](uint32_t w) { return w == 0; })) {
    for (const TokenId id : end_of_generation_ids_) {
      if (static_cast<size_t>(id) < grammar_vocab) bitmask_[id / 32] |= 1u << (id % 32);
    }
  }
  grammar::MaskLogits(bitmask_, grammar_vocab, row);
}

void GrammarConstraints::MaskRows(const Request& request, std::span<const TokenId> drafts,
                                  std::span<float> logits, size_t n_vocab) {
  TM_CHECK_EQ(logits.size(), (drafts.size() + 1) * n_vocab);
  const auto it = sequences_.find(request.id);
  if (it != sequences_.end() && !it->second.start) {
    // Before its trigger the rows are free, but drafts may complete it.
    MaskPastTrigger(it->second, it->second.tail, drafts, logits, n_vocab);
    return;
  }
  grammar::GrammarMatcher& matcher = MatcherOf(request);
  if (!it->second.opens.empty()) {
    MaskUndecided(it->second, matcher, drafts, logits, n_vocab);
    return;
  }
  MaskWith(matcher, drafts, logits, n_vocab);
}

void GrammarConstraints::MaskWith(grammar::GrammarMatcher& matcher,
                                  std::span<const TokenId> drafts, std::span<float> logits,
                                  size_t n_vocab) {
  bitmask_.resize(grammar::BitmaskWords(matcher.vocab_size()));
  int num_tentative = 0;
  for (size_t k = 0; k <= drafts.size(); ++k) {
    matcher.FillNextTokenMask(bitmask_);
    MaskRow(logits.subspan(k * n_vocab, n_vocab), matcher.vocab_size());
    if (k == drafts.size() || !matcher.AcceptToken(drafts[k])) break;
    ++num_tentative;
  }
  matcher.Rollback(num_tentative);
}

void GrammarConstraints::MaskPastTrigger(const Sequence& sequence, std::vector<TokenId> tail,
                                         std::span<const TokenId> drafts,
                                         std::span<float> logits, size_t n_vocab) {
  const size_t n = sequence.starts_after.size();
  for (size_t j = 0; j < drafts.size(); ++j) {
    tail.push_back(drafts[j]);
    if (tail.size() > n) tail.erase(tail.begin());
    if (tail != sequence.starts_after) continue;
    // The rows after drafts[j] are the grammar's, from its start.
    grammar::GrammarMatcher matcher(sequence.grammar);
    MaskWith(matcher, drafts.subspan(j + 1), logits.subspan((j + 1) * n_vocab), n_vocab);
    return;
  }
}

void GrammarConstraints::MaskUndecided(Sequence& sequence, grammar::GrammarMatcher& matcher,
                                       std::span<const TokenId> drafts, std::span<float> logits,
                                       size_t n_vocab) {
  // Drafts move a copy of the undecided state; the matcher is rolled back after.
  bitmask_.resize(grammar::BitmaskWords(matcher.vocab_size()));
  size_t opened = sequence.opened;
  bool refused = sequence.grammar_refused;
  bool undecided = true;
  int num_tentative = 0;
  for (size_t k = 0; k <= drafts.size(); ++k) {
    if (refused) {
      std::fill(bitmask_.begin(), bitmask_.end(), 0);
    } else {
      matcher.FillNextTokenMask(bitmask_);
    }
    if (undecided) {
      const TokenId next = sequence.opens[opened];
      if (static_cast<size_t>(next) < matcher.vocab_size()) bitmask_[next / 32] |= 1u << (next % 32);
    }
    MaskRow(logits.subspan(k * n_vocab, n_vocab), matcher.vocab_size());
    if (k == drafts.size()) break;
    const TokenId token = drafts[k];
    const bool in_grammar = !refused && matcher.AcceptToken(token);
    num_tentative += in_grammar;
    refused = !in_grammar;
    if (undecided && token == sequence.opens[opened]) {
      if (++opened < sequence.opens.size()) continue;
      // The rows after a completed opening are the reasoning's, up to its end.
      MaskPastTrigger(sequence, {}, drafts.subspan(k + 1), logits.subspan((k + 1) * n_vocab),
                      n_vocab);
      break;
    }
    if (!in_grammar) break;  // a refused draft: masked in its own row
    undecided = false;
  }
  matcher.Rollback(num_tentative);
}

std::optional<size_t> GrammarConstraints::Accept(RequestId id,
                                                 std::span<const TokenId> tokens) {
  const auto it = sequences_.find(id);
  TM_CHECK(it != sequences_.end()) << "request " << id;
  Sequence& sequence = it->second;
  size_t decided = 0;
  if (!sequence.opens.empty()) {
    bool dead_end = false;
    decided = Decide(sequence, tokens, dead_end);
    if (dead_end) {
      spdlog::warn("request {}: no token continues its grammar; ending it", id);
      return decided;
    }
    if (!sequence.opens.empty()) return std::nullopt;  // still undecided
    if (!sequence.start) {
      // The reasoning opened: what follows waits for its end.
      decided += WaitForStart(sequence, tokens.subspan(decided));
      if (decided == tokens.size()) return std::nullopt;
    }
    tokens = tokens.subspan(decided);
  }
  const size_t before = WaitForStart(sequence, tokens);
  if (before == tokens.size()) return std::nullopt;
  TM_CHECK(sequence.matcher) << "request " << id;
  grammar::GrammarMatcher& matcher = *sequence.matcher;
  // Undecided, the first token the grammar took was followed already (by Decide).
  if (decided > 0 && sequence.start == 0u && matcher.IsTerminated()) return decided;
  for (size_t i = before; i < tokens.size(); ++i) {
    // Sampled from a masked row: refused only at a dead end, where the row held EOS alone.
    if (!matcher.AcceptToken(tokens[i])) {
      spdlog::warn("request {}: no token continues its grammar; ending it", id);
      return decided + i + 1;
    }
    if (matcher.IsTerminated()) return decided + i + 1;
  }
  return std::nullopt;
}

}  // namespace tokenmill
