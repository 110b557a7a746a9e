#include "engine/batch_inputs.h"

#include <span>

#include "common/check.h"

namespace tokenmill {

RaggedBatch BatchInputs::batch() const {
  block_table_ = kv_blocks.table();
  return RaggedBatch{positions, cu_seqlens, std::span<const KvBlockTable>(&block_table_, 1)};
}

BatchInputs BuildBatchInputs(const SchedulerOutput& step, int block_size) {
  BatchInputs in;
  in.token_ids.reserve(static_cast<size_t>(step.num_batched_tokens));
  for (const ScheduledRequest& r : step.requests) {
    TM_CHECK_EQ(static_cast<int>(r.token_ids.size()), r.num_new_tokens) << "request " << r.id;
    const int kv_length = r.num_computed_tokens + r.num_new_tokens;
    const int num_blocks = (kv_length + block_size - 1) / block_size;
    TM_CHECK(static_cast<int>(r.block_table.size()) >= num_blocks)
        << "request " << r.id << " has " << r.block_table.size() << " blocks for " << kv_length
        << " tokens";
    for (int i = 0; i < r.num_new_tokens; ++i) {
      in.token_ids.push_back(r.token_ids[static_cast<size_t>(i)]);
      in.positions.push_back(r.num_computed_tokens + i);
    }
    in.kv_blocks.AddSequence(std::span<const BlockId>(r.block_table).first(num_blocks),
                             block_size, r.num_computed_tokens, r.num_new_tokens);
    in.first_logit.push_back(static_cast<int32_t>(in.logit_rows.size()));
    const int end = in.cu_seqlens.back() + r.num_new_tokens;
    for (int row = end - r.num_logits; row < end; ++row) in.logit_rows.push_back(row);
    in.cu_seqlens.push_back(end);
  }
  return in;
}

}  // namespace tokenmill
