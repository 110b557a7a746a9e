#include "engine/engine_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <span>
#include <string>
#include <utility>

#include "common/check.h"

namespace tokenmill {

EngineCore::EngineCore(const Tokenizer& tokenizer, std::unique_ptr<KvCacheManager> kv,
                       std::unique_ptr<Scheduler> scheduler, std::unique_ptr<ModelRunner> runner,
                       std::unique_ptr<Speculator> speculator,
                       std::unique_ptr<KvTiering> tiering,
                       std::unique_ptr<ElasticKv> elastic_kv)
    : tokenizer_(tokenizer),
      kv_(std::move(kv)),
      scheduler_(std::move(scheduler)),
      runner_(std::move(runner)),
      speculator_(std::move(speculator)),
      tiering_(std::move(tiering)),
      elastic_kv_(std::move(elastic_kv)),
      limits_{.max_model_len = scheduler_->max_model_len(),
              .vocab_size = tokenizer.vocab_size(),
              .speculative_decoding = speculator_ != nullptr,
              .embeddings_only = runner_->encoder(),
              .has_classifier = runner_->has_classifier()},
      sampler_(tokenizer.end_of_generation_ids()),
      grammars_(tokenizer.end_of_generation_ids()),
      seed_source_(std::random_device{}()),
      beams_(tokenizer.end_of_generation_ids()) {}

Status EngineCore::Add(RequestId id, GenerateRequest request, Clock::time_point submit_time) {
  TM_RETURN_IF_ERROR(RequireSink(request));
  TM_ASSIGN_OR_RETURN(ValidatedRequest valid,
                      ValidatedRequest::Validate(std::move(request), limits_));
  return Add(id, std::move(valid), submit_time);
}

Status EngineCore::Add(RequestId id, ValidatedRequest valid, Clock::time_point submit_time) {
  if (tiering_ != nullptr) {
    const GenerateRequest& request = valid.get();
    const uint64_t ticket = tiering_->StartLoad(request.prompt_token_ids, request.cache_salt);
    if (ticket != 0) {
      loading_[ticket].push_back(Loading{id, std::move(valid), submit_time});
      ++num_loading_;
      return OkStatus();
    }
  }
  return AddNow(id, std::move(valid), submit_time);
}

void EngineCore::AddLoaded() {
  if (tiering_ == nullptr || loading_.empty()) return;
  for (const uint64_t ticket : tiering_->ImportFinishedLoads()) {
    const auto it = loading_.find(ticket);
    if (it == loading_.end()) continue;
    std::vector<Loading> waiting = std::move(it->second);
    loading_.erase(it);
    for (Loading& loading : waiting) {
      --num_loading_;
      OutputSink sink = loading.request.get().sink;
      const Status added = AddNow(loading.id, std::move(loading.request), loading.submit_time);
      if (!added.ok()) sink(GenerateOutput::Refused(loading.id, added));
    }
  }
}

bool EngineCore::StopLoading(RequestId id) {
  for (auto it = loading_.begin(); it != loading_.end(); ++it) {
    std::vector<Loading>& waiting = it->second;
    const auto found = std::find_if(waiting.begin(), waiting.end(),
                                    [id](const Loading& loading) { return loading.id == id; });
    if (found == waiting.end()) continue;
    Loading loading = std::move(*found);
    waiting.erase(found);
    --num_loading_;
    if (waiting.empty()) {  // nobody else waits for the load
      tiering_->Cancel(it->first);
      loading_.erase(it);
    }
    return AddNow(loading.id, std::move(loading.request), loading.submit_time).ok();
  }
  return false;
}

Status EngineCore::AddNow(RequestId id, ValidatedRequest valid, Clock::time_point submit_time) {
  GenerateRequest request = std::move(valid).Take();
  // Validated where it was submitted, against these limits (Engine copies the core's).
  TM_DCHECK(ValidateGenerateRequest(request, limits_).ok());
  TM_DCHECK(RequireSink(request).ok());
  const int n = request.n;
  for (int i = 0; i < n; ++i) {
    if (outputs_.contains(id + static_cast<RequestId>(i)) || fan_out_.GroupSize(id) > 0) {
      return InvalidArgumentError("request id " + std::to_string(id + static_cast<RequestId>(i)) +
                                  " is already in use");
    }
  }
  const int num_prompt = static_cast<int>(request.prompt_token_ids.size());
  if (!request.sampling.seed) request.sampling.seed = seed_source_();
  if (request.lora > 0) {
    if (!runner_->has_lora(request.lora) ||
        std::ranges::find(retiring_loras_, request.lora) != retiring_loras_.end()) {
      return NotFoundError("LoRA adapter " + std::to_string(request.lora) +
                           " is not loaded (it was unloaded): name another model");
    }
    request.cache_salt += "\x1flora:" + runner_->lora_digest(request.lora);
  }
  if (request.beam_search) {
    TM_RETURN_IF_ERROR(scheduler_->Add(
        beams_.Start(id, request, scheduler_->max_model_len(), submit_time)));
    for (int i = 0; i < n; ++i) {
      std::optional<OutputParserOptions> parsing = request.output_parsing;
      if (parsing) parsing->seed += static_cast<uint64_t>(i);
      outputs_.emplace(id + static_cast<RequestId>(i),
                       RequestOutput(id, i, tokenizer_, {}, request.sink, num_prompt,
                                     submit_time, request.rendered_control_tokens, parsing));
    }
    return OkStatus();
  }
  // All or none: a sequence the queue refuses takes back those queued before it.
  std::vector<NewRequest> sequences = SplitIntoSequences(id, request, submit_time);
  for (int i = 0; i < n; ++i) {
    const Status queued = scheduler_->Add(std::move(sequences[static_cast<size_t>(i)]));
    if (queued.ok()) continue;
    for (int j = 0; j < i; ++j) {
      const Status aborted = scheduler_->Abort(id + static_cast<RequestId>(j));
      TM_CHECK(aborted.ok()) << aborted.ToString();
    }
    return queued;
  }
  for (int i = 0; i < n; ++i) {
    std::optional<OutputParserOptions> parsing = request.output_parsing;
    if (parsing) parsing->seed += static_cast<uint64_t>(i);  // each its own tool-call ids
    outputs_.emplace(id + static_cast<RequestId>(i),
                     RequestOutput(id, i, tokenizer_, request.stop_strings, request.sink,
                                   num_prompt, submit_time, request.rendered_control_tokens,
                                   parsing));
    if (request.embedding) {
      outputs_.at(id).PoolEmbedding(EmbeddingPooler(
          *request.embedding, runner_->hidden_size(),
          [this](std::span<const float> pooled) { return runner_->Classify(pooled); }));
    }
    if (request.grammar) {
      grammars_.Add(id + static_cast<RequestId>(i), request.grammar,
                    request.grammar_starts_after, request.grammar_reasoning_opens);
    }
  }
  if (n > 1) fan_out_.AddGroup(id, n);
  return OkStatus();
}

bool EngineCore::Abort(RequestId id) {
  StopLoading(id);
  if (beams_.HasSearch(id)) {
    EndBeamSearch(id, CompletionReason::kAbort, OkStatus());
    return true;
  }
  const int n = fan_out_.GroupSize(id);
  if (n == 0) return AbortSequence(id);
  bool any = false;
  for (int i = 0; i < n; ++i) any = AbortSequence(id + static_cast<RequestId>(i)) || any;
  return any;
}

bool EngineCore::AbortSequence(RequestId id) {
  const auto it = outputs_.find(id);
  if (it == outputs_.end()) return false;
  // Frees the blocks now; the scheduler reports the id in the next step's finished_ids. A
  // beam search's output (by its id + i) is not in the scheduler: its beams are.
  if (scheduler_->Find(id) != nullptr) {
    const Status status = scheduler_->Abort(id);
    TM_CHECK(status.ok()) << status.ToString();
  }
  it->second.Finish(CompletionReason::kAbort, OkStatus(), Clock::now());
  EraseOutput(it);
  return true;
}

void EngineCore::EraseOutput(OutputMap::iterator it) {
  const RequestId first_id = it->first - static_cast<RequestId>(it->second.sequence_index());
  grammars_.Remove(it->first);
  outputs_.erase(it);
  fan_out_.SequenceEnded(first_id);
}

void EngineCore::EndBeamSearch(RequestId id, CompletionReason reason, const Status& error) {
  const int n = beams_.Width(id);
  beams_.Abort(id, *scheduler_);
  for (int i = 0; i < n; ++i) {
    const auto it = outputs_.find(id + static_cast<RequestId>(i));
    if (it == outputs_.end()) continue;
    it->second.Finish(reason, error, Clock::now());
    EraseOutput(it);
  }
}

void EngineCore::EmitBeamResult(const BeamSearchResult& result) {
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < static_cast<size_t>(result.width); ++i) {
    const auto it = outputs_.find(result.id + static_cast<RequestId>(i));
    if (it == outputs_.end()) continue;
    if (i < result.hypotheses.size()) {
      const BeamHypothesis& hypothesis = result.hypotheses[i];
      it->second.SetCumulativeLogprob(hypothesis.cumulative_logprob);
      it->second.OnTokens(hypothesis.token_ids, {},
                          hypothesis.ended ? FinishReason::kStop : FinishReason::kLength,
                          result.num_cached_prompt_tokens, now);
    } else {  // fewer hypotheses than beams: a vocabulary of fewer than n tokens
      it->second.OnTokens({}, {}, FinishReason::kLength, result.num_cached_prompt_tokens, now);
    }
    EraseOutput(it);
  }
}

