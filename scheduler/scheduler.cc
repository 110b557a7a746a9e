#include "scheduler/scheduler.h"

#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <utility>

#include "common/check.h"
#include "scheduler/stop_conditions.h"

namespace tokenmill {
namespace {

std::string Num(int64_t value) { return std::to_string(value); }

// Longest context the pool can serve one request alone: its K/V (all tokens but the last
// sampled one) in at most num_blocks - watermark blocks, so that even its first allocation
// after a preemption fits once nothing else runs.
int PoolLimitedModelLen(const KvCacheManager& kv, int max_model_len) {
  const int64_t pool_tokens =
      int64_t{kv.num_blocks() - kv.watermark_blocks()} * kv.block_size() + 1;
  return static_cast<int>(std::min<int64_t>(max_model_len, pool_tokens));
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv_cache)
    : config_(config),
      kv_(kv_cache),
      max_model_len_(std::min(PoolLimitedModelLen(kv_cache, config.max_model_len),
                              config.whole_prompts ? config.max_num_batched_tokens
                                                   : std::numeric_limits<int>::max())) {
  const Status valid = ValidateSchedulerConfig(config);
  TM_CHECK(valid.ok()) << valid.ToString();
}

KvCacheRequest Scheduler::KvView(const Request& request) const {
  // After an eviction only the sink blocks are hashable: the later cache positions hold
  // tokens at other positions than a fresh computation of the text would.
  const std::span<const TokenId> hashable =
      request.num_evicted_tokens == 0
          ? std::span<const TokenId>(request.token_ids)
          : std::span<const TokenId>(request.token_ids).first(request.num_sink_tokens);
  return KvCacheRequest{.id = request.id,
                        .verified_tokens = hashable,
                        .num_computed_tokens = request.num_computed_tokens,
                        .cache_salt = request.cache_salt,
                        .lora = request.lora};
}

Status Scheduler::Add(NewRequest spec) {
  if (requests_.contains(spec.id)) {
    return InvalidArgumentError("request id " + std::to_string(spec.id) + " is already in use");
  }
  const int num_prompt_tokens = static_cast<int>(spec.prompt_token_ids.size());
  if (num_prompt_tokens == 0) {
    return InvalidArgumentError("the prompt is empty: give at least one token");
  }
  if (spec.sampling.max_tokens < 1) {
    return InvalidArgumentError("max_tokens must be at least 1, got " +
                                Num(spec.sampling.max_tokens));
  }
  if (spec.kv_window.has_value()) {
    TM_RETURN_IF_ERROR(CheckKvWindow(*spec.kv_window, kv_.block_size(), max_model_len_));
  }
  // A generation leaves room for one generated token; an embedding may fill the context.
  const bool generates = spec.prompt_use == PromptUse::kGenerate;
  const int max_prompt = max_model_len_ - (generates ? 1 : 0);
  if (num_prompt_tokens > max_prompt) {
    const std::string prefix = "the prompt has " + Num(num_prompt_tokens) + " tokens, ";
    if (max_model_len_ < config_.max_model_len) {
      return InvalidArgumentError(
          prefix + "but the KV cache holds at most " + Num(max_model_len_) +
          " tokens per request (" + Num(kv_.num_blocks()) + " blocks of " +
          Num(kv_.block_size()) + ", " + Num(kv_.watermark_blocks()) +
          " kept free for admission): shorten it to at most " + Num(max_prompt) +
          " tokens or give the KV cache more memory");
    }
    return InvalidArgumentError(prefix + "but the context length is " + Num(max_model_len_) +
                                ": shorten it to at most " + Num(max_prompt) + " tokens" +
                                (generates ? ", leaving room for one generated token" : ""));
  }
  if (QueueIsFullFor(spec.tenant)) {
    return ResourceExhaustedError(Num(waiting_.size()) + " requests are already waiting (" +
                                  "--max-queue " + Num(config_.max_queue) + "): retry later");
  }
  const RequestId id = spec.id;
  auto request = std::make_unique<Request>(std::move(spec), next_arrival_order_++);
  if (request->kv_window.has_value()) {
    request->num_sink_tokens = KvWindowSinkTokens(*request->kv_window, kv_.block_size());
  }
  waiting_.Push(request.get());
  requests_.emplace(id, std::move(request));
  return OkStatus();
}

bool Scheduler::QueueIsFullFor(std::string_view tenant) const {
  const size_t max_queue = static_cast<size_t>(config_.max_queue);
  if (waiting_.size() < max_queue) return false;
  // A full queue still takes a tenant below its share of it (one tenant's flood does not
  // lock the others out), up to twice --max-queue in all.
  if (waiting_.size() >= 2 * max_queue) return true;
  const size_t own = waiting_.size_of(tenant);
  const size_t num_tenants = waiting_.num_tenants() + (own == 0 ? 1 : 0);
  return own >= max_queue / num_tenants;
}

// Evicts from the middle (KvWindowTokensToEvict) when the request's cache would hold more
// than its limit. The kept recent tokens are recomputed at their new cache positions (the
// sliding window with recomputation of StreamingLLM) instead of re-rotating their keys: RoPE
// stays consistent with no kernel (and no int8/fp8 or CUDA variant) to change, at the price
// of one prefill of the kept tokens per eviction. Half the window is evicted at once to
// amortize that prefill. The sink blocks keep their K/V: their positions do not change.
void Scheduler::EvictIfOverWindow(Request& request) {
  if (!request.kv_window.has_value()) return;
  const int num_to_evict = KvWindowTokensToEvict(*request.kv_window, kv_.block_size(),
                                                 max_model_len_, request.num_cache_tokens());
  if (num_to_evict == 0) return;
  TM_CHECK_GT(num_to_evict, 0);
  // Blocks past the sinks drop out of the table; those already hashed (computed before the
  // first eviction, at their true positions) stay in the prefix cache.
  // A sliding-window group that released the sinks' window keeps nothing: all is recomputed.
  const int num_sink_blocks = request.num_sink_tokens / kv_.block_size();
  const int num_kept_blocks = kv_.TruncateBlocks(request.id, num_sink_blocks);
  request.num_computed_tokens =
      std::min(request.num_computed_tokens, num_kept_blocks * kv_.block_size());
  request.num_evicted_tokens += num_to_evict;
  stats_.num_evicted_tokens += num_to_evict;
}

Status Scheduler::FinishRequest(RequestId id, FinishReason reason) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) {
    return NotFoundError("no live request " + std::to_string(id) +
                         " (finished already, or never added)");
  }
  Finish(it->second.get(), reason);
  DebugCheckInvariants();
  return OkStatus();
}

