#include "engine/grammar_constraints.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "common/check.h"

namespace tokenmill {

void GrammarConstraints::Add(RequestId id,
                             std::shared_ptr<const grammar::CompiledGrammar> grammar,
                             std::vector<TokenId> starts_after) {
  TM_CHECK(grammar != nullptr);
  Sequence sequence{.grammar = grammar, .matcher = std::nullopt, .starts_after = {},
                    .start = std::nullopt, .tail = {}, .num_seen = 0};
  if (starts_after.empty()) {
    sequence.matcher.emplace(std::move(grammar));
    sequence.start = 0;
  } else {
    sequence.starts_after = std::move(starts_after);
  }
  sequences_.insert_or_assign(id, std::move(sequence));
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
  if (!sequence.matcher) {
    sequence.matcher.emplace(sequence.grammar);
    for (const TokenId token : request.output_token_ids().subspan(start)) {
      // Each was sampled under this grammar, so each is accepted.
      TM_CHECK(sequence.matcher->AcceptToken(token))
          << "request " << request.id << ": output token " << token << " leaves its grammar";
    }
  }
  TM_CHECK_EQ(sequence.matcher->num_accepted_tokens() + start,
              static_cast<size_t>(request.num_output_tokens()));
  return *sequence.matcher;
}

void GrammarConstraints::MaskRows(const Request& request, std::span<const TokenId> drafts,
                                  std::span<float> logits, size_t n_vocab) {
  TM_CHECK_EQ(logits.size(), (drafts.size() + 1) * n_vocab);
  const auto it = sequences_.find(request.id);
  if (it != sequences_.end() && !it->second.start) return;  // before its trigger: free
  grammar::GrammarMatcher& matcher = MatcherOf(request);
  const size_t grammar_vocab = matcher.vocab_size();
  bitmask_.resize(grammar::BitmaskWords(grammar_vocab));
  int num_tentative = 0;
  for (size_t k = 0; k <= drafts.size(); ++k) {
    matcher.FillNextTokenMask(bitmask_);
    if (std::all_of(bitmask_.begin(), bitmask_.end(), [](uint32_t w) { return w == 0; })) {
      for (const TokenId id : end_of_generation_ids_) {
        if (static_cast<size_t>(id) < grammar_vocab) bitmask_[id / 32] |= 1u << (id % 32);
      }
    }
    std::span<float> row = logits.subspan(k * n_vocab, n_vocab);
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    for (size_t t = 0; t < n_vocab; ++t) {
      // Ids past the tokenizer's (padding rows of the output matrix) are never text.
      if (t >= grammar_vocab || ((bitmask_[t / 32] >> (t % 32)) & 1u) == 0) row[t] = kMasked;
    }
    if (k == drafts.size() || !matcher.AcceptToken(drafts[k])) break;
    ++num_tentative;
  }
  matcher.Rollback(num_tentative);
}

std::optional<size_t> GrammarConstraints::Accept(RequestId id,
                                                 std::span<const TokenId> tokens) {
  const auto it = sequences_.find(id);
  TM_CHECK(it != sequences_.end()) << "request " << id;
  const size_t before = WaitForStart(it->second, tokens);
  if (before == tokens.size()) return std::nullopt;
  TM_CHECK(it->second.matcher) << "request " << id;
  grammar::GrammarMatcher& matcher = *it->second.matcher;
  for (size_t i = before; i < tokens.size(); ++i) {
    // Sampled from a masked row: refused only at a dead end, where the row held EOS alone.
    if (!matcher.AcceptToken(tokens[i])) {
      spdlog::warn("request {}: no token continues its grammar; ending it", id);
      return i + 1;
    }
    if (matcher.IsTerminated()) return i + 1;
  }
  return std::nullopt;
}

}  // namespace tokenmill
