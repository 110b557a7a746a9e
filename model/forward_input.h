// What every backend's forward pass (model/forward.h on the CPU, model/cuda/ on a GPU) runs
// one step over: the step's tokens as a ragged batch with its block tables, the rows that
// need logits, and the check they all start with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"
#include "kernels/cpu/paged_attention.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace tokenmill {

struct ForwardInput {
  std::span<const int32_t> token_ids;   // one per token of the batch
  RaggedBatch batch;                    // positions, sequences, slots, block tables
  std::span<const int32_t> logit_rows;  // token rows whose logits are wanted, in order
};

// Checks a step's inputs against the model and the KV cache: consistent batch views, token
// ids in the vocabulary, logit rows in the batch, positions within the context, and
// logits_size = logit_rows.size() * n_vocab. Every backend's Run starts with it.
Status ValidateForwardInput(const ModelConfig& config, const ForwardInput& input,
                            const KvCacheView& kv, size_t logits_size);

}  // namespace tokenmill