void Scheduler::Finish(Request* request, FinishReason reason) {
  if (request->state == RequestState::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), request));
    running_per_tenant_.Add(request->tenant, -1);
    kv_.Free(KvView(*request));
  } else {
    const bool was_waiting = waiting_.Remove(request);
    TM_CHECK(was_waiting) << "request " << request->id << " is neither running nor waiting";
  }
  request->state = FinishedState(reason);  // its last state; events carry the reason
  finished_since_schedule_.push_back(request->id);
  ++stats_.num_finished;
  requests_.erase(request->id);  // destroys *request
}

SchedulerOutput Scheduler::Schedule() {
  TM_CHECK(last_step_.empty()) << "Schedule() called before Update() took the sampled tokens "
                                  "of the previous step";
  SchedulerOutput out;
  out.finished_ids = std::move(finished_since_schedule_);
  finished_since_schedule_.clear();

  std::vector<StepPlan> plans;
  int budget = config_.max_num_batched_tokens;
  // Admitting right after a preemption would take back the blocks it just freed.
  if (!ScheduleRunning(plans, budget, out)) AdmitWaiting(plans, budget, out);

  for (StepPlan& plan : plans) {
    out.requests.push_back(Commit(plan));
    out.num_batched_tokens += out.requests.back().num_new_tokens;
  }
  // Kept until a step runs: nothing writes K/V before that.
  if (!out.requests.empty()) out.block_copies = std::exchange(block_copies_, {});
  DebugCheckInvariants();
  return out;
}

int Scheduler::StepTokenLimit(const Request& request) const {
  return request.sampling.prompt_logprobs
             ? std::min(kv_.max_tokens_per_step(), kMaxPromptLogprobsTokensPerStep)
             : kv_.max_tokens_per_step();
}

