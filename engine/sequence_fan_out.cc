#include "engine/sequence_fan_out.h"

#include <utility>

namespace tokenmill {

std::vector<NewRequest> SplitIntoSequences(RequestId id, const GenerateRequest& request,
                                           std::chrono::steady_clock::time_point arrival_time) {
  std::vector<NewRequest> sequences;
  for (int i = 0; i < request.n; ++i) {
    SamplingParams sampling = request.sampling;
    sampling.sequence_index += i;
    // Sequence 0 reports the prompt's logprobs; the others may read its cached blocks.
    if (i > 0) sampling.prompt_logprobs.reset();
    sequences.push_back(NewRequest{.id = id + static_cast<RequestId>(i),
                                   .prompt_token_ids = request.prompt_token_ids,
                                   .sampling = std::move(sampling),
                                   .priority = request.priority,
                                   .tenant = request.tenant,
                                   .cache_salt = request.cache_salt,
                                   .arrival_time = arrival_time,
                                   .kv_window = request.kv_window,
                                   .predicted_token_ids = request.predicted_token_ids,
                                   .prompt_use = request.embedding
                                                     ? PromptUseOf(request.embedding->pooling)
                                                     : PromptUse::kGenerate,
                                   .lora = request.lora});
  }
  return sequences;
}

void SequenceFanOut::AddGroup(RequestId first_id, int n) {
  groups_.emplace(first_id, Group{.n = n, .num_live = n});
}

int SequenceFanOut::GroupSize(RequestId id) const {
  const auto group = groups_.find(id);
  return group == groups_.end() ? 0 : group->second.n;
}

void SequenceFanOut::SequenceEnded(RequestId first_id) {
  const auto group = groups_.find(first_id);
  if (group != groups_.end() && --group->second.num_live == 0) groups_.erase(group);
}

}  // namespace tokenmill
