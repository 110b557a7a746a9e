#include "model/forward_input.h"

#include <string>
#include <vector>

#include "kernels/kv_type.h"

namespace tokenmill {

int NumKvGroups(const ModelConfig& config) {
  const int sliding = NumLayersInKvGroup(config, 1);
  return sliding > 0 && sliding < config.n_layers ? 2 : 1;
}

int KvGroupOfLayer(const ModelConfig& config, int layer) {
  return NumKvGroups(config) == 2 && config.IsSlidingLayer(layer) ? 1 : 0;
}

int NumLayersInKvGroup(const ModelConfig& config, int group) {
  int sliding = 0;
  for (int layer = 0; layer < config.n_layers; ++layer) sliding += config.IsSlidingLayer(layer);
  if (sliding == config.n_layers) sliding = 0;  // one group, as NumKvGroups says
  return group == 1 ? sliding : config.n_layers - sliding;
}

int NumStoringLayersInKvGroup(const ModelConfig& config, int group) {
  int n = 0;
  for (int layer = 0; layer < config.n_layers; ++layer) {
    n += KvGroupOfLayer(config, layer) == group && config.StoresKv(layer);
  }
  return n;
}

ModelConfig::LayerShape KvGroupShape(const ModelConfig& config, int group) {
  for (int layer = 0; layer < config.n_layers; ++layer) {
    if (KvGroupOfLayer(config, layer) == group && config.StoresKv(layer)) {
      return config.Shape(layer);
    }
  }
  return config.Shape(0);
}

Status CheckKvGroupShapes(const ModelConfig& config) {
  for (int layer = 0; layer < config.n_layers; ++layer) {
    const int group = KvGroupOfLayer(config, layer);
    const ModelConfig::LayerShape mine = config.Shape(layer);
    const ModelConfig::LayerShape group_shape = KvGroupShape(config, group);
    if (config.StoresKv(layer) && (mine.head_dim != group_shape.head_dim ||
                                   mine.n_kv_heads != group_shape.n_kv_heads)) {
      return UnimplementedError(
          "layer " + std::to_string(layer) + " stores K/V rows of " +
          std::to_string(mine.n_kv_heads) + " KV heads of " + std::to_string(mine.head_dim) +
          " values, other layers of its KV group " + std::to_string(group_shape.n_kv_heads) +
          " of " + std::to_string(group_shape.head_dim) +
          ": tokenmill needs one KV shape per group (sliding-window or full-attention layers)");
    }
  }
  return OkStatus();
}

int64_t KvBytesPerToken(const ModelConfig& config, KvType k_type, KvType v_type, int group) {
  int64_t bytes = 0;
  for (int layer = 0; layer < config.n_layers; ++layer) {
    if (!config.StoresKv(layer) || (group >= 0 && KvGroupOfLayer(config, layer) != group)) {
      continue;
    }
    const ModelConfig::LayerShape s = config.Shape(layer);
    // A latent cache's V is within its K (KvCacheView::v_in_k).
    bytes += int64_t{s.n_kv_heads} *
             (KvRowTotalBytes(k_type, s.head_dim) +
              (config.HasLatentKv() ? 0 : KvRowTotalBytes(v_type, s.head_dim)));
  }
  return bytes;
}

Status CheckKvTypeFitsLayers(const ModelConfig& config, KvType type) {
  for (int layer = 0; layer < config.n_layers; ++layer) {
    TM_RETURN_IF_ERROR(CheckKvTypeFits(type, config.Shape(layer).head_dim));
  }
  return OkStatus();
}

Status ValidateForwardInput(const ModelConfig& c, const ForwardInput& in, const KvCacheView& kv,
                            size_t logits_size) {
  const int64_t n = static_cast<int64_t>(in.token_ids.size());
  if (in.batch.num_tokens() != n) {
    return InvalidArgumentError("token_ids and positions differ in length");
  }
  if (kv.n_layers != c.n_layers) {
    return InvalidArgumentError("the KV cache was made for another model shape");
  }
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const KvCacheView view = kv.Layer(layer);
    const ModelConfig::LayerShape shape = c.Shape(layer);
    if (view.n_kv_heads != shape.n_kv_heads || view.head_dim != shape.head_dim) {
      return InvalidArgumentError("the KV cache was made for another model shape");
    }
  }
  if (static_cast<int64_t>(in.batch.block_tables.size()) != NumKvGroups(c)) {
    return InvalidArgumentError("the batch has block tables for " +
                                std::to_string(in.batch.block_tables.size()) +
                                " KV groups; the model has " + std::to_string(NumKvGroups(c)));
  }
  // Each group's pool size, from one of its layers' view.
  std::vector<int64_t> group_num_blocks(static_cast<size_t>(NumKvGroups(c)), -1);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    int64_t& count = group_num_blocks[static_cast<size_t>(KvGroupOfLayer(c, layer))];
    if (count < 0) count = kv.Layer(layer).num_blocks;
  }
  TM_RETURN_IF_ERROR(ValidateRaggedBatch(in.batch, kv.block_size, group_num_blocks));
  const int64_t n_logits = static_cast<int64_t>(in.logit_rows.size());
  if (static_cast<int64_t>(logits_size) != n_logits * c.n_vocab) {
    return InvalidArgumentError("logits must hold " + std::to_string(n_logits) + " rows of " +
                                std::to_string(c.n_vocab));
  }
  for (int32_t id : in.token_ids) {
    if (id < 0 || id >= c.n_vocab) {
      return InvalidArgumentError("token id " + std::to_string(id) + " is outside the vocabulary of " +
                                  std::to_string(c.n_vocab));
    }
  }
  for (int32_t row : in.logit_rows) {
    if (row < 0 || row >= n) return InvalidArgumentError("logit row outside the batch");
  }
  if (c.encoder && !in.logit_rows.empty()) {
    return InvalidArgumentError("an encoder (" + c.arch_name + ") has no output head: no logit rows");
  }
  if (in.hidden_out.size() != in.hidden_rows.size() * static_cast<size_t>(c.n_embd)) {
    return InvalidArgumentError("hidden_out must hold " + std::to_string(in.hidden_rows.size()) +
                                " rows of " + std::to_string(c.n_embd));
  }
  for (int32_t row : in.hidden_rows) {
    if (row < 0 || row >= n) return InvalidArgumentError("hidden row outside the batch");
  }
  if (!in.seq_loras.empty() &&
      static_cast<int64_t>(in.seq_loras.size()) != in.batch.num_seqs()) {
    return InvalidArgumentError("seq_loras must hold one entry per sequence");
  }
  for (int32_t pos : in.batch.positions) {
    if (pos >= c.context_length) {
      return OutOfRangeError("position " + std::to_string(pos) + " is beyond the model's context of " +
                             std::to_string(c.context_length) + " tokens");
    }
  }
  return OkStatus();
}

}  // namespace tokenmill
