#include "engine/batch_inputs.h"

#include <algorithm>
#include <span>

#include "cache/kv_cache_manager.h"
#include "common/check.h"

namespace tokenmill {

RaggedBatch BatchInputs::batch() const {
  block_tables_.clear();
  for (const KvBlockTableBuilder& group : kv_blocks) block_tables_.push_back(group.table());
  return RaggedBatch{positions, cu_seqlens, block_tables_};
}

BatchInputs BuildBatchInputs(const SchedulerOutput& step, int block_size, int num_kv_groups,
                             std::span<const int> prompt_rows) {
  TM_CHECK(num_kv_groups == 1 || num_kv_groups == 2) << num_kv_groups << " KV groups";
  TM_CHECK(prompt_rows.empty() || prompt_rows.size() == step.requests.size());
  BatchInputs in;
  in.kv_blocks.resize(static_cast<size_t>(num_kv_groups));
  std::vector<BlockId> sliding;
  in.token_ids.reserve(static_cast<size_t>(step.num_batched_tokens));
  for (size_t index = 0; index < step.requests.size(); ++index) {
    const ScheduledRequest& r = step.requests[index];
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
    in.kv_blocks[0].AddSequence(std::span<const BlockId>(r.block_table).first(num_blocks),
                                block_size, r.num_computed_tokens, r.num_new_tokens);
    if (num_kv_groups == 2) {
      const std::vector<BlockId>& table =
          r.sliding_block_table.empty() ? r.block_table : r.sliding_block_table;
      TM_CHECK_EQ(table.size(), r.block_table.size()) << "request " << r.id;
      sliding.assign(table.begin(), table.begin() + num_blocks);
      std::replace(sliding.begin(), sliding.end(), kReleasedBlock, BlockId{0});
      in.kv_blocks[1].AddSequence(sliding, block_size, r.num_computed_tokens, r.num_new_tokens);
    }
    const int begin = in.cu_seqlens.back();
    const int end = begin + r.num_new_tokens;
    const int num_prompt_rows = prompt_rows.empty() ? 0 : prompt_rows[index];
    TM_CHECK(num_prompt_rows >= 0 && num_prompt_rows + r.num_logits <= r.num_new_tokens)
        << "request " << r.id << ": " << num_prompt_rows << " prompt rows";
    for (int row = begin; row < begin + num_prompt_rows; ++row) in.logit_rows.push_back(row);
    in.first_logit.push_back(static_cast<int32_t>(in.logit_rows.size()));
    for (int row = end - r.num_logits; row < end; ++row) in.logit_rows.push_back(row);
    in.cu_seqlens.push_back(end);
  }
  return in;
}

}  // namespace tokenmill
