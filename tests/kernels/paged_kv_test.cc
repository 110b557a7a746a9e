// The batch/KV contract: block tables built sequence by sequence, their validation in every
// KV group, and one layer's view of a KV pool.
#include "kernels/paged_kv.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace tokenmill {
namespace {

// Two sequences over blocks of 4: 3 tokens after 6 cached ones in blocks {5, 2, 7}, and a
// decode token at position 4 in blocks {0, 3}.
struct TwoSequences {
  std::vector<int32_t> positions = {6, 7, 8, 4}, cu_seqlens = {0, 3, 4};
  KvBlockTableBuilder blocks;
  TwoSequences() {
    blocks.AddSequence(std::vector<int32_t>{5, 2, 7}, 4, 6, 3);
    blocks.AddSequence(std::vector<int32_t>{0, 3}, 4, 4, 1);
  }
};

TEST(KvBlockTableBuilderTest, BuildsFlashInfersFormAndTheSlots) {
  const TwoSequences s;
  const KvBlockTable table = s.blocks.table();
  EXPECT_EQ(std::vector<int64_t>(table.slot_mapping.begin(), table.slot_mapping.end()),
            (std::vector<int64_t>{2 * 4 + 2, 2 * 4 + 3, 7 * 4 + 0, 3 * 4 + 0}));
  EXPECT_EQ(std::vector<int32_t>(table.kv_indptr.begin(), table.kv_indptr.end()),
            (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(std::vector<int32_t>(table.kv_indices.begin(), table.kv_indices.end()),
            (std::vector<int32_t>{5, 2, 7, 0, 3}));
  EXPECT_EQ(std::vector<int32_t>(table.kv_last_block_len.begin(), table.kv_last_block_len.end()),
            (std::vector<int32_t>{1, 1}));
  const RaggedBatch batch{s.positions, s.cu_seqlens, {&table, 1}};
  EXPECT_TRUE(ValidateRaggedBatch(batch, 4, 8).ok());
}

TEST(KvBlockTableBuilderTest, ClearLeavesEmptyTables) {
  TwoSequences s;
  s.blocks.Clear();
  const KvBlockTable table = s.blocks.table();
  EXPECT_TRUE(table.slot_mapping.empty());
  EXPECT_EQ(std::vector<int32_t>(table.kv_indptr.begin(), table.kv_indptr.end()),
            std::vector<int32_t>{0});
  EXPECT_TRUE(table.kv_indices.empty());
  EXPECT_TRUE(table.kv_last_block_len.empty());
}

TEST(ValidateRaggedBatchTest, ChecksEveryKvGroup) {
  const TwoSequences s;
  // A second group whose blocks put sequence 1's token elsewhere than its slot says.
  KvBlockTableBuilder other;
  other.AddSequence(std::vector<int32_t>{1, 4, 6}, 4, 6, 3);
  other.AddSequence(std::vector<int32_t>{0, 3}, 4, 4, 1);
  const KvBlockTable good = other.table();
  std::vector<int64_t> slots(good.slot_mapping.begin(), good.slot_mapping.end());
  const std::array<KvBlockTable, 2> both_good = {s.blocks.table(), good};
  EXPECT_TRUE(ValidateRaggedBatch({s.positions, s.cu_seqlens, both_good}, 4, 8).ok());

  slots[3] += 1;
  const std::array<KvBlockTable, 2> tables = {
      s.blocks.table(), KvBlockTable{slots, good.kv_indptr, good.kv_indices,
                                     good.kv_last_block_len}};
  const Status bad = ValidateRaggedBatch({s.positions, s.cu_seqlens, tables}, 4, 8);
  EXPECT_NE(bad.message().find("KV group 1: token 3 has slot"), std::string::npos)
      << bad.ToString();
  // The first group's pool is checked as well.
  const Status small_pool = ValidateRaggedBatch({s.positions, s.cu_seqlens, both_good}, 4, 7);
  EXPECT_NE(small_pool.message().find("KV group 0: block id 7"), std::string::npos)
      << small_pool.ToString();
  EXPECT_FALSE(ValidateRaggedBatch({s.positions, s.cu_seqlens, {}}, 4, 8).ok());
}

TEST(KvCacheViewTest, ALayerIsAViewOfItsOwnBlocks) {
  std::vector<uint8_t> k(3 * 5 * 4 * 2 * 8), v(k.size());
  std::vector<float> k_scale(3 * 5 * 4 * 2), v_scale(k_scale.size());
  const KvCacheView pool{KvType::kInt8, k.data(), v.data(), 5, 4, 2, 8,
                         k_scale.data(), v_scale.data(), 3};
  const KvCacheView layer = pool.Layer(2);
  EXPECT_EQ(layer.n_layers, 1);
  EXPECT_EQ(layer.num_blocks, 5);
  EXPECT_EQ(static_cast<uint8_t*>(layer.k), k.data() + 2 * 5 * 4 * 2 * 8);
  EXPECT_EQ(static_cast<uint8_t*>(layer.v), v.data() + 2 * 5 * 4 * 2 * 8);
  EXPECT_EQ(layer.k_scale, k_scale.data() + 2 * 5 * 4 * 2);
  EXPECT_EQ(layer.v_scale, v_scale.data() + 2 * 5 * 4 * 2);
  const KvCacheView f16{KvType::kF16, k.data(), v.data(), 5, 4, 2, 4, nullptr, nullptr, 3};
  EXPECT_EQ(static_cast<uint8_t*>(f16.Layer(1).k), k.data() + 5 * 4 * 2 * 4 * 2);
  EXPECT_EQ(f16.Layer(1).k_scale, nullptr);
}

}  // namespace
}  // namespace tokenmill
