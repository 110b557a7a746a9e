#include "engine/model_runner.h"

#include <string>

#include "common/check.h"
#include "engine/batch_inputs.h"

namespace tokenmill {

ModelRunner::ModelRunner(const Model& model, std::unique_ptr<ForwardBackend> backend,
                         int64_t num_blocks, int block_size)
    : model_(model),
      backend_(std::move(backend)),
      num_blocks_(num_blocks),
      block_size_(block_size) {}

StatusOr<ModelOutput> ModelRunner::Execute(const SchedulerOutput& step,
                                           const Scheduler& scheduler, Sampler& sampler,
                                           StepLogprobs& logprobs) {
  logprobs.clear();
  const BatchInputs in = BuildBatchInputs(step, block_size_);
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  logits_.resize(in.logit_rows.size() * n_vocab);
  TM_RETURN_IF_ERROR(backend_->Run({in.token_ids, in.batch(), in.logit_rows}, logits_));
  ModelOutput out;
  std::vector<TokenId> tokens_with_drafts;
  for (size_t i = 0; i < step.requests.size(); ++i) {
    const ScheduledRequest& r = step.requests[i];
    if (r.num_logits == 0) continue;
    const Request* request = scheduler.Find(r.id);
    TM_CHECK(request != nullptr) << "scheduled request " << r.id << " is not live";
    SampledTokens sampled{.id = r.id, .token_ids = {}, .next_draft_token_ids = {}};
    std::vector<TokenLogprobs>* request_logprobs =
        request->sampling.wants_logprobs() ? &logprobs[r.id] : nullptr;
    const std::span<const TokenId> drafts =
        std::span<const TokenId>(r.token_ids).last(static_cast<size_t>(r.num_draft_tokens));
    // Row k samples after the verified tokens and drafts[0, k).
    tokens_with_drafts.assign(request->token_ids.begin(), request->token_ids.end());
    tokens_with_drafts.insert(tokens_with_drafts.end(), drafts.begin(), drafts.end());
    const std::span<const TokenId> all(tokens_with_drafts);
    for (int k = 0; k < r.num_logits; ++k) {
      const size_t row = static_cast<size_t>(in.first_logit[i] + k);
      const SamplingContext context{
          .params = &request->sampling,
          .prompt_token_ids = all.first(static_cast<size_t>(request->num_prompt_tokens)),
          .output_token_ids = all.subspan(static_cast<size_t>(request->num_prompt_tokens),
                                          static_cast<size_t>(request->num_output_tokens() + k))};
      SampledToken token =
          sampler.Sample(std::span<const float>(logits_).subspan(row * n_vocab, n_vocab), context);
      sampled.token_ids.push_back(token.token_id);
      if (request_logprobs != nullptr) request_logprobs->push_back(std::move(*token.logprobs));
      // A draft stands while it equals what was sampled at the row before it.
      if (k >= r.num_draft_tokens || token.token_id != drafts[static_cast<size_t>(k)]) break;
    }
    out.requests.push_back(std::move(sampled));
  }
  return out;
}

}  // namespace tokenmill