bool Scheduler::ScheduleRunning(std::vector<StepPlan>& plans, int& budget,
                                SchedulerOutput& out) {
  bool preempted = false;
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request* request = running_[i];
    if (request->parked) {
      ++i;
      continue;
    }
    EvictIfOverWindow(*request);
    const int num_missing = request->num_cache_tokens() - request->num_computed_tokens;
    // Update() leaves every running request it did not park at least its next token.
    TM_CHECK_GT(num_missing, 0) << "running request " << request->id;
    int num_verified = 0;
    int num_drafts = 0;
    std::optional<std::vector<BlockId>> blocks;
    bool preempted_itself = false;
    while (true) {
      // Sized again after each preemption: a victim batched earlier gives its budget back.
      // A sliding-window pool bounds one step's tokens too (KvCacheManager).
      const int step_limit = std::min(budget, StepTokenLimit(*request));
      num_verified = std::min(num_missing, step_limit);
      num_drafts = 0;
      if (num_verified == num_missing && !request->kv_window.has_value()) {
        // Draft rows sit at positions num_tokens.. and must stay inside the context.
        const int room = max_model_len_ - 1 - request->num_tokens();
        num_drafts = std::max(0, std::min({static_cast<int>(request->draft_token_ids.size()),
                                           step_limit - num_verified, room}));
      }
      blocks = kv_.AllocateSlots(KvView(*request), num_verified, num_drafts);
      if (blocks.has_value()) break;
      Request* victim = PickVictim();
      const size_t victim_index =
          static_cast<size_t>(std::find(running_.begin(), running_.end(), victim) -
                              running_.begin());
      Preempt(victim, plans, budget, out);
      preempted = true;
      if (victim == request) {
        preempted_itself = true;
        break;
      }
      if (victim_index < i) --i;
    }
    if (preempted_itself) continue;  // running_[i] is now the next request
    budget -= num_verified + num_drafts;
    plans.push_back(StepPlan{.request = request,
                             .num_verified_tokens = num_verified,
                             .num_draft_tokens = num_drafts,
                             .first_scheduled = false,
                             .new_block_ids = std::move(*blocks)});
    ++i;
  }
  return preempted;
}

void Scheduler::AdmitWaiting(std::vector<StepPlan>& plans, int& budget, SchedulerOutput& out) {
  // Requests waiting for another's prefill sit out this step and keep their places (the
  // queue orders by priority and arrival): the rest of the queue, other tenants' included,
  // goes on.
  std::vector<Request*> sitting_out;
  int prefills = 0;
  while (!waiting_.empty() && budget > 0 &&
         (config_.max_prefills_per_step == 0 || prefills < config_.max_prefills_per_step)) {
    Request* request = waiting_.Front(running_per_tenant_);
    EvictIfOverWindow(*request);
    // A parked request has nothing to compute before its next token comes.
    if (request->parked || WaitsForSharedPrefill(*request)) {
      waiting_.Remove(request);
      sitting_out.push_back(request);
      continue;
    }
    PrefixHit hit;
    int num_new = 0;
    std::optional<std::vector<BlockId>> blocks;
    while (true) {
      if (static_cast<int>(running_.size()) < config_.max_num_seqs) {
        hit = request->uses_every_prompt_row() ? PrefixHit{}
                                                : kv_.GetComputedBlocks(KvView(*request));
        num_new = std::min(
            {request->num_cache_tokens() - hit.num_tokens, budget, StepTokenLimit(*request)});
        // An encoder's prompt runs whole or waits for a step with room for it.
        if (config_.whole_prompts && num_new < request->num_cache_tokens() - hit.num_tokens) {
          break;
        }
        blocks = kv_.AllocateSlots(KvView(*request), num_new, 0, hit);
        if (blocks) break;
      }
      // No seat or no blocks: a tenant below its share takes them from one above it, or from a
      // parked request.
      Request* victim = FairShareVictim(*request);
      if (victim == nullptr) victim = ParkedVictim(*request);
      if (victim == nullptr) break;
      Preempt(victim, plans, budget, out);
    }
    if (!blocks) break;  // strict order: nobody overtakes the head of the queue
    waiting_.Remove(request);
    if (request->state == RequestState::kWaiting) {
      request->num_cached_prompt_tokens = std::min(hit.num_tokens, request->num_prompt_tokens);
    }
    if (!request->uses_every_prompt_row()) {
      stats_.num_prefix_query_tokens += request->num_tokens();
      stats_.num_prefix_hit_tokens += hit.num_tokens;
    }
    request->num_computed_tokens = hit.num_tokens;
    request->state = RequestState::kRunning;
    running_.push_back(request);
    running_per_tenant_.Add(request->tenant, 1);
    budget -= num_new;
    if (num_new > kv_.block_size()) ++prefills;
    plans.push_back(StepPlan{.request = request,
                             .num_verified_tokens = num_new,
                             .num_draft_tokens = 0,
                             .first_scheduled = true,
                             .new_block_ids = std::move(*blocks)});
  }
  for (Request* request : sitting_out) waiting_.Push(request);
}

