#include "engine/model_runner.h"

#include <string>

#include "common/check.h"
#include "engine/batch_inputs.h"

namespace tokenmill {

ModelRunner::ModelRunner(const Model& model, CpuIsa isa, int num_threads, KvType kv_type,
                         int64_t num_blocks, int block_size)
    : model_(model),
      pool_(std::make_unique<ThreadPool>(num_threads)),
      forward_(model, CpuContext{&KernelTable(isa), pool_.get()}),
      kv_(model.config(), kv_type, num_blocks, block_size),
      num_blocks_(num_blocks),
      block_size_(block_size) {}

StatusOr<ModelOutput> ModelRunner::Execute(const SchedulerOutput& step,
                                           const Scheduler& scheduler, Sampler& sampler) {
  const BatchInputs in = BuildBatchInputs(step, block_size_);
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  logits_.resize(in.logit_rows.size() * n_vocab);
  TM_RETURN_IF_ERROR(forward_.Run({in.token_ids, in.batch(), in.logit_rows}, kv_.view(),
                                  logits_));
  ModelOutput out;
  for (size_t i = 0; i < step.requests.size(); ++i) {
    const ScheduledRequest& r = step.requests[i];
    if (r.num_logits == 0) continue;
    const Request* request = scheduler.Find(r.id);
    TM_CHECK(request != nullptr) << "scheduled request " << r.id << " is not live";
    SampledTokens sampled{.id = r.id, .token_ids = {}, .next_draft_token_ids = {}};
    const std::span<const TokenId> drafts =
        std::span<const TokenId>(r.token_ids).last(static_cast<size_t>(r.num_draft_tokens));
    for (int k = 0; k < r.num_logits; ++k) {
      const size_t row = static_cast<size_t>(in.first_logit[i] + k);
      const TokenId token =
          sampler.Sample(std::span<const float>(logits_).subspan(row * n_vocab, n_vocab), *request);
      sampled.token_ids.push_back(token);
      // A draft stands while it equals what was sampled at the row before it.
      if (k >= r.num_draft_tokens || token != drafts[static_cast<size_t>(k)]) break;
    }
    out.requests.push_back(std::move(sampled));
  }
  return out;
}

}  // namespace tokenmill
