// Structured output in the engine: one GrammarMatcher per constrained sequence (n > 1: one
// each), masking its logits rows before sampling and following the tokens it accepts.
//
// - A row's disallowed tokens get -infinity before the sampler sees the row, so penalties,
//   temperature, top-k/p, min-p and the logprobs all see the masked row (as in vLLM, whose
//   logprobs come from the logits after the grammar's bitmask). EOS is allowed exactly where
//   the grammar can end.
// - Drafts: row k of a request is masked after its verified tokens and drafts[0, k). The
//   first draft the grammar refuses is masked in its own row, so verification rejects it
//   there and never reads the rows after it, which stay unmasked.
// - A grammar state no token can continue (a vocabulary without some byte) leaves the row
//   its end-of-generation tokens, so the sequence ends (finish reason stop) instead of
//   sampling outside the grammar.
// - A preempted sequence drops its matcher (memory, like its KV blocks); the next mask
//   rebuilds it from the sequence's verified output tokens.
// - A constraint may start after given tokens (a reasoning model's "</think>", when the
//   prompt opened the reasoning): until the output holds them its rows are not masked; the
//   matcher follows the output from the token after them. Where drafts complete the
//   trigger, the rows after them are masked by a matcher from the grammar's start.
// - A model that may open its reasoning itself (`reasoning_opens`, "<think>"): while the
//   output is a prefix of the opening, a row allows the opening's next token besides what
//   the grammar allows. Once the output holds the opening the reasoning is free up to
//   `starts_after`; once it leaves it, the grammar has followed it from the first token.
// Engine thread only.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grammar/matcher.h"
#include "scheduler/request.h"

namespace tokenmill {

class GrammarConstraints {
 public:
  explicit GrammarConstraints(std::vector<TokenId> end_of_generation_ids)
      : end_of_generation_ids_(std::move(end_of_generation_ids)) {}

  // `starts_after`: the tokens after which the constraint starts; empty: from the first.
  // `reasoning_opens` (with starts_after): the output may open the reasoning with them.
  void Add(RequestId id, std::shared_ptr<const grammar::CompiledGrammar> grammar,
           std::vector<TokenId> starts_after = {}, std::vector<TokenId> reasoning_opens = {});
  // The sequence ended: forget it.
  void Remove(RequestId id);
  // The sequence was preempted: drop its matcher until it runs again.
  void Release(RequestId id);
  bool Constrains(RequestId id) const { return sequences_.contains(id); }

  // Masks the 1 + drafts.size() rows of `logits` (n_vocab floats each) of `request`, a
  // constrained sequence, as the top comment says.
  void MaskRows(const Request& request, std::span<const TokenId> drafts, std::span<float> logits,
                size_t n_vocab);
  // Follows the tokens sampled from the rows MaskRows masked. Where the grammar ends (EOS
  // accepted, nothing may follow, or a dead end) the sequence is finished: returns how many
  // of `tokens` it keeps, up to the one that ended it (a token sampled after it, from a
  // draft's row, is dropped, so the output is plain decoding's). None while it goes on.
  std::optional<size_t> Accept(RequestId id, std::span<const TokenId> tokens);

 private:
  struct Sequence {
    std::shared_ptr<const grammar::CompiledGrammar> grammar;
    std::optional<grammar::GrammarMatcher> matcher;  // none after a preemption, or not started
    std::vector<TokenId> starts_after;
    // Output tokens before the constraint started; none while waiting for starts_after.
    std::optional<size_t> start;
    std::vector<TokenId> tail;  // the last output tokens, while waiting
    size_t num_seen = 0;        // output tokens seen while waiting or undecided
    // Undecided (the output so far is a prefix of the reasoning's opening): the opening, how
    // much of it the output holds, and whether the grammar refused one of its tokens (the
    // matcher then stops there). Empty once decided.
    std::vector<TokenId> opens;
    size_t opened = 0;
    bool grammar_refused = false;
  };

  // Follows `tokens` while waiting for the trigger; returns how many of them came before
  // the constraint started (all of them while it waits).
  size_t WaitForStart(Sequence& sequence, std::span<const TokenId> tokens);
  // Follows `tokens` while undecided; returns how many it took (the rest are the grammar's,
  // or the reasoning's). dead_end: the last one taken is neither the opening's nor the
  // grammar's (a row that allowed only end-of-generation).
  size_t Decide(Sequence& sequence, std::span<const TokenId> tokens, bool& dead_end);
  // MaskRows while undecided.
  void MaskUndecided(Sequence& sequence, grammar::GrammarMatcher& matcher,
                     std::span<const TokenId> drafts, std::span<float> logits, size_t n_vocab);
  // Masks row 0 by matcher and row k by matcher after drafts[0, k), up to the first draft
  // it refuses.
  void MaskWith(grammar::GrammarMatcher& matcher, std::span<const TokenId> drafts,
                std::span<float> logits, size_t n_vocab);
  // Waiting for the trigger, with `tail` the output's last tokens: masks the rows after the
  // draft that completes it, if one does.
  void MaskPastTrigger(const Sequence& sequence, std::vector<TokenId> tail,
                       std::span<const TokenId> drafts, std::span<float> logits, size_t n_vocab);
  // Masks row by bitmask_ (the end-of-generation tokens where it allows nothing).
  void MaskRow(std::span<float> row, size_t grammar_vocab);

  // The matcher of `request`, rebuilt from its output tokens when it was released.
  grammar::GrammarMatcher& MatcherOf(const Request& request);

  const std::vector<TokenId> end_of_generation_ids_;
  std::unordered_map<RequestId, Sequence> sequences_;
  std::vector<uint32_t> bitmask_;  // scratch, one row's
};

}  // namespace tokenmill