bool Scheduler::WaitsForSharedPrefill(const Request& waiting) const {
  // It computes every prompt row anyway.
  if (!kv_.prefix_caching() || waiting.uses_every_prompt_row()) return false;
  // Most steps nobody of its salt is prefilling: no need to hash its prompt for a lookup.
  const auto prefilling = [&](const Request* other) {
    return other->cache_salt == waiting.cache_salt && other->num_evicted_tokens == 0 &&
           other->num_computed_tokens < other->num_prompt_tokens;
  };
  if (std::ranges::none_of(running_, prefilling)) return false;
  const KvCacheRequest view = KvView(waiting);
  const PrefixHit hit = kv_.FindComputedBlocks(view);
  const int block_size = kv_.block_size();
  const int next = hit.num_tokens;  // the first position found uncached
  // A hit never covers the block of the last token (its logits are needed).
  if (std::ssize(view.verified_tokens) - 1 < next + block_size) return false;
  const std::span<const TokenId> block = view.verified_tokens.subspan(next, block_size);
  for (const Request* other : running_) {
    // Another tenant's blocks are never shared, nor blocks after an eviction (KvView); a
    // request past its prompt computes no prompt block (and one with the block computed
    // would have been found cached).
    if (!prefilling(other) || other->num_prompt_tokens < next + block_size ||
        other->num_computed_tokens >= next + block_size) {
      continue;
    }
    // The same first `next` tokens: the same cached block ends both tables there.
    const std::span<const BlockId> table = kv_.BlockTable(other->id);
    if (next > 0 && (std::ssize(table) < next / block_size ||
                     table[static_cast<size_t>(next / block_size - 1)] != hit.blocks.back())) {
      continue;
    }
    if (std::ranges::equal(std::span<const TokenId>(other->token_ids).subspan(next, block_size),
                           block)) {
      return true;
    }
  }
  return false;
}

// Ahead in the victim order: lower priority (larger), then the tenant with more running
// sequences, then the later arrival. One tenant: lowest priority, latest arrival.
bool Scheduler::PreemptsBefore(const Request& a, const Request& b) const {
  const int a_running = running_per_tenant_.Get(a.tenant);
  const int b_running = running_per_tenant_.Get(b.tenant);
  return std::tie(a.priority, a_running, a.arrival_order) >
         std::tie(b.priority, b_running, b.arrival_order);
}

Request* Scheduler::PickVictim() const {
  TM_CHECK(!running_.empty());
  return *std::min_element(running_.begin(), running_.end(),
                           [this](const Request* a, const Request* b) {
                             return PreemptsBefore(*a, *b);
                           });
}

Request* Scheduler::FairShareVictim(const Request& waiting) const {
  // Over its share: after the move the victim's tenant still runs at least as many sequences
  // as the waiting one's, so shares converge and never swap back and forth.
  const int waiting_running = running_per_tenant_.Get(waiting.tenant);
  // Everything running is the waiting tenant's (always so with one tenant): nothing to take.
  if (static_cast<size_t>(waiting_running) == running_.size()) return nullptr;
  Request* victim = nullptr;
  for (Request* candidate : running_) {
    if (candidate->tenant == waiting.tenant || candidate->priority < waiting.priority ||
        running_per_tenant_.Get(candidate->tenant) <= waiting_running + 1) {
      continue;
    }
    if (victim == nullptr || PreemptsBefore(*candidate, *victim)) victim = candidate;
  }
  return victim;
}

