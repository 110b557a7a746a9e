#include "engine/engine_core_builder.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "cache/kv_cache_sizing.h"
#include "engine/forward_backend.h"
#include "engine/kv_tiering.h"
#include "engine/speculative/draft_model_proposer.h"
#include "engine/speculative/ngram_proposer.h"
#include "model/forward_input.h"

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

// The K/V geometry under config's KV types of the layers of KV group `group` that store KV,
// or of every storing layer (-1: the groups then share one shape, which the caller checks).
KvGeometry GeometryOf(const ModelConfig& mc, const EngineConfig& config, int group) {
  const ModelConfig::LayerShape shape = KvGroupShape(mc, std::max(group, 0));
  int num_layers = 0;
  for (int g = 0; g < NumKvGroups(mc); ++g) {
    if (group < 0 || g == group) num_layers += NumStoringLayersInKvGroup(mc, g);
  }
  KvGeometry geometry{num_layers, shape.n_kv_heads, shape.head_dim,
                      KvElementBits(config.kv_type),
                      static_cast<int>(KvRowScaleBytes(config.kv_type, shape.head_dim))};
  if (mc.HasLatentKv()) geometry.latent_dim = mc.mla.kv_lora_rank;
  if (config.v_type() != config.kv_type) {
    geometry.v_element_bits = KvElementBits(config.v_type());
    geometry.v_scale_bytes = static_cast<int>(KvRowScaleBytes(config.v_type(), shape.head_dim));
  }
  return geometry;
}

// Whether every storing layer's K/V rows have one shape (else the KV groups differ in it).
bool OneKvShape(const ModelConfig& mc) {
  const ModelConfig::LayerShape first = KvGroupShape(mc, 0);
  for (int g = 1; g < NumKvGroups(mc); ++g) {
    const ModelConfig::LayerShape other = KvGroupShape(mc, g);
    if (other.head_dim != first.head_dim || other.n_kv_heads != first.n_kv_heads) return false;
  }
  return true;
}

