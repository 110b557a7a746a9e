#include "engine/batch_inputs.h"

#include "common/check.h"

namespace tokenmill {

RaggedBatch BatchInputs::batch() const {
  return RaggedBatch{positions, cu_seqlens, slot_mapping, kv_indptr, kv_indices,
                     kv_last_block_len};
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
      const int pos = r.num_computed_tokens + i;
      in.token_ids.push_back(r.token_ids[static_cast<size_t>(i)]);
      in.positions.push_back(pos);
      in.slot_mapping.push_back(int64_t{r.block_table[static_cast<size_t>(pos / block_size)]} *
                                    block_size +
                                pos % block_size);
    }
    in.first_logit.push_back(static_cast<int32_t>(in.logit_rows.size()));
    const int end = in.cu_seqlens.back() + r.num_new_tokens;
    for (int row = end - r.num_logits; row < end; ++row) in.logit_rows.push_back(row);
    in.cu_seqlens.push_back(end);
    in.kv_indices.insert(in.kv_indices.end(), r.block_table.begin(),
                         r.block_table.begin() + num_blocks);
    in.kv_indptr.push_back(static_cast<int32_t>(in.kv_indices.size()));
    in.kv_last_block_len.push_back(kv_length - (num_blocks - 1) * block_size);
  }
  return in;
}

}  // namespace tokenmill