Request* Scheduler::ParkedVictim(const Request& waiting) const {
  Request* victim = nullptr;
  for (Request* candidate : running_) {
    if (!candidate->parked || candidate->priority < waiting.priority) continue;
    if (victim == nullptr || PreemptsBefore(*candidate, *victim)) victim = candidate;
  }
  return victim;
}

void Scheduler::Preempt(Request* victim, std::vector<StepPlan>& plans, int& budget,
                        SchedulerOutput& out) {
  const auto plan = std::find_if(plans.begin(), plans.end(),
                                 [victim](const StepPlan& p) { return p.request == victim; });
  if (plan != plans.end()) {
    budget += plan->num_verified_tokens + plan->num_draft_tokens;
    plans.erase(plan);
  }
  // Its computed tokens stay counted until Commit, so Free caches only K/V already written.
  kv_.Free(KvView(*victim));
  victim->num_computed_tokens = 0;
  victim->draft_token_ids.clear();
  victim->state = RequestState::kPreempted;
  ++victim->num_preemptions;
  ++stats_.num_preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  running_per_tenant_.Add(victim->tenant, -1);
  waiting_.Push(victim);
  out.preempted_ids.push_back(victim->id);
}

ScheduledRequest Scheduler::Commit(StepPlan& plan) {
  Request& request = *plan.request;
  const int start = request.num_computed_tokens;
  const int num_missing = request.num_cache_tokens() - start;
  ScheduledRequest scheduled{
      .id = request.id,
      .num_computed_tokens = start,
      .num_new_tokens = plan.num_verified_tokens + plan.num_draft_tokens,
      .num_draft_tokens = plan.num_draft_tokens,
      .token_ids = {},
      .is_prefill = num_missing > 1,
      .num_logits = plan.num_verified_tokens == num_missing && !request.embeds()
                        ? 1 + plan.num_draft_tokens
                        : 0,
      .first_scheduled = plan.first_scheduled,
      .block_table = {},
      .new_block_ids = std::move(plan.new_block_ids),
      .sliding_block_table = {},
  };
  for (int position = start; position < start + plan.num_verified_tokens; ++position) {
    scheduled.token_ids.push_back(request.cache_token(position));
  }
  scheduled.token_ids.insert(scheduled.token_ids.end(), request.draft_token_ids.begin(),
                             request.draft_token_ids.begin() + plan.num_draft_tokens);
  const std::span<const BlockId> table = kv_.BlockTable(request.id);
  scheduled.block_table.assign(table.begin(), table.end());
  if (kv_.num_groups() > 1) {
    const std::span<const BlockId> sliding = kv_.BlockTable(request.id, 1);
    scheduled.sliding_block_table.assign(sliding.begin(), sliding.end());
  }

  stats_.num_prompt_tokens +=
      std::max(0, std::min(start + plan.num_verified_tokens, request.num_prompt_tokens) - start);
  request.num_computed_tokens += scheduled.num_new_tokens;
  if (request.embeds() && request.num_computed_tokens == request.num_prompt_tokens) {
    embedded_.push_back(request.id);
  }
  if (scheduled.num_logits > 0) {
    last_step_[request.id] = ScheduledLogits{.num_draft_tokens = plan.num_draft_tokens,
                                             .num_logits = scheduled.num_logits};
  }
  return scheduled;
}