void EngineCore::AbortAll() {
  while (!loading_.empty()) StopLoading(loading_.begin()->second.front().id);
  std::vector<RequestId> ids;
  for (const auto& [id, output] : outputs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (const RequestId id : ids) Abort(id);
}

bool EngineCore::Step(const std::function<void()>& on_scheduled) {
  if (elastic_kv_ != nullptr) elastic_kv_->BeginStep();
  AddLoaded();
  const SchedulerOutput step = Schedule(on_scheduled);
  // Before the forward pass overwrites any block the pool evicted while scheduling.
  if (tiering_ != nullptr) tiering_->WriteNewlyCached();
  if (step.empty()) return false;
  const StatusOr<ModelOutput> sampled = Execute(step);
  if (!sampled.ok()) {
    FailStep(step, sampled.status());
    return true;
  }
  std::vector<RequestEvent> events = scheduler_->Update(*sampled);
  FinishEndedGrammars(events);
  Emit(events);
  for (const BeamSearchResult& result : beams_.Decide(*scheduler_)) EmitBeamResult(result);
  // What this step's finished requests cached, while its blocks are still intact.
  if (tiering_ != nullptr) tiering_->WriteNewlyCached();
  return true;
}

SchedulerOutput EngineCore::Schedule(const std::function<void()>& on_scheduled) {
  SchedulerOutput step = scheduler_->Schedule();
  for (const RequestId id : step.preempted_ids) grammars_.Release(id);
  if (on_scheduled) on_scheduled();
  const Clock::time_point now = Clock::now();
  for (const ScheduledRequest& r : step.requests) {
    if (!beams_.IsBeam(r.id)) {
      outputs_.at(r.id).MarkScheduled(now);
      continue;
    }
    const RequestId id = beams_.RequestOf(r.id);
    for (int i = 0; i < beams_.Width(id); ++i) {
      outputs_.at(id + static_cast<RequestId>(i)).MarkScheduled(now);
    }
  }
  return step;
}

StatusOr<ModelOutput> EngineCore::Execute(const SchedulerOutput& step) {
  ++num_steps_;
  TM_ASSIGN_OR_RETURN(ModelOutput sampled,
                      runner_->Execute(step, *scheduler_, sampler_, step_logprobs_, grammars_,
                                       ended_grammars_,
                                       speculator_ ? speculator_->draft_probs() : DraftProbs{}));
  if (speculator_) TM_RETURN_IF_ERROR(speculator_->AfterStep(step, *scheduler_, sampled));
  beams_.TakeCandidates(sampled, step_logprobs_, *scheduler_);
  for (const auto& [id, chunk] : runner_->prompt_logprobs()) {
    outputs_.at(id).AddPromptLogprobs(chunk);
  }
  for (const StepHiddenRows& rows : runner_->hidden_rows()) {
    outputs_.at(rows.id).AddHiddenRows(rows.first_position, rows.rows);
  }
  return sampled;
}

void EngineCore::FinishEndedGrammars(std::vector<RequestEvent>& events) {
  if (ended_grammars_.empty()) return;
  for (RequestEvent& event : events) {
    if (event.finish_reason ||
        std::find(ended_grammars_.begin(), ended_grammars_.end(), event.id) ==
            ended_grammars_.end()) {
      continue;
    }
    const Status status = scheduler_->FinishRequest(event.id, FinishReason::kStop);
    TM_CHECK(status.ok()) << status.ToString();
    event.finish_reason = FinishReason::kStop;
  }
}

void EngineCore::Emit(const std::vector<RequestEvent>& events) {
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
    // A stop string, or a turn over after its tool call, finished it while the scheduler
    // still runs it: the normal finish, which frees its blocks.
    if (!event.finish_reason) {
      const Status status = scheduler_->FinishRequest(event.id, FinishReason::kStop);
      TM_CHECK(status.ok()) << status.ToString();
    }
    EraseOutput(it);
  }
}

