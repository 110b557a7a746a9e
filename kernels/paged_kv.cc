#include "kernels/paged_kv.h"

#include <algorithm>
#include <string>

namespace tokenmill {
namespace {

Status ValidateBlockTable(const RaggedBatch& b, const KvBlockTable& table, int block_size,
                          int64_t num_blocks) {
  const int64_t n_tokens = b.num_tokens();
  const int64_t n_seqs = b.num_seqs();
  if (static_cast<int64_t>(table.slot_mapping.size()) != n_tokens ||
      static_cast<int64_t>(table.kv_indptr.size()) != n_seqs + 1 ||
      static_cast<int64_t>(table.kv_last_block_len.size()) != n_seqs) {
    return InvalidArgumentError(
        "slot_mapping needs one entry per token, kv_indptr n_seqs + 1, kv_last_block_len n_seqs");
  }
  if (table.kv_indptr.front() != 0 ||
      table.kv_indptr.back() != static_cast<int32_t>(table.kv_indices.size())) {
    return InvalidArgumentError("kv_indptr must start at 0 and end at kv_indices.size()");
  }
  for (int32_t block : table.kv_indices) {
    if (block < 0 || block >= num_blocks) {
      return InvalidArgumentError("block id " + std::to_string(block) + " outside the pool of " +
                                  std::to_string(num_blocks) + " blocks");
    }
  }
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int32_t blocks = table.kv_indptr[s + 1] - table.kv_indptr[s];
    const int32_t last = table.kv_last_block_len[s];
    if (b.cu_seqlens[s + 1] < b.cu_seqlens[s] || blocks < 1 || last < 1 || last > block_size) {
      return InvalidArgumentError("sequence " + std::to_string(s) +
                                  " has a bad query range, block count or last block length");
    }
    const int64_t kv_len = static_cast<int64_t>(blocks - 1) * block_size + last;
    for (int32_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; ++t) {
      const int32_t pos = b.positions[t];
      if (pos < 0 || pos >= kv_len) {
        return InvalidArgumentError("token " + std::to_string(t) + " has position " +
                                    std::to_string(pos) + " outside its sequence's KV length " +
                                    std::to_string(kv_len));
      }
      const int64_t slot =
          static_cast<int64_t>(table.kv_indices[table.kv_indptr[s] + pos / block_size]) *
              block_size + pos % block_size;
      if (table.slot_mapping[t] != slot) {
        return InvalidArgumentError("token " + std::to_string(t) + " has slot " +
                                    std::to_string(table.slot_mapping[t]) +
                                    " but its block table puts position " + std::to_string(pos) +
                                    " at slot " + std::to_string(slot));
      }
    }
  }
  return OkStatus();
}

}  // namespace

Status ValidateRaggedBatch(const RaggedBatch& b, int block_size, int64_t num_blocks) {
  const std::vector<int64_t> group_num_blocks(std::max<size_t>(1, b.block_tables.size()),
                                              num_blocks);
  return ValidateRaggedBatch(b, block_size, group_num_blocks);
}

Status ValidateRaggedBatch(const RaggedBatch& b, int block_size,
                           std::span<const int64_t> group_num_blocks) {
  const int64_t n_tokens = b.num_tokens();
  if (b.cu_seqlens.empty() || b.cu_seqlens.front() != 0 || b.cu_seqlens.back() != n_tokens) {
    return InvalidArgumentError("cu_seqlens must start at 0 and end at the number of tokens (" +
                                std::to_string(n_tokens) + ")");
  }
  if (b.block_tables.empty()) {
    return InvalidArgumentError("the batch has no KV group's block tables");
  }
  if (b.block_tables.size() != group_num_blocks.size()) {
    return InvalidArgumentError("the batch has block tables for " +
                                std::to_string(b.block_tables.size()) + " KV groups, the pool " +
                                std::to_string(group_num_blocks.size()));
  }
  for (size_t group = 0; group < b.block_tables.size(); ++group) {
    const Status valid =
        ValidateBlockTable(b, b.block_tables[group], block_size, group_num_blocks[group]);
    if (!valid.ok() && b.block_tables.size() > 1) {
      return InvalidArgumentError("KV group " + std::to_string(group) + ": " + valid.message());
    }
    TM_RETURN_IF_ERROR(valid);
  }
  return OkStatus();
}

void KvBlockTableBuilder::AddSequence(std::span<const int32_t> blocks, int block_size,
                                      int32_t first_position, int32_t num_new) {
  for (int32_t pos = first_position; pos < first_position + num_new; ++pos) {
    slot_mapping_.push_back(static_cast<int64_t>(blocks[pos / block_size]) * block_size +
                            pos % block_size);
  }
  kv_indices_.insert(kv_indices_.end(), blocks.begin(), blocks.end());
  kv_indptr_.push_back(static_cast<int32_t>(kv_indices_.size()));
  const int32_t kv_length = first_position + num_new;
  kv_last_block_len_.push_back(kv_length -
                               (static_cast<int32_t>(blocks.size()) - 1) * block_size);
}

KvBlockTable KvBlockTableBuilder::table() const {
  return KvBlockTable{slot_mapping_, kv_indptr_, kv_indices_, kv_last_block_len_};
}

void KvBlockTableBuilder::Clear() {
  slot_mapping_.clear();
  kv_indptr_.assign(1, 0);
  kv_indices_.clear();
  kv_last_block_len_.clear();
}

}  // namespace tokenmill
