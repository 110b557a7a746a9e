#include "engine/engine_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "cache/kv_cache_sizing.h"
#include "common/check.h"
#include "engine/spec/draft_model_proposer.h"
#include "engine/spec/ngram_proposer.h"

namespace tokenmill {

StatusOr<std::unique_ptr<EngineCore>> EngineCore::Create(const Model& model,
                                                         const Tokenizer& tokenizer,
                                                         const EngineConfig& config,
                                                         const Model* draft_model) {
  TM_RETURN_IF_ERROR(ValidateEngineConfig(config));
  if (config.spec.method == SpecMethod::kDraft) {
    if (draft_model == nullptr) {
      return InvalidArgumentError("--spec draft needs a draft model: give --draft-model PATH");
    }
    TM_RETURN_IF_ERROR(CheckDraftVocabulary(model, *draft_model));
  } else if (draft_model != nullptr) {
    return InvalidArgumentError("a draft model was given but --spec is " +
                                std::string(SpecMethodName(config.spec.method)) +
                                ": use --spec draft, or drop --draft-model");
  }
  const ModelConfig& mc = model.config();
  if (tokenizer.vocab_size() > mc.n_vocab) {
    return InvalidArgumentError("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                                " tokens but the model's output only " +
                                std::to_string(mc.n_vocab) + ": use the tokenizer of this model");
  }
  // The backend first: on a GPU the weights take their memory before the KV pool is sized.
  TM_ASSIGN_OR_RETURN(std::unique_ptr<ForwardBackend> backend, CreateForwardBackend(model, config));
  int num_blocks = config.num_kv_blocks;
  if (num_blocks == 0) {
    int64_t kv_bytes = config.kv_cache_bytes;
    if (config.kv_cache_fraction > 0) {
      TM_ASSIGN_OR_RETURN(const int64_t free_bytes, backend->FreeMemoryBytes());
      kv_bytes = static_cast<int64_t>(static_cast<double>(free_bytes) * config.kv_cache_fraction);
    }
    const KvGeometry geometry{mc.n_layers, mc.n_kv_heads, mc.head_dim,
                              static_cast<int>(KvElementBytes(config.kv_type)),
                              static_cast<int>(KvScaleBytes(config.kv_type))};
    TM_ASSIGN_OR_RETURN(KvCachePlan plan, PlanKvCache(geometry, config.block_size, kv_bytes));
    num_blocks = plan.num_blocks;
  }
  if (num_blocks <= config.watermark_blocks) {
    return InvalidArgumentError("the KV pool has " + std::to_string(num_blocks) +
                                " blocks, not more than the watermark (" +
                                std::to_string(config.watermark_blocks) +
                                "): give the KV cache more memory");
  }
  auto kv = std::make_unique<KvCacheManager>(KvCacheConfig{
      .num_blocks = num_blocks,
      .block_size = config.block_size,
      .enable_prefix_caching = config.enable_prefix_caching,
      .watermark_blocks = config.watermark_blocks});
  SchedulerConfig sc = config.scheduler;
  sc.max_model_len = std::min(sc.max_model_len, mc.context_length);
  sc.eos_token_ids = tokenizer.end_of_generation_ids();
  auto scheduler = std::make_unique<Scheduler>(sc, *kv);
  TM_RETURN_IF_ERROR(backend->AllocateKv(config.kv_type, num_blocks, config.block_size));
  auto runner =
      std::make_unique<ModelRunner>(model, std::move(backend), num_blocks, config.block_size);
  std::unique_ptr<Speculator> speculator;
  if (config.spec.method != SpecMethod::kNone) {
    std::unique_ptr<DraftProposer> proposer;
    if (config.spec.method == SpecMethod::kNgram) {
      proposer = std::make_unique<NgramProposer>(config.spec.ngram_min, config.spec.ngram_max);
    } else {
      // The draft runs on the same device, with its own KV pool over the same block ids (plus
      // scratch); at most max_batch_rows / 2 requests draft in one step (k + 1 >= 2 rows).
      const int max_drafting = config.spec.max_batch_rows / 2;
      TM_ASSIGN_OR_RETURN(std::unique_ptr<ForwardBackend> draft_backend,
                          CreateForwardBackend(*draft_model, config));
      TM_RETURN_IF_ERROR(draft_backend->AllocateKv(
          config.kv_type,
          num_blocks + DraftModelProposer::NumScratchBlocks(
                           max_drafting, config.spec.num_speculative_tokens, config.block_size),
          config.block_size));
      proposer = std::make_unique<DraftModelProposer>(
          *draft_model, std::move(draft_backend), num_blocks, config.block_size, max_drafting,
          config.spec.num_speculative_tokens, tokenizer.end_of_generation_ids());
    }
    speculator = std::make_unique<Speculator>(config.spec, std::move(proposer));
  }
  const RequestLimits limits{.max_model_len = scheduler->max_model_len(),
                             .vocab_size = tokenizer.vocab_size(),
                             .speculative_decoding = speculator != nullptr};
  std::unique_ptr<EngineCore> core(new EngineCore(tokenizer, std::move(kv), std::move(scheduler),
                                                  std::move(runner), limits));
  core->prefix_caching_ = config.enable_prefix_caching;
  core->speculator_ = std::move(speculator);
  return core;
}

EngineCore::EngineCore(const Tokenizer& tokenizer, std::unique_ptr<KvCacheManager> kv,
                       std::unique_ptr<Scheduler> scheduler, std::unique_ptr<ModelRunner> runner,
                       RequestLimits limits)
    : tokenizer_(tokenizer),
      kv_(std::move(kv)),
      scheduler_(std::move(scheduler)),
      runner_(std::move(runner)),
      sampler_(tokenizer.end_of_generation_ids()),
      seed_source_(std::random_device{}()),
      limits_(limits) {}

Status EngineCore::Add(RequestId id, GenerateRequest request, Clock::time_point submit_time) {
  TM_ASSIGN_OR_RETURN(ValidatedRequest valid,
                      ValidatedRequest::Validate(std::move(request), limits_));
  return Add(id, std::move(valid), submit_time);
}

Status EngineCore::Add(RequestId id, ValidatedRequest valid, Clock::time_point submit_time) {
  GenerateRequest request = std::move(valid).Take();
  // Validated where it was submitted, against these limits (Engine copies the core's).
  TM_DCHECK(ValidateGenerateRequest(request, limits_).ok());
  const int n = request.n;
  for (int i = 0; i < n; ++i) {
    if (outputs_.contains(id + static_cast<RequestId>(i)) || groups_.contains(id)) {
      return InvalidArgumentError("request id " + std::to_string(id + static_cast<RequestId>(i)) +
                                  " is already in use");
    }
  }
  const int num_prompt = static_cast<int>(request.prompt_token_ids.size());
  if (!request.sampling.seed) request.sampling.seed = seed_source_();
  std::vector<NewRequest> sequences;
  for (int i = 0; i < n; ++i) {
    SamplingParams sampling = request.sampling;
    sampling.sequence_index += i;
    sequences.push_back(NewRequest{.id = id + static_cast<RequestId>(i),
                                   .prompt_token_ids = request.prompt_token_ids,
                                   .sampling = std::move(sampling),
                                   .priority = request.priority,
                                   .cache_salt = request.cache_salt,
                                   .arrival_time = submit_time,
                                   .kv_window = request.kv_window});
  }
  TM_RETURN_IF_ERROR(scheduler_->Add(std::move(sequences[0])));
  for (int i = 0; i < n; ++i) {
    outputs_.emplace(id + static_cast<RequestId>(i),
                     RequestOutput(id, i, tokenizer_, request.stop_strings, request.sink,
                                   num_prompt, submit_time));
  }
  if (n > 1) {
    groups_.emplace(id, Group{.n = n, .num_live = n});
    held_.push_back(HeldSequences{
        .first_id = id,
        .sequences = std::vector<NewRequest>(std::make_move_iterator(sequences.begin() + 1),
                                             std::make_move_iterator(sequences.end()))});
    // Without a prefix cache there is nothing to wait for.
    if (!prefix_caching_) ReleaseHeldSequences();
  }
  return OkStatus();
}

void EngineCore::ReleaseHeldSequences() {
  for (auto held = held_.begin(); held != held_.end();) {
    const Request* first = scheduler_->Find(held->first_id);
    const bool ready = first == nullptr || !prefix_caching_ ||
                       first->num_computed_tokens >= first->num_prompt_tokens;
    if (!ready) {
      ++held;
      continue;
    }
    for (NewRequest& sequence : held->sequences) {
      const RequestId id = sequence.id;
      const Status status = scheduler_->Add(std::move(sequence));
      if (status.ok()) continue;
      // The queue filled up meanwhile: this sequence ends with the error.
      const auto it = outputs_.find(id);
      TM_CHECK(it != outputs_.end());
      it->second.Finish(CompletionReason::kError, status, Clock::now());
      EraseOutput(it);
    }
    held = held_.erase(held);
  }
}

bool EngineCore::Abort(RequestId id) {
  const auto group = groups_.find(id);
  if (group == groups_.end()) return AbortSequence(id);
  const int n = group->second.n;
  std::erase_if(held_, [id](const HeldSequences& held) { return held.first_id == id; });
  bool any = false;
  for (int i = 0; i < n; ++i) any = AbortSequence(id + static_cast<RequestId>(i)) || any;
  return any;
}

bool EngineCore::AbortSequence(RequestId id) {
  const auto it = outputs_.find(id);
  if (it == outputs_.end()) return false;
  // Frees the blocks now; the scheduler reports the id in the next step's finished_ids.
  // A held-back sequence is not in the scheduler yet.
  if (scheduler_->Find(id) != nullptr) {
    const Status status = scheduler_->Abort(id);
    TM_CHECK(status.ok()) << status.ToString();
  }
  it->second.Finish(CompletionReason::kAbort, OkStatus(), Clock::now());
  EraseOutput(it);
  return true;
}

void EngineCore::EraseOutput(std::unordered_map<RequestId, RequestOutput>::iterator it) {
  const RequestId first_id = it->first - static_cast<RequestId>(it->second.sequence_index());
  outputs_.erase(it);
  const auto group = groups_.find(first_id);
  if (group != groups_.end() && --group->second.num_live == 0) groups_.erase(group);
}

void EngineCore::AbortAll() {
  std::vector<RequestId> ids;
  for (const auto& [id, output] : outputs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (const RequestId id : ids) Abort(id);
}

bool EngineCore::Step(const std::function<void()>& on_scheduled) {
  ReleaseHeldSequences();
  const SchedulerOutput step = scheduler_->Schedule();
  if (on_scheduled) on_scheduled();
  if (step.empty()) return false;
  ++num_steps_;
  const Clock::time_point start = Clock::now();
  for (const ScheduledRequest& r : step.requests) outputs_.at(r.id).MarkScheduled(start);

  StatusOr<ModelOutput> sampled = runner_->Execute(step, *scheduler_, sampler_, step_logprobs_,
                                                     speculator_ ? speculator_->draft_probs()
                                                                 : DraftProbs{});
  if (!sampled.ok()) {
    FailStep(step, sampled.status());
    return true;
  }
  if (speculator_) {
    if (const Status proposed = speculator_->AfterStep(step, *scheduler_, *sampled);
        !proposed.ok()) {
      FailStep(step, proposed);
      return true;
    }
  }
  const std::vector<RequestEvent> events = scheduler_->Update(*sampled);
  const Clock::time_point now = Clock::now();
  for (const RequestEvent& event : events) {
    const auto it = outputs_.find(event.id);
    TM_CHECK(it != outputs_.end()) << "event for unknown request " << event.id;
    const auto logprobs = step_logprobs_.find(event.id);
    const std::span<const TokenLogprobs> token_logprobs =
        logprobs == step_logprobs_.end() ? std::span<const TokenLogprobs>()
                                         : std::span<const TokenLogprobs>(logprobs->second);
    it->second.SetEvictedTokens(event.num_evicted_tokens);
    if (!it->second.OnTokens(event.new_token_ids, token_logprobs, event.finish_reason,
                             event.num_cached_prompt_tokens, now)) {
      continue;
    }
    // A stop string finished it while the scheduler still runs it.
    if (!event.finish_reason) {
      const Status status = scheduler_->FinishRequest(event.id, FinishReason::kStop);
      TM_CHECK(status.ok()) << status.ToString();
    }
    EraseOutput(it);
  }
  ReleaseHeldSequences();
  return true;
}

void EngineCore::FailStep(const SchedulerOutput& step, const Status& error) {
  const Status reported = InternalError("the forward pass failed: " + error.ToString());
  for (const ScheduledRequest& r : step.requests) {
    const auto it = outputs_.find(r.id);
    if (it == outputs_.end()) continue;
    const Status status = scheduler_->FinishRequest(r.id, FinishReason::kAbort);
    TM_CHECK(status.ok()) << status.ToString();
    it->second.Finish(CompletionReason::kError, reported, Clock::now());
    EraseOutput(it);
  }
  // Tells the scheduler the step is over; its requests are all finished.
  scheduler_->Update(ModelOutput{});
}

Status EngineCore::CheckIdle() {
  ++idle_checks_;
  Status status = scheduler_->CheckInvariants();
  if (status.ok() && !outputs_.empty()) {
    status = InternalError("the idle check ran with " + std::to_string(outputs_.size()) +
                           " sequences live");
  }
  const KvCacheStats k = kv_->Stats();
  if (status.ok() && k.num_in_use_blocks != 0) {
    status = InternalError(std::to_string(k.num_in_use_blocks) +
                           " KV blocks are still in use with no request left");
  }
  if (!status.ok()) {
    ++idle_check_failures_;
    spdlog::error("engine idle check failed: {}", status.ToString());
  }
  return status;
}

EngineStats EngineCore::Stats() const {
  const SchedulerStats s = scheduler_->Stats();
  const KvCacheStats k = kv_->Stats();
  EngineStats stats;
  stats.num_running = s.num_running;
  stats.num_waiting = s.num_waiting;  // plus the n > 1 sequences not in the scheduler yet
  for (const HeldSequences& held : held_) {
    stats.num_waiting += static_cast<int>(held.sequences.size());
  }
  stats.kv_usage = k.usage;
  stats.num_kv_blocks = k.num_blocks;
  stats.num_kv_blocks_in_use = k.num_in_use_blocks;
  stats.prefix_query_tokens = k.prefix_query_tokens;
  stats.prefix_hit_tokens = k.prefix_hit_tokens;
  stats.num_preemptions = s.num_preemptions;
  stats.num_prompt_tokens = s.num_prompt_tokens;
  stats.num_generation_tokens = s.num_generation_tokens;
  stats.num_finished = s.num_finished;
  stats.num_steps = num_steps_;
  stats.idle_checks = idle_checks_;
  stats.idle_check_failures = idle_check_failures_;
  if (speculator_) {
    const SpecStats& spec = speculator_->stats();
    stats.spec_num_drafts = spec.num_drafts;
    stats.spec_num_draft_tokens = spec.num_draft_tokens;
    stats.spec_num_accepted_tokens = spec.num_accepted_tokens;
  }
  return stats;
}

}  // namespace tokenmill