void EngineCore::FailStep(const SchedulerOutput& step, const Status& error) {
  const Status reported = InternalError("the forward pass failed: " + error.ToString());
  for (const ScheduledRequest& r : step.requests) {
    if (beams_.IsBeam(r.id)) {
      EndBeamSearch(beams_.RequestOf(r.id), CompletionReason::kError, reported);
      continue;
    }
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

void EngineCore::RetireLoras() {
  if (retiring_loras_.empty()) return;
  std::vector<int> in_use, waiting;
  scheduler_->ActiveLoras(in_use, waiting);
  in_use.insert(in_use.end(), waiting.begin(), waiting.end());
  for (const auto& [ticket, requests] : loading_) {
    for (const Loading& loading : requests) in_use.push_back(loading.request.get().lora);
  }
  std::erase_if(retiring_loras_, [&](int id) {
    if (std::ranges::find(in_use, id) != in_use.end()) return false;
    runner_->RemoveLora(id);
    return true;
  });
}

Status EngineCore::CheckIdle() {
  ++idle_checks_;
  Status status = scheduler_->CheckInvariants();
  if (status.ok() && (!outputs_.empty() || beams_.num_searches() > 0)) {
    status = InternalError("the idle check ran with " + std::to_string(outputs_.size()) +
                           " sequences live");
  }
  const KvCacheStats k = kv_->Stats();
  if (status.ok() && k.num_in_use_blocks + k.sliding_num_in_use_blocks != 0) {
    status = InternalError(std::to_string(k.num_in_use_blocks) + " + " +
                           std::to_string(k.sliding_num_in_use_blocks) +
                           " (sliding-window) KV blocks are still in use with no request left");
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
  stats.num_waiting = s.num_waiting;
  if (runner_->has_lora_adapters()) {
    scheduler_->ActiveLoras(stats.running_loras, stats.waiting_loras);
  }
  stats.kv_usage = k.usage;
  stats.num_kv_blocks = k.num_blocks;
  stats.num_kv_blocks_in_use = k.num_in_use_blocks;
  if (elastic_kv_ != nullptr) stats.kv_memory_bytes = elastic_kv_->held_bytes();
  stats.prefix_query_tokens = k.prefix_query_tokens;
  stats.prefix_hit_tokens = k.prefix_hit_tokens;
  stats.num_preemptions = s.num_preemptions;
  stats.num_prompt_tokens = s.num_prompt_tokens;
  stats.num_generation_tokens = s.num_generation_tokens;
  stats.num_finished = s.num_finished;
  stats.num_steps = num_steps_;
  stats.idle_checks = idle_checks_;
  stats.idle_check_failures = idle_check_failures_;
  if (tiering_ != nullptr) {
    stats.disk_tier = tiering_->DiskStats();
    stats.host_tier = tiering_->HostStats();
    stats.num_loading = num_loading_;
    stats.num_waiting += stats.num_loading;
  }
  if (speculator_) {
    const SpecStats& spec = speculator_->stats();
    stats.spec_num_drafts = spec.num_drafts;
    stats.spec_num_draft_tokens = spec.num_draft_tokens;
    stats.spec_num_accepted_tokens = spec.num_accepted_tokens;
  }
  return stats;
}

}  // namespace tokenmill
