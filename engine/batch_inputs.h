// Flattens one scheduler step into the forward pass's ragged batch (DESIGN.md section 3,
// "Batch inputs"): token ids, positions, cu_seqlens, slot mapping and each sequence's paged
// KV view from its block table, plus the rows that need logits.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "scheduler/scheduler_output.h"

namespace tokenmill {

struct BatchInputs {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int32_t> cu_seqlens{0};
  std::vector<int64_t> slot_mapping;
  std::vector<int32_t> kv_indptr{0};
  std::vector<int32_t> kv_indices;
  std::vector<int32_t> kv_last_block_len;
  // Rows whose logits are computed, in order: each request's last num_logits rows.
  std::vector<int32_t> logit_rows;
  // Per request of the step: where its rows start in logit_rows.
  std::vector<int32_t> first_logit;

  // Views over the vectors above (valid while this object lives unchanged).
  RaggedBatch batch() const;
};

// The step's requests in their batch order. CHECKs that each block table covers the
// request's tokens after this step (the scheduler allocated them).
BatchInputs BuildBatchInputs(const SchedulerOutput& step, int block_size);

}  // namespace tokenmill
