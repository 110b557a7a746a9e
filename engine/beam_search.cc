#include "engine/beam_search.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/check.h"
#include "engine/sequence_fan_out.h"

namespace tokenmill {

double BeamScore(const BeamHypothesis& hypothesis, int num_prompt_tokens, float length_penalty) {
  const int length = num_prompt_tokens + static_cast<int>(hypothesis.token_ids.size()) -
                     (hypothesis.ended ? 1 : 0);
  return hypothesis.cumulative_logprob /
         std::pow(static_cast<double>(length), static_cast<double>(length_penalty));
}

NewRequest BeamSearch::Start(RequestId id, const GenerateRequest& request, int max_model_len,
                             std::chrono::steady_clock::time_point arrival_time) {
  TM_CHECK(request.beam_search.has_value() && !searches_.contains(id));
  NewRequest first = std::move(SplitIntoSequences(id, request, arrival_time)[0]);
  first.id = NewBeamId(id);
  // The 2n most likely tokens of each beam are its candidates.
  first.sampling.logprobs = true;
  first.sampling.top_logprobs = 2 * request.n;
  Search search;
  search.width = request.n;
  search.length_penalty = request.beam_search->length_penalty;
  search.num_prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
  search.max_output_tokens =
      std::min(request.sampling.max_tokens, max_model_len - search.num_prompt_tokens);
  search.ignore_eos = request.sampling.ignore_eos;
  search.stop_token_ids = request.sampling.stop_token_ids;
  Beam beam;
  beam.id = first.id;
  search.beams.push_back(std::move(beam));
  searches_.emplace(id, std::move(search));
  return first;
}

RequestId BeamSearch::NewBeamId(RequestId owner) {
  const RequestId id = next_beam_id_++;
  beam_owner_.emplace(id, owner);
  return id;
}

std::vector<RequestId> BeamSearch::BeamIds(RequestId id) const {
  std::vector<RequestId> ids;
  const auto it = searches_.find(id);
  if (it == searches_.end()) return ids;
  for (const Beam& beam : it->second.beams) ids.push_back(beam.id);
  return ids;
}

bool BeamSearch::Ends(const Search& search, TokenId token) const {
  const auto contains = [token](const std::vector<TokenId>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  return (!search.ignore_eos && contains(end_of_generation_ids_)) ||
         contains(search.stop_token_ids);
}

void BeamSearch::TakeCandidates(ModelOutput& sampled, const StepLogprobs& logprobs,
                                const Scheduler& scheduler) {
  for (SampledTokens& tokens : sampled.requests) {
    const auto owner = beam_owner_.find(tokens.id);
    if (owner == beam_owner_.end()) continue;
    Search& search = searches_.at(owner->second);
    const auto beam = std::find_if(search.beams.begin(), search.beams.end(),
                                   [&](const Beam& b) { return b.id == tokens.id; });
    TM_CHECK(beam != search.beams.end()) << "beam " << tokens.id << " is not live";
    const Request* request = scheduler.Find(tokens.id);
    TM_CHECK(request != nullptr);
    // A beam recomputed after a preemption may bring its candidates again: the same ones.
    if (!beam->has_candidates && request->num_output_tokens() == search.num_output) {
      beam->candidates = logprobs.at(tokens.id).back().top;
      beam->has_candidates = true;
    }
    tokens.token_ids.clear();
    tokens.next_draft_token_ids.clear();
  }
}

std::vector<BeamSearchResult> BeamSearch::Decide(Scheduler& scheduler) {
  std::vector<BeamSearchResult> results;
  for (auto it = searches_.begin(); it != searches_.end();) {
    Search& search = it->second;
    const bool ready = std::all_of(search.beams.begin(), search.beams.end(),
                                   [](const Beam& b) { return b.has_candidates; });
    if (!ready || !Advance(search, scheduler)) {
      ++it;
      continue;
    }
    BeamSearchResult result{.id = it->first,
                            .width = search.width,
                            .hypotheses = std::move(search.finished),
                            .num_cached_prompt_tokens = search.num_cached_prompt_tokens};
    for (const Beam& beam : search.beams) beam_owner_.erase(beam.id);
    results.push_back(std::move(result));
    it = searches_.erase(it);
  }
  return results;
}

void BeamSearch::KeepBest(Search& search) {
  std::stable_sort(search.finished.begin(), search.finished.end(),
                   [&](const BeamHypothesis& a, const BeamHypothesis& b) {
                     return BeamScore(a, search.num_prompt_tokens, search.length_penalty) >
                            BeamScore(b, search.num_prompt_tokens, search.length_penalty);
                   });
  if (search.finished.size() > static_cast<size_t>(search.width)) {
    search.finished.resize(static_cast<size_t>(search.width));
  }
}

bool BeamSearch::Advance(Search& search, Scheduler& scheduler) {
  struct Candidate {
    size_t parent;
    TokenId token;
    double cumulative_logprob;
    double score;
  };
  // A beam's output followed by `token`, as a hypothesis.
  const auto hypothesis = [&](const Beam& beam, TokenId token, double cumulative, bool ended) {
    const Request* request = scheduler.Find(beam.id);
    TM_CHECK(request != nullptr) << "beam " << beam.id << " is not in the scheduler";
    BeamHypothesis h{.token_ids = {}, .cumulative_logprob = cumulative, .ended = ended};
    h.token_ids.assign(request->output_token_ids().begin(), request->output_token_ids().end());
    h.token_ids.push_back(token);
    return h;
  };
  const int length = search.num_prompt_tokens + search.num_output + 1;
  const double divisor =
      std::pow(static_cast<double>(length), static_cast<double>(search.length_penalty));
  std::vector<Candidate> candidates;
  for (size_t b = 0; b < search.beams.size(); ++b) {
    const Beam& beam = search.beams[b];
    if (const Request* request = scheduler.Find(beam.id)) {
      search.num_cached_prompt_tokens =
          std::max(search.num_cached_prompt_tokens, request->num_cached_prompt_tokens);
    }
    for (const TokenLogprob& c : beam.candidates) {
      const double cumulative = beam.cumulative_logprob + static_cast<double>(c.logprob);
      if (Ends(search, c.token_id)) {
        search.finished.push_back(hypothesis(beam, c.token_id, cumulative, /*ended=*/true));
      } else {
        candidates.push_back(Candidate{b, c.token_id, cumulative, cumulative / divisor});
      }
    }
  }
  // Best first; equal scores keep their order (Python's stable sort, as vLLM's).
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
  if (candidates.size() > static_cast<size_t>(search.width)) {
    candidates.resize(static_cast<size_t>(search.width));
  }
  const bool last = length - search.num_prompt_tokens >= search.max_output_tokens;
  if (last || candidates.empty()) {
    for (const Candidate& c : candidates) {
      search.finished.push_back(hypothesis(search.beams[c.parent], c.token,
                                           c.cumulative_logprob, /*ended=*/false));
    }
    for (const Beam& beam : search.beams) {
      const Status status = scheduler.FinishRequest(beam.id, FinishReason::kStop);
      TM_CHECK(status.ok()) << status.ToString();
    }
    KeepBest(search);
    return true;
  }
  // Pruned after the beams' ended candidates joined: the same result as at the end, as an
  // ended hypothesis behind `width` better ones stays behind them.
  KeepBest(search);

  // Dropped beams go first (their blocks may serve the forks' copies), then each parent forks
  // its extra successors from its tokens as they are, then takes its first successor's token.
  std::vector<std::vector<const Candidate*>> successors(search.beams.size());
  for (const Candidate& c : candidates) successors[c.parent].push_back(&c);
  for (size_t b = 0; b < search.beams.size(); ++b) {
    if (!successors[b].empty()) continue;
    const Status status = scheduler.FinishRequest(search.beams[b].id, FinishReason::kStop);
    TM_CHECK(status.ok()) << status.ToString();
    beam_owner_.erase(search.beams[b].id);
  }
  const RequestId owner = beam_owner_.at(search.beams[candidates[0].parent].id);
  std::vector<Beam> next;
  for (const Candidate& c : candidates) {
    const Beam& parent = search.beams[c.parent];
    const bool first = successors[c.parent].front() == &c;
    Beam beam;
    beam.id = first ? parent.id : NewBeamId(owner);
    beam.cumulative_logprob = c.cumulative_logprob;
    if (!first) {
      const Status status = scheduler.Fork(parent.id, beam.id);
      TM_CHECK(status.ok()) << status.ToString();
    }
    next.push_back(std::move(beam));
  }
  // The forks copied their parents' tokens; now every successor takes its own.
  for (size_t i = 0; i < next.size(); ++i) {
    const StatusOr<std::optional<FinishReason>> stopped =
        scheduler.Extend(next[i].id, candidates[i].token);
    TM_CHECK(stopped.ok()) << stopped.status().ToString();
    TM_CHECK(!stopped->has_value()) << "beam " << next[i].id << " stopped inside its search";
  }
  search.beams = std::move(next);
  ++search.num_output;
  return false;
}

bool BeamSearch::Abort(RequestId id, Scheduler& scheduler) {
  const auto it = searches_.find(id);
  if (it == searches_.end()) return false;
  for (const Beam& beam : it->second.beams) {
    if (scheduler.Find(beam.id) != nullptr) {
      const Status status = scheduler.Abort(beam.id);
      TM_CHECK(status.ok()) << status.ToString();
    }
    beam_owner_.erase(beam.id);
  }
  searches_.erase(it);
  return true;
}

}  // namespace tokenmill
