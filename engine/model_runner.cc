#include "engine/model_runner.h"

#include <algorithm>
#include <string>

#include "common/check.h"
#include "engine/batch_inputs.h"
#include "engine/kv_tiering.h"
#include "engine/sampling/rejection_sampler.h"
#include "model/forward_input.h"

namespace tokenmill {

ModelRunner::ModelRunner(const Model& model, std::unique_ptr<ForwardBackend> backend,
                         int64_t num_blocks, int block_size)
    : model_(model),
      backend_(std::move(backend)),
      num_blocks_(num_blocks),
      block_size_(block_size) {}

Status ModelRunner::AddLora(int id, std::shared_ptr<const LoraAdapter> adapter,
                            std::string digest) {
  TM_RETURN_IF_ERROR(backend_->AddLora(*adapter));
  loras_.emplace(id, HeldLora{std::move(adapter), std::move(digest)});
  return OkStatus();
}

void ModelRunner::RemoveLora(int id) {
  const auto it = loras_.find(id);
  if (it == loras_.end()) return;
  backend_->RemoveLora(*it->second.adapter);
  loras_.erase(it);
}

std::vector<int> ModelRunner::PromptLogitRows(const SchedulerOutput& step,
                                              const Scheduler& scheduler) const {
  std::vector<int> rows(step.requests.size(), 0);
  for (size_t i = 0; i < step.requests.size(); ++i) {
    const ScheduledRequest& r = step.requests[i];
    const Request* request = scheduler.Find(r.id);
    TM_CHECK(request != nullptr) << "scheduled request " << r.id << " is not live";
    if (!request->sampling.prompt_logprobs) continue;
    // The row at position p predicts token p + 1; the last prompt row predicts the output.
    const int end = std::min(r.num_computed_tokens + r.num_new_tokens,
                             request->num_prompt_tokens - 1);
    rows[i] = std::max(0, end - r.num_computed_tokens);
  }
  return rows;
}

void ModelRunner::TakePromptLogprobs(const SchedulerOutput& step, const Scheduler& scheduler,
                                     std::span<const int> prompt_rows, const BatchInputs& in,
                                     std::span<const float> logits) {
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  for (size_t i = 0; i < step.requests.size(); ++i) {
    const ScheduledRequest& r = step.requests[i];
    const Request* request = scheduler.Find(r.id);
    const int start = r.num_computed_tokens;
    if (!request->sampling.prompt_logprobs || (prompt_rows[i] == 0 && start != 0)) continue;
    const int top = *request->sampling.prompt_logprobs;
    PromptLogprobsChunk& chunk = prompt_logprobs_[r.id];
    chunk.first_token = start + 1;
    if (start == 0) {
      chunk.first_token = 0;
      chunk.entries.push_back(TokenLogprobs{
          .chosen = {.token_id = request->token_ids[0], .logprob = 0.0f, .rank = 0}, .top = {}});
    }
    // This request's prompt rows are the first of its logit rows, before its sampling rows.
    const size_t first_row = static_cast<size_t>(in.first_logit[i] - prompt_rows[i]);
    for (int j = 0; j < prompt_rows[i]; ++j) {
      const std::span<const float> row =
          logits.subspan((first_row + static_cast<size_t>(j)) * n_vocab, n_vocab);
      const TokenId next = request->token_ids[static_cast<size_t>(start + j + 1)];
      chunk.entries.push_back(ComputeTokenLogprobs(row, next, top));
    }
  }
}

void ModelRunner::PlanHiddenRows(const SchedulerOutput& step, const Scheduler& scheduler,
                                 const BatchInputs& in) {
  struct Planned {
    RequestId id;
    int first_position;
    size_t first_row;  // in hidden_row_ids_
    size_t num_rows;
  };
  std::vector<Planned> planned;
  hidden_row_ids_.clear();
  for (size_t i = 0; i < step.requests.size(); ++i) {
    const ScheduledRequest& r = step.requests[i];
    const Request& request = *scheduler.Find(r.id);
    if (!request.embeds()) continue;
    int first = 0;  // of the request's rows this step
    if (request.prompt_use == PromptUse::kEmbedLastRow) {
      if (r.num_computed_tokens + r.num_new_tokens < request.num_prompt_tokens) continue;
      first = request.num_prompt_tokens - 1 - r.num_computed_tokens;
    }
    planned.push_back(Planned{.id = r.id,
                              .first_position = r.num_computed_tokens + first,
                              .first_row = hidden_row_ids_.size(),
                              .num_rows = static_cast<size_t>(r.num_new_tokens - first)});
    for (int row = first; row < r.num_new_tokens; ++row) {
      hidden_row_ids_.push_back(in.cu_seqlens[i] + row);
    }
  }
  const size_t d = static_cast<size_t>(hidden_size());
  hidden_.resize(hidden_row_ids_.size() * d);
  hidden_rows_.clear();
  for (const Planned& p : planned) {
    hidden_rows_.push_back(StepHiddenRows{
        .id = p.id,
        .first_position = p.first_position,
        .rows = std::span<const float>(hidden_).subspan(p.first_row * d, p.num_rows * d)});
  }
}

bool ModelRunner::OnlyArgmaxNeeded(const SchedulerOutput& step, const Scheduler& scheduler,
                                   const GrammarConstraints& grammars) const {
  for (const ScheduledRequest& r : step.requests) {
    if (r.num_logits == 0) continue;
    const Request* request = scheduler.Find(r.id);
    TM_CHECK(request != nullptr) << "scheduled request " << r.id << " is not live";
    if (request->sampling.wants_logprobs() || grammars.Constrains(r.id) ||
        !PicksTheRawArgmax(NextTokenContext(*request))) {
      return false;
    }
  }
  return true;
}

StatusOr<ModelOutput> ModelRunner::Execute(const SchedulerOutput& step,
                                           const Scheduler& scheduler, Sampler& sampler,
                                           StepLogprobs& logprobs,
                                           GrammarConstraints& grammars,
                                           std::vector<RequestId>& ended,
                                           const DraftProbs& draft_probs) {
  logprobs.clear();
  ended.clear();
  prompt_logprobs_.clear();
  if (!step.block_copies.empty()) {
    std::vector<KvBlockCopy> copies;
    for (const BlockCopy& c : step.block_copies) {
      copies.push_back(KvBlockCopy{.group = c.group, .src = c.src, .dst = c.dst});
    }
    TM_RETURN_IF_ERROR(backend_->CopyKvBlocks(copies));
  }
  const std::vector<int> prompt_rows = PromptLogitRows(step, scheduler);
  // A step that computes prompt rows of such a request takes every row's logits (its prompt
  // entries come from them); its decode steps may take the argmax alone.
  const bool any_prompt_logprobs =
      std::any_of(step.requests.begin(), step.requests.end(), [&](const ScheduledRequest& r) {
        const Request& request = *scheduler.Find(r.id);
        return request.sampling.prompt_logprobs.has_value() &&
               r.num_computed_tokens < request.num_prompt_tokens;
      });
  const BatchInputs in = BuildBatchInputs(step, block_size_, NumKvGroups(model_.config()),
                                          prompt_rows);
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  PlanHiddenRows(step, scheduler, in);
  seq_loras_.clear();  // stays empty while no request of the step has an adapter
  for (size_t i = 0; i < step.requests.size(); ++i) {
    const int lora = scheduler.Find(step.requests[i].id)->lora;
    if (lora == 0) continue;
    seq_loras_.resize(step.requests.size(), nullptr);
    seq_loras_[i] = loras_.at(lora).adapter.get();
  }
  const ForwardInput forward_input{.token_ids = in.token_ids,
                                   .batch = in.batch(),
                                   .logit_rows = in.logit_rows,
                                   .hidden_rows = hidden_row_ids_,
                                   .hidden_out = hidden_,
                                   .seq_loras = seq_loras_};
  const bool argmax_only = !in.logit_rows.empty() && !any_prompt_logprobs &&
                           OnlyArgmaxNeeded(step, scheduler, grammars);
  std::span<float> logits;
  if (argmax_only) {
    row_argmax_.resize(in.logit_rows.size());
    TM_RETURN_IF_ERROR(backend_->RunGreedy(forward_input, row_argmax_));
    ++argmax_steps_;
  } else {
    TM_ASSIGN_OR_RETURN(logits, backend_->LogitsBuffer(in.logit_rows.size() * n_vocab));
    TM_RETURN_IF_ERROR(backend_->Run(forward_input, logits));
    if (!in.logit_rows.empty()) ++logits_steps_;
  }
  // Before sampling: a grammar masks sampling rows in place, never prompt rows.
  if (!argmax_only) TakePromptLogprobs(step, scheduler, prompt_rows, in, logits);
  ModelOutput out;
  for (size_t i = 0; i < step.requests.size(); ++i) {
    const ScheduledRequest& r = step.requests[i];
    if (r.num_logits == 0) continue;
    const Request* request = scheduler.Find(r.id);
    TM_CHECK(request != nullptr) << "scheduled request " << r.id << " is not live";
    SampledTokens sampled{.id = r.id, .token_ids = {}, .next_draft_token_ids = {}};
    const std::span<const TokenId> drafts =
        std::span<const TokenId>(r.token_ids).last(static_cast<size_t>(r.num_draft_tokens));
    const size_t first_row = static_cast<size_t>(in.first_logit[i]);
    if (argmax_only) {
      sampled.token_ids = AcceptArgmaxDrafts(
          drafts, std::span<const int32_t>(row_argmax_).subspan(first_row, drafts.size() + 1));
      out.requests.push_back(std::move(sampled));
      continue;
    }
    std::vector<TokenLogprobs>* request_logprobs =
        request->sampling.wants_logprobs() ? &logprobs[r.id] : nullptr;
    const auto q = draft_probs.find(r.id);
    std::span<const float> q_rows;
    if (q != draft_probs.end() && r.num_draft_tokens > 0) {
      // The scheduler may have cut the drafts short (budget, context): their first rows.
      q_rows = std::span<const float>(q->second).first(drafts.size() * n_vocab);
    }
    const std::span<float> rows =
        logits.subspan(first_row * n_vocab, (drafts.size() + 1) * n_vocab);
    const bool constrained = grammars.Constrains(r.id);
    if (constrained) grammars.MaskRows(*request, drafts, rows, n_vocab);
    std::vector<SampledToken> tokens =
        VerifyDrafts(sampler, DraftVerification{.request = request,
                                                .drafts = drafts,
                                                .draft_probs = q_rows,
                                                .logits = rows,
                                                .n_vocab = n_vocab});
    for (SampledToken& token : tokens) sampled.token_ids.push_back(token.token_id);
    if (constrained) {
      if (const std::optional<size_t> kept = grammars.Accept(r.id, sampled.token_ids)) {
        sampled.token_ids.resize(*kept);
        tokens.resize(*kept);
        ended.push_back(r.id);
      }
    }
    if (request_logprobs != nullptr) {
      for (SampledToken& token : tokens) request_logprobs->push_back(std::move(*token.logprobs));
    }
    out.requests.push_back(std::move(sampled));
  }
  return out;
}

}  // namespace tokenmill
