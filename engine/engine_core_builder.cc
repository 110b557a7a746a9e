#include "engine/engine_core_builder.h"

#include <algorithm>
#include <string>
#include <utility>

#include "cache/kv_cache_sizing.h"
#include "engine/forward_backend.h"
#include "engine/spec/draft_model_proposer.h"
#include "engine/spec/ngram_proposer.h"

namespace tokenmill {
namespace {

// The config, the draft model and the tokenizer against the model.
Status CheckFits(const Model& model, const Tokenizer& tokenizer, const EngineConfig& config,
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
  const int n_vocab = model.config().n_vocab;
  if (tokenizer.vocab_size() > n_vocab) {
    return InvalidArgumentError("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                                " tokens but the model's output only " +
                                std::to_string(n_vocab) + ": use the tokenizer of this model");
  }
  return OkStatus();
}

// The KV pool's block count: the configured one, or as many as its memory holds (a fraction
// of what `backend` has free, or kv_cache_bytes); more than the watermark.
StatusOr<int> NumKvBlocks(const ModelConfig& mc, const EngineConfig& config,
                          ForwardBackend& backend) {
  int num_blocks = config.num_kv_blocks;
  if (num_blocks == 0) {
    int64_t kv_bytes = config.kv_cache_bytes;
    if (config.kv_cache_fraction > 0) {
      TM_ASSIGN_OR_RETURN(const int64_t free_bytes, backend.FreeMemoryBytes());
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
  return num_blocks;
}

// The proposer config.spec asks for (not kNone): n-gram lookup, or the draft model on the
// same device with its own KV pool over the same block ids (plus scratch).
StatusOr<std::unique_ptr<DraftProposer>> MakeProposer(const Tokenizer& tokenizer,
                                                      const EngineConfig& config,
                                                      const Model* draft_model, int num_blocks) {
  if (config.spec.method == SpecMethod::kNgram) {
    return std::unique_ptr<DraftProposer>(
        std::make_unique<NgramProposer>(config.spec.ngram_min, config.spec.ngram_max));
  }
  // At most max_batch_rows / 2 requests draft in one step (k + 1 >= 2 rows).
  const int max_drafting = config.spec.max_batch_rows / 2;
  TM_ASSIGN_OR_RETURN(std::unique_ptr<ForwardBackend> draft_backend,
                      CreateForwardBackend(*draft_model, config));
  TM_RETURN_IF_ERROR(draft_backend->AllocateKv(
      config.kv_type,
      num_blocks + DraftModelProposer::NumScratchBlocks(
                       max_drafting, config.spec.num_speculative_tokens, config.block_size),
      config.block_size));
  return std::unique_ptr<DraftProposer>(std::make_unique<DraftModelProposer>(
      *draft_model, std::move(draft_backend), num_blocks, config.block_size, max_drafting,
      config.spec.num_speculative_tokens, tokenizer.end_of_generation_ids()));
}

}  // namespace

StatusOr<std::unique_ptr<EngineCore>> BuildEngineCore(const Model& model,
                                                      const Tokenizer& tokenizer,
                                                      const EngineConfig& config,
                                                      const Model* draft_model) {
  TM_RETURN_IF_ERROR(CheckFits(model, tokenizer, config, draft_model));
  // The backend first: on a GPU the weights take their memory before the KV pool is sized.
  TM_ASSIGN_OR_RETURN(std::unique_ptr<ForwardBackend> backend, CreateForwardBackend(model, config));
  TM_ASSIGN_OR_RETURN(const int num_blocks, NumKvBlocks(model.config(), config, *backend));
  auto kv = std::make_unique<KvCacheManager>(KvCacheConfig{
      .num_blocks = num_blocks,
      .block_size = config.block_size,
      .enable_prefix_caching = config.enable_prefix_caching,
      .watermark_blocks = config.watermark_blocks});
  SchedulerConfig sc = config.scheduler;
  sc.max_model_len = std::min(sc.max_model_len, model.config().context_length);
  sc.eos_token_ids = tokenizer.end_of_generation_ids();
  auto scheduler = std::make_unique<Scheduler>(sc, *kv);
  TM_RETURN_IF_ERROR(backend->AllocateKv(config.kv_type, num_blocks, config.block_size));
  auto runner =
      std::make_unique<ModelRunner>(model, std::move(backend), num_blocks, config.block_size);
  std::unique_ptr<Speculator> speculator;
  if (config.spec.method != SpecMethod::kNone) {
    TM_ASSIGN_OR_RETURN(std::unique_ptr<DraftProposer> proposer,
                        MakeProposer(tokenizer, config, draft_model, num_blocks));
    speculator = std::make_unique<Speculator>(config.spec, std::move(proposer));
  }
  return std::make_unique<EngineCore>(tokenizer, std::move(kv), std::move(scheduler),
                                      std::move(runner), std::move(speculator),
                                      config.enable_prefix_caching);
}

}  // namespace tokenmill
