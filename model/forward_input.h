// What every backend's forward pass (model/forward.h on the CPU, model/cuda/ on a GPU) runs
// one step over: the step's tokens as a ragged batch with its KV groups' block tables
// (kernels/paged_kv.h), the rows that need logits, and the check they all start with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"
#include "kernels/kv_cache_view.h"
#include "kernels/paged_kv.h"
#include "model/config.h"

namespace tokenmill {

class LoraAdapter;  // model/lora.h

// The model's KV groups (kernels/paged_kv.h): layers that share block tables. Group 0 holds
// the full-attention layers; a model with both sliding-window and full-attention layers puts
// its sliding-window layers in group 1, whose blocks before the window are released
// (cache/kv_cache_manager.h). A model whose every layer slides has one group that keeps
// everything: group 0's prefix ids, which group 1's prefix cache is keyed by, need a group
// that holds every block.
int NumKvGroups(const ModelConfig& config);
int KvGroupOfLayer(const ModelConfig& config, int layer);
int NumLayersInKvGroup(const ModelConfig& config, int group);
// Of those, the layers that store their own KV (ModelConfig::StoresKv): only they own blocks.
int NumStoringLayersInKvGroup(const ModelConfig& config, int group);
// The shape of KV group `group`'s rows (its storing layers share it: CheckKvGroupShapes).
ModelConfig::LayerShape KvGroupShape(const ModelConfig& config, int group);
// InvalidArgument unless the storing layers of each KV group have one KV shape (KV heads and
// head size), which each group's pool and its block sizes assume.
Status CheckKvGroupShapes(const ModelConfig& config);

// Bytes one token's K and V take in KV group `group` (every group: -1): each storing layer's
// KV heads times K's row under k_type plus V's under v_type, codes and scales (the founding
// notes' 2 x layers x KV heads x head size x bytes, for the layers that store; MLA's latent
// cache, K alone: layers x (latent + rope) x bytes).
int64_t KvBytesPerToken(const ModelConfig& config, KvType k_type, KvType v_type,
                        int group = -1);
// CheckKvTypeFits for every layer's head size.
Status CheckKvTypeFitsLayers(const ModelConfig& config, KvType type);

struct ForwardInput {
  std::span<const int32_t> token_ids;   // one per token of the batch
  RaggedBatch batch;                    // positions, sequences, each KV group's block tables
  std::span<const int32_t> logit_rows;  // token rows whose logits are wanted, in order
  // Token rows whose final hidden state (after the output norm, before the logits:
  // llama.cpp's result_norm, which its embeddings pool) is wanted, in order, and where they
  // go: hidden_rows.size() rows of n_embd floats.
  std::span<const int32_t> hidden_rows = {};
  std::span<float> hidden_out = {};
  // Per sequence, the LoRA adapter its tokens go through (null: the base model); empty: none
  // for any. Sequences of different adapters share the step: the base matmuls run once.
  std::span<const LoraAdapter* const> seq_loras = {};
};

// Checks a step's inputs against the model and the KV cache: consistent batch views with the
// model's KV groups, token ids in the vocabulary, logit rows in the batch, positions within
// the context, logits_size = logit_rows.size() * n_vocab, hidden rows in the batch with
// room for each in hidden_out, and one adapter entry per sequence when there are any. Every backend's Run starts
// with it.
Status ValidateForwardInput(const ModelConfig& config, const ForwardInput& input,
                            const KvCacheView& kv, size_t logits_size);

}  // namespace tokenmill
