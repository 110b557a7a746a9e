// Beam search (GenerateRequest::beam_search) over the scheduler's paged KV. Each beam is a
// scheduler request under an id of the engine's own range; it samples greedily with the 2n
// most likely tokens' logprobs, and its sampled token is taken back (the request parks)
// until every live beam of its search has its candidates. Then one decision per search,
// vLLM's: the candidates that end (an end-of-generation id unless ignore_eos, or a stop id)
// become finished hypotheses, the n best others the next beams. A beam with several
// successors forks (Scheduler::Fork: its prefix blocks shared by reference, only its partial
// last block copied), one with none is dropped. After max_tokens tokens the n best of all
// hypotheses are the result, best first. Engine thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/generate_request.h"
#include "engine/model_runner.h"
#include "engine/sampling/token_logprobs.h"
#include "scheduler/request.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_output.h"

namespace tokenmill {

// Beams' scheduler ids start here, above any id a client request takes.
inline constexpr RequestId kFirstBeamId = RequestId{1} << 62;

struct BeamHypothesis {
  std::vector<TokenId> token_ids;  // generated, an ending token included
  double cumulative_logprob = 0.0;
  bool ended = false;  // by an end-of-generation or stop id (else by length)
};

// A finished search: its hypotheses, best first (at most n).
struct BeamSearchResult {
  RequestId id = 0;
  int width = 0;
  std::vector<BeamHypothesis> hypotheses;
  int num_cached_prompt_tokens = 0;
};

// vLLM's score: cumulative_logprob / length ** length_penalty, the length counting the
// prompt and not an ending token.
double BeamScore(const BeamHypothesis& hypothesis, int num_prompt_tokens, float length_penalty);

class BeamSearch {
 public:
  explicit BeamSearch(std::vector<TokenId> end_of_generation_ids)
      : end_of_generation_ids_(std::move(end_of_generation_ids)) {}

  // Starts request `id`'s search (request.beam_search set, width request.n, its seed set)
  // under a context of max_model_len tokens; returns its first beam, for the scheduler.
  NewRequest Start(RequestId id, const GenerateRequest& request, int max_model_len,
                   std::chrono::steady_clock::time_point arrival_time);

  bool IsBeam(RequestId scheduler_id) const { return beam_owner_.contains(scheduler_id); }
  // The request whose search runs the beam.
  RequestId RequestOf(RequestId beam_id) const { return beam_owner_.at(beam_id); }
  bool HasSearch(RequestId id) const { return searches_.contains(id); }
  // The width (n) of request `id`'s search; 0 without one.
  int Width(RequestId id) const {
    const auto it = searches_.find(id);
    return it == searches_.end() ? 0 : it->second.width;
  }
  // The live beams' ids of request `id`'s search.
  std::vector<RequestId> BeamIds(RequestId id) const;
  int num_searches() const { return static_cast<int>(searches_.size()); }

  // After the runner sampled: keeps each beam's candidates (the logprobs' top entries) and
  // empties its sampled tokens, so that Update parks it.
  void TakeCandidates(ModelOutput& sampled, const StepLogprobs& logprobs,
                      const Scheduler& scheduler);

  // After Update: decides each search whose live beams all have their candidates (extends,
  // forks and drops beams in `scheduler`); returns the searches that ended, forgotten here.
  std::vector<BeamSearchResult> Decide(Scheduler& scheduler);

  // Ends request `id`'s search: its beams are finished (aborted) in `scheduler`. False when
  // it has none.
  bool Abort(RequestId id, Scheduler& scheduler);

 private:
  // A live beam; its tokens are its scheduler request's.
  struct Beam {
    RequestId id = 0;  // the scheduler's
    double cumulative_logprob = 0.0;
    bool has_candidates = false;
    std::vector<TokenLogprob> candidates;  // most likely first
  };
  struct Search {
    int width = 1;
    float length_penalty = 1.0f;
    int num_prompt_tokens = 0;
    int max_output_tokens = 0;  // max_tokens, or less where the context ends first
    bool ignore_eos = false;
    std::vector<TokenId> stop_token_ids;
    std::vector<Beam> beams;
    int num_output = 0;  // tokens every live beam has generated
    // The best `width` ended hypotheses, best first: only they can be among the result, so
    // the rest are dropped as they come (a long search would otherwise keep every ended
    // candidate of every step, each with its whole output).
    std::vector<BeamHypothesis> finished;
    int num_cached_prompt_tokens = 0;
  };

  bool Ends(const Search& search, TokenId token) const;
  // `search.finished`, stably sorted by score, cut to its width.
  static void KeepBest(Search& search);
  RequestId NewBeamId(RequestId owner);
  // One step of `search`; true when it ended (its beams are then finished in `scheduler`).
  bool Advance(Search& search, Scheduler& scheduler);

  std::vector<TokenId> end_of_generation_ids_;
  std::unordered_map<RequestId, Search> searches_;      // by request id
  std::unordered_map<RequestId, RequestId> beam_owner_;  // beam id -> request id
  RequestId next_beam_id_ = kFirstBeamId;
};

}  // namespace tokenmill