// Each KV group's pool (model/forward_input.h): the configured block count in every group, or
// as many as the memory holds (a fraction of what `backend` has free, or kv_cache_bytes),
// split between the groups for requests of the context length (PlanKvCacheGroups); more
// than the watermark.
StatusOr<std::vector<int64_t>> NumKvBlocks(const ModelConfig& mc, const EngineConfig& config,
                                           int max_model_len, ForwardBackend& backend) {
  const int num_groups = NumKvGroups(mc);
  std::vector<int64_t> num_blocks(static_cast<size_t>(num_groups), config.num_kv_blocks);
  if (config.num_kv_blocks == 0) {
    const bool split = num_groups == 2 && config.sliding_window_kv_group;
    int64_t kv_bytes = config.kv_cache_bytes;
    if (config.kv_cache_fraction > 0) {
      TM_ASSIGN_OR_RETURN(const int64_t free_bytes, backend.FreeMemoryBytes());
      kv_bytes = static_cast<int64_t>(static_cast<double>(free_bytes) * config.kv_cache_fraction);
    }
    if (!split) {
      if (!OneKvShape(mc)) {
        return InvalidArgumentError(
            "this model's sliding-window and full-attention layers store K/V rows of "
            "different shapes, which need their own KV pools: drop --no-sliding-window-kv");
      }
      TM_ASSIGN_OR_RETURN(KvCachePlan plan, PlanKvCache(GeometryOf(mc, config, -1),
                                                        config.block_size, kv_bytes));
      num_blocks.assign(num_blocks.size(), plan.num_blocks);
      spdlog::info("{}", plan.Describe());
    } else {
      const KvGroupsShape shape{.full = GeometryOf(mc, config, 0),
                                .sliding = GeometryOf(mc, config, 1),
                                .sliding_window = mc.sliding_window};
      // One step of a request alone: its window and a whole token budget (KvCacheManager).
      const int min_sliding_blocks =
          config.watermark_blocks + 1 +
          (config.scheduler.max_num_batched_tokens + mc.sliding_window - 1 + config.block_size -
           1) / config.block_size;
      TM_ASSIGN_OR_RETURN(KvGroupsPlan plan,
                          PlanKvCacheGroups(shape, config.block_size, kv_bytes, max_model_len,
                                            min_sliding_blocks));
      num_blocks = {plan.full.num_blocks, plan.sliding.num_blocks};
      spdlog::info("{}", plan.Describe());
    }
  }
  if (num_blocks[0] <= config.watermark_blocks) {
    return InvalidArgumentError("the KV pool has " + std::to_string(num_blocks[0]) +
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
  // Every group of the draft model reads the target's group-0 block ids: nothing is released.
  const std::vector<int64_t> draft_blocks(
      static_cast<size_t>(NumKvGroups(draft_model->config())),
      num_blocks + DraftModelProposer::NumScratchBlocks(max_drafting,
                                                        config.spec.num_speculative_tokens,
                                                        config.block_size));
  TM_RETURN_IF_ERROR(draft_backend->AllocateKv(config.kv_type, config.v_type(), draft_blocks,
                                                config.block_size));
  return std::unique_ptr<DraftProposer>(std::make_unique<DraftModelProposer>(
      *draft_model, std::move(draft_backend), num_blocks, config.block_size, max_drafting,
      config.spec.num_speculative_tokens, tokenizer.end_of_generation_ids()));
}

// The tiers below the pool (config.kv_tiers) over the runner's pool, or null when both are off.
StatusOr<std::unique_ptr<KvTiering>> MakeTiering(const Model& model, const EngineConfig& config,
                                                  KvCacheManager& kv, ForwardBackend& backend) {
  const KvTierSettings& settings = config.kv_tiers;
  if (settings.dir.empty() && settings.host_bytes == 0) return std::unique_ptr<KvTiering>();
  if (!config.enable_prefix_caching || model.config().encoder) {
    return InvalidArgumentError(
        "--kv-cache-dir and --kv-cache-host-size keep prefix blocks below the pool, which needs "
        "prefix caching (an encoder caches none): drop --no-prefix-caching, or those flags");
  }
  if (config.spec.method == SpecMethod::kDraft) {
    return InvalidArgumentError(
        "--kv-cache-dir and --kv-cache-host-size do not keep the draft model's KV: drop them or "
        "use --spec ngram");
  }
  // Blocks in host memory live as long as the process: only files need the model's digest.
  const std::string digest =
      settings.dir.empty()
          ? std::string("(this process)")
          : CachedModelDigest(settings.dir, settings.model_path,
                              [&model] { return ModelTensorDigest(model.file()); });
  const std::string device =
      config.device == Device::kCuda
          ? std::string("cuda")
          : "cpu " + std::string(IsaName(config.isa.value_or(BestCpuIsa())));
  std::string kv_types(KvTypeName(config.kv_type));
  kv_types += " / " + std::string(KvTypeName(config.v_type()));
  return KvTiering::Open(
      settings,
      KvTierIdentity(digest, device, kv_types, config.block_size, KvModelSettings(model.config())),
      kv, backend);
}

// An encoder keeps no K/V past the step that computes a prompt: they are that step's scratch,
// kept in f32 as llama.cpp keeps them (it caches none), whatever --kv-cache-dtype says.
EngineConfig ForModel(const ModelConfig& mc, EngineConfig config) {
  if (mc.encoder) {
    config.kv_type = KvType::kF32;
    config.kv_type_v.reset();
  }
  return config;
}

// The pools' share of config.kv_memory_budget, releasing through `backend` and the draft
// model's proposer (in `speculator`); null without a budget.
StatusOr<std::unique_ptr<ElasticKv>> MakeElasticKv(const ModelConfig& mc,
                                                   const EngineConfig& config,
                                                   const Model* draft_model, KvCacheManager& kv,
                                                   ForwardBackend& backend,
                                                   Speculator* speculator) {
  if (config.kv_memory_budget == nullptr) return std::unique_ptr<ElasticKv>();
  if (config.device != Device::kCpu) {
    return InvalidArgumentError("a KV memory limit shared by several models needs pools that "
                                "give memory back, which only the CPU's do: serve one model a "
                                "server with --device cuda");
  }
  // Group 0's blocks hold every layer unless group 1 has its own pool; a draft model's pool
  // takes the same ids.
  std::vector<int64_t> block_bytes;
  for (int group = 0; group < kv.num_groups(); ++group) {
    block_bytes.push_back(
        GeometryOf(mc, config, kv.num_groups() == 1 ? -1 : group).BytesPerToken() *
        config.block_size);
  }
  const bool drafts = config.spec.method == SpecMethod::kDraft && speculator != nullptr;
  for (int group = 0; drafts && group < NumKvGroups(draft_model->config()); ++group) {
    block_bytes[0] +=
        GeometryOf(draft_model->config(), config, group).BytesPerToken() * config.block_size;
  }
  ElasticKv::ReleaseKv release = [&backend, speculator = drafts ? speculator : nullptr](
                                     int group, int64_t first, int64_t end) -> Status {
    TM_RETURN_IF_ERROR(backend.ReleaseKv(group, first, end));
    return group == 0 && speculator != nullptr ? speculator->ReleaseKv(first, end) : OkStatus();
  };
  return std::make_unique<ElasticKv>(kv, std::move(release),
                                     config.kv_memory_budget->Join(nullptr),
                                     std::move(block_bytes));
}

}  // namespace

StatusOr<std::unique_ptr<EngineCore>> BuildEngineCore(const Model& model,
                                                      const Tokenizer& tokenizer,
                                                      const EngineConfig& requested,
                                                      const Model* draft_model) {
  const EngineConfig config = ForModel(model.config(), requested);
  TM_RETURN_IF_ERROR(CheckFits(model, tokenizer, config, draft_model));
  // The backend first: on a GPU the weights take their memory before the KV pool is sized.
  TM_ASSIGN_OR_RETURN(std::unique_ptr<ForwardBackend> backend, CreateForwardBackend(model, config));
  const ModelConfig& mc = model.config();
  SchedulerConfig sc = config.scheduler;
  sc.max_model_len = std::min(sc.max_model_len, mc.context_length);
  // An encoder attends both ways: a prompt is computed whole in one step, and a block's K/V
  // depend on the tokens after it, so no prefix is cached.
  sc.whole_prompts = mc.encoder;
  TM_ASSIGN_OR_RETURN(const std::vector<int64_t> num_blocks,
                      NumKvBlocks(mc, config, sc.max_model_len, *backend));
  KvCacheConfig kv_config{.num_blocks = static_cast<int>(num_blocks[0]),
                          .block_size = config.block_size,
                          .enable_prefix_caching = config.enable_prefix_caching && !mc.encoder,
                          .watermark_blocks = config.watermark_blocks,
                          .sliding_window = 0,
                          .sliding_num_blocks = 0};
  // Without the sliding-window group the scheduler's tables serve every group (nothing is
  // released), each group's pool as large as group 0's.
  if (num_blocks.size() == 2 && config.sliding_window_kv_group) {
    kv_config.sliding_window = mc.sliding_window;
    kv_config.sliding_num_blocks = static_cast<int>(num_blocks[1]);
    const int64_t min_blocks = config.watermark_blocks + 1 +
                               (mc.sliding_window + config.block_size - 1) / config.block_size;
    if (num_blocks[1] < min_blocks) {
      return InvalidArgumentError(
          "the sliding-window layers' KV pool has " + std::to_string(num_blocks[1]) +
          " blocks; a window of " + std::to_string(mc.sliding_window) + " tokens needs at least " +
          std::to_string(min_blocks) + ": raise --num-kv-blocks or the KV cache memory");
    }
  }
  auto kv = std::make_unique<KvCacheManager>(kv_config);
  sc.eos_token_ids = tokenizer.end_of_generation_ids();
  auto scheduler = std::make_unique<Scheduler>(sc, *kv);
  TM_RETURN_IF_ERROR(
      backend->AllocateKv(config.kv_type, config.v_type(), num_blocks, config.block_size));
  auto runner =
      std::make_unique<ModelRunner>(model, std::move(backend), num_blocks[0], config.block_size);
  for (const auto& [id, adapter] : config.lora_adapters) {
    TM_RETURN_IF_ERROR(runner->AddLora(id, adapter, ModelTensorDigest(adapter->file())));
  }
  std::unique_ptr<Speculator> speculator;
  if (config.spec.method != SpecMethod::kNone) {
    if (mc.encoder) {
      return InvalidArgumentError("an encoder (" + mc.arch_name +
                                  ") generates no tokens to speculate on: drop --spec");
    }
    TM_ASSIGN_OR_RETURN(std::unique_ptr<DraftProposer> proposer,
                        MakeProposer(tokenizer, config, draft_model, num_blocks[0]));
    speculator = std::make_unique<Speculator>(config.spec, std::move(proposer));
  }
  TM_ASSIGN_OR_RETURN(std::unique_ptr<ElasticKv> elastic_kv,
                      MakeElasticKv(mc, config, draft_model, *kv, runner->backend(),
                                    speculator.get()));
  TM_ASSIGN_OR_RETURN(std::unique_ptr<KvTiering> tiering,
                      MakeTiering(model, config, *kv, runner->backend()));
  return std::make_unique<EngineCore>(tokenizer, std::move(kv), std::move(scheduler),
                                      std::move(runner), std::move(speculator),
                                      std::move(tiering), std::move(elastic_kv));
}

}  // namespace tokenmill
