#include "tests/scheduler/scheduler_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>

namespace tokenmill::testing {
namespace {

std::string EndName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "len";
    case FinishReason::kAbort: return "abort";
  }
  return "?";
}

std::string StateLetter(RequestState state) {
  switch (state) {
    case RequestState::kWaiting: return "W";
    case RequestState::kRunning: return "R";
    case RequestState::kPreempted: return "P";
    default: return "finished?";  // finished requests are not live
  }
}

}  // namespace

NewRequest MakeRequest(RequestId id, std::vector<TokenId> prompt, int max_tokens, int priority) {
  NewRequest request;
  request.id = id;
  request.prompt_token_ids = std::move(prompt);
  request.sampling.max_tokens = max_tokens;
  request.priority = priority;
  return request;
}

NewRequest MakeRequest(RequestId id, int prompt_length, int max_tokens, int priority) {
  std::vector<TokenId> prompt;
  for (int i = 0; i < prompt_length; ++i) {
    prompt.push_back(static_cast<TokenId>((id * 37 + i * 11) % kVocabSize));
  }
  return MakeRequest(id, std::move(prompt), max_tokens, priority);
}

KvCacheConfig MakeCacheConfig(int num_blocks, int block_size, int watermark_blocks) {
  KvCacheConfig config;
  config.num_blocks = num_blocks;
  config.block_size = block_size;
  config.watermark_blocks = watermark_blocks;
  return config;
}

SchedulerSim::SchedulerSim(const SchedulerConfig& config, const KvCacheConfig& cache_config)
    : config_(config),
      kv_cache_(cache_config),
      scheduler_(config, kv_cache_),
      runner_(cache_config.num_blocks, cache_config.block_size, cache_config.sliding_num_blocks,
              cache_config.sliding_window) {}

Status SchedulerSim::Add(NewRequest request) {
  const RequestId id = request.id;
  std::vector<TokenId> prompt = request.prompt_token_ids;
  Status status = scheduler_.Add(std::move(request));
  if (status.ok()) {
    prompts_[id] = std::move(prompt);
    streamed_[id];
  }
  return status;
}

Status SchedulerSim::Abort(RequestId id) {
  Status status = scheduler_.Abort(id);
  if (status.ok()) ended_[id] = "abort";
  ExpectInvariants("after Abort");
  return status;
}

void SchedulerSim::ExpectInvariants(const char* when) {
  const Status status = scheduler_.CheckInvariants();
  EXPECT_TRUE(status.ok()) << when << ": " << status.ToString();
}

std::string SchedulerSim::Step() {
  last_output_ = scheduler_.Schedule();
  ExpectInvariants("after Schedule");
  ExpectBudgetUsedBeforeCutting();
  std::string batch;
  for (const ScheduledRequest& request : last_output_.requests) {
    if (!batch.empty()) batch += ' ';
    batch += std::to_string(request.id) + ':' +
             std::to_string(request.num_new_tokens - request.num_draft_tokens);
    if (request.num_draft_tokens > 0) batch += '+' + std::to_string(request.num_draft_tokens);
  }
  ModelOutput output = runner_.Execute(last_output_);
  if (drafter_) {
    for (SampledTokens& sampled : output.requests) {
      const Request* request = scheduler_.Find(sampled.id);
      if (request == nullptr) continue;
      std::vector<TokenId> tokens = request->token_ids;
      tokens.insert(tokens.end(), sampled.token_ids.begin(), sampled.token_ids.end());
      sampled.next_draft_token_ids = drafter_(sampled.id, tokens);
    }
  }
  last_events_ = scheduler_.Update(output);
  ExpectInvariants("after Update");
  for (const RequestEvent& event : last_events_) {
    std::vector<TokenId>& streamed = streamed_[event.id];
    streamed.insert(streamed.end(), event.new_token_ids.begin(), event.new_token_ids.end());
    EXPECT_EQ(event.num_output_tokens, static_cast<int>(streamed.size())) << "request "
                                                                          << event.id;
    if (event.finish_reason.has_value()) ended_[event.id] = EndName(*event.finish_reason);
  }
  return batch;
}

void SchedulerSim::ExpectBudgetUsedBeforeCutting() {
  const bool budget_used = last_output_.num_batched_tokens == config_.max_num_batched_tokens;
  EXPECT_LE(last_output_.num_batched_tokens, config_.max_num_batched_tokens);
  std::set<RequestId> batched;
  for (const ScheduledRequest& scheduled : last_output_.requests) {
    batched.insert(scheduled.id);
    const Request* request = scheduler_.Find(scheduled.id);
    const int num_verified = scheduled.num_new_tokens - scheduled.num_draft_tokens;
    if (request != nullptr &&
        num_verified < request->num_tokens() - scheduled.num_computed_tokens) {
      const int limit = request->sampling.prompt_logprobs
                            ? std::min(kv_cache_.max_tokens_per_step(),
                                       kMaxPromptLogprobsTokensPerStep)
                            : kv_cache_.max_tokens_per_step();
      EXPECT_TRUE(budget_used || scheduled.num_new_tokens == limit)
          << "request " << scheduled.id << " cut to " << num_verified
          << " tokens with budget left";
    }
  }
  for (const auto& [id, prompt] : prompts_) {
    const Request* request = scheduler_.Find(id);
    if (request != nullptr && request->state == RequestState::kRunning && !batched.contains(id)) {
      EXPECT_TRUE(budget_used) << "running request " << id << " left out with budget left";
    }
  }
}

std::string SchedulerSim::States() const {
  std::string states;
  for (const auto& [id, prompt] : prompts_) {
    if (!states.empty()) states += ' ';
    states += std::to_string(id) + ':';
    const auto ended = ended_.find(id);
    const Request* request = scheduler_.Find(id);
    if (ended != ended_.end()) {
      states += ended->second;
    } else if (request != nullptr) {
      states += StateLetter(request->state);
    } else {
      states += "lost";
    }
  }
  return states;
}

bool SchedulerSim::RunToCompletion(int max_steps) {
  for (int i = 0; i < max_steps && scheduler_.has_unfinished_requests(); ++i) Step();
  return !scheduler_.has_unfinished_requests();
}

void SchedulerSim::ExpectReferenceOutputs() const {
  for (const auto& [id, streamed] : streamed_) {
    const std::vector<TokenId> expected =
        ReferenceContinuation(prompts_.at(id), static_cast<int>(streamed.size()));
    EXPECT_EQ(streamed, expected) << "request " << id << " streamed other tokens than the "
                                  << "reference continuation of its prompt";
  }
}

}  // namespace tokenmill::testing