std::vector<RequestEvent> Scheduler::Update(const ModelOutput& output) {
  std::vector<RequestEvent> events;
  for (const SampledTokens& sampled : output.requests) {
    const auto step = last_step_.find(sampled.id);
    TM_CHECK(step != last_step_.end())
        << "sampled tokens for request " << sampled.id << ", which needed no logits this step";
    const ScheduledLogits scheduled = step->second;
    last_step_.erase(step);
    const auto it = requests_.find(sampled.id);
    if (it == requests_.end() || it->second->state != RequestState::kRunning) continue;
    Request& request = *it->second;

    const int num_sampled = static_cast<int>(sampled.token_ids.size());
    if (num_sampled == 0) {  // parked until Extend
      TM_CHECK_EQ(scheduled.num_draft_tokens, 0) << "request " << request.id << " parked";
      request.draft_token_ids.clear();
      request.parked = true;
      continue;
    }
    TM_CHECK(num_sampled >= 1 && num_sampled <= 1 + scheduled.num_draft_tokens)
        << num_sampled << " tokens for request " << request.id << " after "
        << scheduled.num_draft_tokens << " drafts";
    // Rejected drafts' K/V are garbage: never hashed, and the lookahead blocks that held
    // nothing else go back to the pool (the next step allocates what it needs).
    request.num_computed_tokens -= scheduled.num_draft_tokens - (num_sampled - 1);
    request.draft_token_ids.clear();
    if (scheduled.num_draft_tokens > 0) {
      const int num_kept = request.num_tokens() + num_sampled;  // positions that stay
      kv_.FreeTailBlocks(request.id, (num_kept + kv_.block_size() - 1) / kv_.block_size());
    }

    RequestEvent event;
    event.id = request.id;
    for (const TokenId token : sampled.token_ids) {
      event.new_token_ids.push_back(token);
      event.finish_reason = AppendToken(request, token);
      if (event.finish_reason.has_value()) break;
    }
    event.num_prompt_tokens = request.num_prompt_tokens;
    event.num_cached_prompt_tokens = request.num_cached_prompt_tokens;
    event.num_output_tokens = request.num_output_tokens();
    event.num_evicted_tokens = request.num_evicted_tokens;
    if (event.finish_reason.has_value()) {
      Finish(&request, *event.finish_reason);
    } else {
      request.draft_token_ids = sampled.next_draft_token_ids;
    }
    events.push_back(std::move(event));
  }
  for (const RequestId id : std::exchange(embedded_, {})) {
    const auto it = requests_.find(id);
    if (it == requests_.end() || it->second->state != RequestState::kRunning) continue;
    Request& request = *it->second;
    events.push_back(RequestEvent{.id = id,
                                  .new_token_ids = {},
                                  .finish_reason = FinishReason::kStop,
                                  .num_prompt_tokens = request.num_prompt_tokens,
                                  .num_cached_prompt_tokens = request.num_cached_prompt_tokens,
                                  .num_output_tokens = 0,
                                  .num_evicted_tokens = 0});
    Finish(&request, FinishReason::kStop);
  }
  for (const auto& [id, scheduled] : last_step_) {
    TM_CHECK(!requests_.contains(id)) << "no sampled tokens for request " << id
                                      << ", which needed " << scheduled.num_logits << " logits";
  }
  last_step_.clear();
  DebugCheckInvariants();
  return events;
}

Status Scheduler::Fork(RequestId parent_id, RequestId child_id) {
  const auto it = requests_.find(parent_id);
  if (it == requests_.end()) {
    return NotFoundError("no live request " + std::to_string(parent_id) + " to fork");
  }
  if (requests_.contains(child_id)) {
    return InvalidArgumentError("request id " + std::to_string(child_id) + " is already in use");
  }
  Request& parent = *it->second;
  TM_CHECK(parent.parked && parent.draft_token_ids.empty() && parent.num_evicted_tokens == 0)
      << "request " << parent_id << " forks unparked, with drafts or with evictions";
  auto owned = std::make_unique<Request>(parent);
  Request* child = owned.get();
  child->id = child_id;
  child->arrival_order = next_arrival_order_++;
  requests_.emplace(child_id, std::move(owned));
  std::optional<std::vector<BlockCopy>> copies;
  if (parent.state == RequestState::kRunning &&
      static_cast<int>(running_.size()) < config_.max_num_seqs) {
    copies = kv_.Fork(KvView(parent), child_id);
  }
  if (copies.has_value()) {
    block_copies_.insert(block_copies_.end(), copies->begin(), copies->end());
    running_.insert(std::find(running_.begin(), running_.end(), &parent) + 1, child);
    running_per_tenant_.Add(child->tenant, 1);
  } else {
    // No seat or no block for the copy: it recomputes, from the parent's cached prefix.
    if (child->state == RequestState::kRunning) child->state = RequestState::kPreempted;
    child->num_computed_tokens = 0;
    waiting_.Push(child);
  }
  DebugCheckInvariants();
  return OkStatus();
}

StatusOr<std::optional<FinishReason>> Scheduler::Extend(RequestId id, TokenId token) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) {
    return NotFoundError("no live request " + std::to_string(id) + " to extend");
  }
  Request& request = *it->second;
  TM_CHECK(request.parked) << "request " << id << " is extended without being parked";
  request.parked = false;
  const std::optional<FinishReason> reason = AppendToken(request, token);
  if (reason.has_value()) Finish(&request, *reason);
  DebugCheckInvariants();
  return reason;
}

