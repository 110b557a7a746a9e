#include "engine/sequence_fan_out.h"

#include <iterator>
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
                                   .predicted_token_ids = request.predicted_token_ids});
  }
  return sequences;
}

void SequenceFanOut::Hold(RequestId first_id, std::vector<NewRequest> rest) {
  const int n = static_cast<int>(rest.size()) + 1;
  groups_.emplace(first_id, Group{.n = n, .num_live = n});
  held_.push_back(Held{.first_id = first_id, .sequences = std::move(rest)});
}

std::vector<NewRequest> SequenceFanOut::TakeReleased(const Scheduler& scheduler) {
  std::vector<NewRequest> released;
  for (auto held = held_.begin(); held != held_.end();) {
    const Request* first = scheduler.Find(held->first_id);
    const bool ready = first == nullptr || !prefix_caching_ ||
                       first->num_computed_tokens >= first->num_prompt_tokens;
    if (!ready) {
      ++held;
      continue;
    }
    released.insert(released.end(), std::make_move_iterator(held->sequences.begin()),
                    std::make_move_iterator(held->sequences.end()));
    held = held_.erase(held);
  }
  return released;
}

void SequenceFanOut::DropHeld(RequestId first_id) {
  std::erase_if(held_, [first_id](const Held& held) { return held.first_id == first_id; });
}

int SequenceFanOut::GroupSize(RequestId id) const {
  const auto group = groups_.find(id);
  return group == groups_.end() ? 0 : group->second.n;
}

void SequenceFanOut::SequenceEnded(RequestId first_id) {
  const auto group = groups_.find(first_id);
  if (group != groups_.end() && --group->second.num_live == 0) groups_.erase(group);
}

int SequenceFanOut::num_held() const {
  int num = 0;
  for (const Held& held : held_) num += static_cast<int>(held.sequences.size());
  return num;
}

}  // namespace tokenmill
