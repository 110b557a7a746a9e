// Runs one scheduler step: one forward pass over all scheduled sequences with logits only
// for the rows that sample, then the sampler, with greedy verification of draft tokens. A
// step whose sampling rows all pick the raw argmax (greedy, no penalty, bias, grammar or
// logprobs) takes only their argmax from the backend (on the device for CUDA); otherwise
// every row's logits come back, into the backend's own (for CUDA page-locked) memory.
// Owns the backend, which holds the KV memory the cache manager's block ids address
// (slot = block * block_size + offset). Engine thread only.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/batch_inputs.h"
#include "engine/forward_backend.h"
#include "engine/grammar_constraints.h"
#include "engine/sampling/rejection_sampler.h"
#include "engine/sampling/sampler.h"
#include "model/classifier.h"
#include "model/lora.h"
#include "model/model.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_output.h"

namespace tokenmill {

// Per request, the logprobs of its sampled tokens this step, in order.
using StepLogprobs = std::unordered_map<RequestId, std::vector<TokenLogprobs>>;

using StepPromptLogprobs = std::unordered_map<RequestId, PromptLogprobsChunk>;

// An embedding's hidden rows of one step (ForwardInput::hidden_rows, n_embd floats each), the
// first at prompt position first_position.
struct StepHiddenRows {
  RequestId id = 0;
  int first_position = 0;
  std::span<const float> rows;
};

class ModelRunner {
 public:
  // `model` must outlive the runner; `backend` has its KV pool of num_blocks allocated.
  ModelRunner(const Model& model, std::unique_ptr<ForwardBackend> backend, int64_t num_blocks,
              int block_size);

  // Copies step.block_copies' K/V, then computes `step` (from scheduler.Schedule()) and
  // samples a token for each request with num_logits > 0: accepted drafts then one more
  // token, verified by rejection sampling (engine/sampling/rejection_sampler.h) against
  // `draft_probs` (the draft model's q rows of the requests whose drafts were sampled; none:
  // drafts are deterministic). `logprobs` gets, for each request that asked, one entry per
  // sampled token (cleared first). The rows of requests `grammars` constrains are masked
  // first, and their sampled tokens accepted; `ended` gets those whose grammar ended
  // (cleared first).
  StatusOr<ModelOutput> Execute(const SchedulerOutput& step, const Scheduler& scheduler,
                                Sampler& sampler, StepLogprobs& logprobs,
                                GrammarConstraints& grammars, std::vector<RequestId>& ended,
                                const DraftProbs& draft_probs = {});

  // The last Execute's prompt logprobs, for the requests that asked and computed prompt rows
  // (a recompute after preemption computes them again).
  const StepPromptLogprobs& prompt_logprobs() const { return prompt_logprobs_; }

  // The last Execute's hidden rows of the embeddings it computed (their PromptUse: each row,
  // or the prompt's last); valid until the next Execute.
  const std::vector<StepHiddenRows>& hidden_rows() const { return hidden_rows_; }
  int hidden_size() const { return model_.config().n_embd; }
  bool encoder() const { return model_.config().encoder; }
  bool has_classifier() const { return model_.weights().classifier.present(); }
  bool has_lora_adapters() const { return !loras_.empty(); }
  bool has_lora(int id) const { return loras_.contains(id); }
  // The digest of adapter `id`'s tensors (GenerateRequest::lora; has_lora(id)).
  const std::string& lora_digest(int id) const { return loras_.at(id).digest; }
  // Adapter `id` from now on (an id not held), `digest` its tensors' ModelTensorDigest, given
  // to the backend too (ForwardBackend::AddLora's error, and nothing held, when it cannot take
  // it); RemoveLora once no request runs with it.
  Status AddLora(int id, std::shared_ptr<const LoraAdapter> adapter, std::string digest);
  void RemoveLora(int id);
  // A pooled hidden state through the model's classification head (model/classifier.h).
  std::vector<float> Classify(std::span<const float> pooled) const {
    return tokenmill::Classify(model_.config(), model_.weights().classifier, pooled);
  }

  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  // Where the KV pool lives (for a tier below it: engine/kv_tiering.h).
  ForwardBackend& backend() { return *backend_; }
  // Steps with sampling rows that took every row's logits / only each row's argmax.
  int64_t logits_steps() const { return logits_steps_; }
  int64_t argmax_steps() const { return argmax_steps_; }

 private:
  // Per request of `step`: its rows at prompt positions that predict a prompt token, when it
  // asked for prompt logprobs (0 otherwise).
  std::vector<int> PromptLogitRows(const SchedulerOutput& step, const Scheduler& scheduler) const;
  // prompt_logprobs_ from the logits of those rows.
  void TakePromptLogprobs(const SchedulerOutput& step, const Scheduler& scheduler,
                          std::span<const int> prompt_rows, const BatchInputs& in,
                          std::span<const float> logits);
  // The batch rows of `step`'s embeddings whose hidden states their pooling reads
  // (hidden_row_ids_), and where the run puts them (hidden_rows_' spans of hidden_).
  void PlanHiddenRows(const SchedulerOutput& step, const Scheduler& scheduler,
                      const BatchInputs& in);
  // Whether every request of `step` that samples picks the raw argmax and needs nothing else.
  bool OnlyArgmaxNeeded(const SchedulerOutput& step, const Scheduler& scheduler,
                        const GrammarConstraints& grammars) const;

  const Model& model_;
  std::unique_ptr<ForwardBackend> backend_;
  int64_t num_blocks_;
  int block_size_;
  std::vector<int32_t> row_argmax_;
  StepPromptLogprobs prompt_logprobs_;
  struct HeldLora {
    std::shared_ptr<const LoraAdapter> adapter;
    std::string digest;  // of its tensors: its cached prefixes' salt
  };
  std::map<int, HeldLora> loras_;  // by id
  std::vector<const LoraAdapter*> seq_loras_;  // the step's, per sequence (none: empty)
  std::vector<int32_t> hidden_row_ids_;
  std::vector<float> hidden_;
  std::vector<StepHiddenRows> hidden_rows_;
  int64_t logits_steps_ = 0;
  int64_t argmax_steps_ = 0;
};

}  // namespace tokenmill
