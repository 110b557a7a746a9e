#include "engine/speculative/speculator.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace tokenmill {

Speculator::Speculator(const SpecConfig& config, std::unique_ptr<DraftProposer> proposer)
    : config_(config), proposer_(std::move(proposer)) {
  TM_CHECK(proposer_ != nullptr);
}

Status Speculator::AfterStep(const SchedulerOutput& step, const Scheduler& scheduler,
                             ModelOutput& sampled) {
  for (const RequestId id : step.finished_ids) {
    adaptive_.erase(id);
    proposer_->Forget(id);
  }
  for (const RequestId id : step.preempted_ids) proposer_->Forget(id);
  std::unordered_map<RequestId, const ScheduledRequest*> scheduled;
  for (const ScheduledRequest& r : step.requests) {
    if (r.first_scheduled) proposer_->Forget(r.id);
    scheduled.emplace(r.id, &r);
  }
  for (const SampledTokens& s : sampled.requests) {
    const int num_drafts = scheduled.at(s.id)->num_draft_tokens;
    if (num_drafts == 0) continue;
    const int accepted = static_cast<int>(s.token_ids.size()) - 1;
    ++stats_.num_drafts;
    stats_.num_draft_tokens += num_drafts;
    stats_.num_accepted_tokens += accepted;
    adaptive_[s.id].Observe(num_drafts, accepted);
  }

  draft_probs_.clear();  // the step just verified used them
  const std::vector<int> num_drafts = PlanDrafts(step, scheduler, sampled);
  std::vector<std::vector<TokenId>> contexts;
  contexts.reserve(sampled.requests.size());  // the spans below point into it
  std::vector<ProposalRequest> requests;
  std::vector<size_t> sampled_index;
  for (size_t i = 0; i < sampled.requests.size(); ++i) {
    if (num_drafts[i] == 0) continue;
    const SampledTokens& s = sampled.requests[i];
    const Request* request = scheduler.Find(s.id);
    TM_CHECK(request != nullptr) << "sampled request " << s.id << " is not live";
    std::vector<TokenId>& context = contexts.emplace_back(request->token_ids);
    context.insert(context.end(), s.token_ids.begin(), s.token_ids.end());
    requests.push_back(ProposalRequest{.id = s.id,
                                       .token_ids = context,
                                       .num_drafts = num_drafts[i],
                                       .sampling = &request->sampling,
                                       .num_prompt_tokens = request->num_prompt_tokens,
                                       .block_table = scheduled.at(s.id)->block_table,
                                       .predicted_token_ids = request->predicted_token_ids});
    sampled_index.push_back(i);
  }
  if (requests.empty()) return OkStatus();
  TM_ASSIGN_OR_RETURN(std::vector<Proposal> proposals, proposer_->Propose(requests));
  TM_CHECK_EQ(proposals.size(), requests.size());
  for (size_t j = 0; j < proposals.size(); ++j) {
    std::vector<TokenId>& drafts = proposals[j].token_ids;
    TM_CHECK_LE(static_cast<int>(drafts.size()), requests[j].num_drafts);
    if (!proposals[j].probs.empty()) draft_probs_[requests[j].id] = std::move(proposals[j].probs);
    sampled.requests[sampled_index[j]].next_draft_token_ids = std::move(drafts);
  }
  return OkStatus();
}

std::vector<int> Speculator::PlanDrafts(const SchedulerOutput& /*step*/,
                                        const Scheduler& scheduler, const ModelOutput& sampled) {
  std::vector<int> num_drafts(sampled.requests.size(), 0);
  const int num_rows = static_cast<int>(sampled.requests.size());  // one each, drafts aside
  int total = num_rows;
  for (size_t i = 0; i < sampled.requests.size(); ++i) {
    const SampledTokens& s = sampled.requests[i];
    const Request* request = scheduler.Find(s.id);
    if (request == nullptr) continue;
    // Drafts past max_tokens would be verified for nothing: the request stops before them.
    const int left = request->sampling.max_tokens - request->num_output_tokens() -
                     static_cast<int>(s.token_ids.size());
    num_drafts[i] = std::min(
        adaptive_[s.id].Next(config_.num_speculative_tokens, config_.row_cost, num_rows),
        std::max(0, left - 1));
    total += num_drafts[i];
  }
  if (total > config_.max_batch_rows) {
    // A large batch: a step's cost now grows with its rows, so drafts shrink evenly, down
    // to none once each request would get less than one.
    const int cap = config_.max_batch_rows / std::max(1, num_rows) - 1;
    for (int& k : num_drafts) k = std::max(0, std::min(k, cap));
  }
  return num_drafts;
}

}  // namespace tokenmill
