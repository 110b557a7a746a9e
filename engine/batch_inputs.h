// Flattens one scheduler step into the forward pass's ragged batch (docs/design.md section 3,
// "Batch inputs"): token ids, positions, cu_seqlens and each KV group's block tables
// (kernels/paged_kv.h) from the requests' block tables, plus the rows that need logits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/paged_kv.h"
#include "scheduler/scheduler_output.h"

namespace tokenmill {

struct BatchInputs {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int32_t> cu_seqlens{0};
  std::vector<KvBlockTableBuilder> kv_blocks;  // per KV group
  // Rows whose logits are computed, in order: each request's first prompt rows (see
  // BuildBatchInputs), then its last num_logits rows.
  std::vector<int32_t> logit_rows;
  // Per request of the step: where its last num_logits rows start in logit_rows.
  std::vector<int32_t> first_logit;

  // Views over the members above (valid while this object lives unchanged).
  RaggedBatch batch() const;

 private:
  mutable std::vector<KvBlockTable> block_tables_;  // batch()'s views of kv_blocks
};

// The step's requests in their batch order, for a model of num_kv_groups KV groups. Group 1
// reads each request's sliding_block_table, a released block's entry pointing at block 0
// (outside the window, so never read), or block_table where it has none (a pool where
// nothing is released, as a draft model's). CHECKs that each block table covers the
// request's tokens after this step (the scheduler allocated them). `prompt_rows`, empty or one
// per request: that many of the request's first rows also need logits (prompt logprobs); they
// come before its num_logits rows, which they must not overlap.
BatchInputs BuildBatchInputs(const SchedulerOutput& step, int block_size, int num_kv_groups = 1,
                             std::span<const int> prompt_rows = {});

}  // namespace tokenmill