std::optional<FinishReason> Scheduler::AppendToken(Request& request, TokenId token) {
  request.token_ids.push_back(token);
  ++stats_.num_generation_tokens;
  // A kv_window request evicts instead of reaching the context length.
  const int max_model_len =
      request.kv_window.has_value() ? std::numeric_limits<int>::max() : max_model_len_;
  return CheckStop(request, config_.eos_token_ids, max_model_len);
}

const Request* Scheduler::Find(RequestId id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats stats = stats_;
  stats.num_running = static_cast<int>(running_.size());
  stats.num_waiting = static_cast<int>(waiting_.size());
  stats.kv_usage = kv_.pool().Usage();
  return stats;
}

void Scheduler::ActiveLoras(std::vector<int>& running, std::vector<int>& waiting) const {
  running.clear();
  waiting.clear();
  for (const auto& [id, request] : requests_) {
    if (request->lora == 0) continue;
    std::vector<int>& loras = request->state == RequestState::kRunning ? running : waiting;
    if (std::find(loras.begin(), loras.end(), request->lora) == loras.end()) {
      loras.push_back(request->lora);
    }
  }
  std::sort(running.begin(), running.end());
  std::sort(waiting.begin(), waiting.end());
}

Status Scheduler::CheckInvariants() const {
  TM_RETURN_IF_ERROR(kv_.CheckInvariants());
  if (static_cast<int>(running_.size()) > config_.max_num_seqs) {
    return InternalError(Num(running_.size()) + " running requests, over max_num_seqs");
  }
  if (running_.size() + waiting_.size() != requests_.size()) {
    return InternalError(Num(running_.size()) + " running + " + Num(waiting_.size()) +
                         " waiting != " + Num(requests_.size()) + " live requests");
  }
  TenantCounts counted;
  for (const Request* request : running_) counted.Add(request->tenant, 1);
  for (const Request* request : running_) {
    if (counted.Get(request->tenant) != running_per_tenant_.Get(request->tenant)) {
      return InternalError("tenant '" + request->tenant + "' runs " +
                           Num(counted.Get(request->tenant)) + " requests, counted " +
                           Num(running_per_tenant_.Get(request->tenant)));
    }
  }
  if (counted.num_tenants() != running_per_tenant_.num_tenants()) {
    return InternalError("running requests of " + Num(counted.num_tenants()) + " tenants, " +
                         Num(running_per_tenant_.num_tenants()) + " counted");
  }
  for (const Request* request : running_) {
    const std::string name = "running request " + Num(request->id);
    const int64_t slots = int64_t{kv_.block_size()} *
                          static_cast<int64_t>(kv_.BlockTable(request->id).size());
    if (request->state != RequestState::kRunning || request->num_computed_tokens > slots ||
        request->num_computed_tokens >
            request->num_cache_tokens() + static_cast<int>(request->draft_token_ids.size()) ||
        request->num_cache_tokens() > max_model_len_ + 1 ||
        (request->parked && request->num_computed_tokens != request->num_cache_tokens())) {
      return InternalError(name + (request->parked ? " (parked)" : "") + ": state " +
                           std::string(RequestStateName(request->state)) + ", " +
                           Num(request->num_computed_tokens) + " computed of " +
                           Num(request->num_tokens()) + " tokens, " + Num(slots) + " slots");
    }
  }
  Status status;
  waiting_.ForEach([&](const Request& request) {
    const bool ok = (request.state == RequestState::kWaiting ||
                     request.state == RequestState::kPreempted) &&
                    request.num_computed_tokens == 0 && kv_.BlockTable(request.id).empty();
    if (!ok && status.ok()) {
      status = InternalError("waiting request " + Num(request.id) + " is " +
                             std::string(RequestStateName(request.state)) + ", has computed " +
                             Num(request.num_computed_tokens) + " tokens or holds blocks");
    }
  });
  return status;
}

void Scheduler::DebugCheckInvariants() const {
#ifndef NDEBUG
  const Status status = CheckInvariants();
  TM_CHECK(status.ok()) << status.ToString();
#endif
}

}  // namespace tokenmill
