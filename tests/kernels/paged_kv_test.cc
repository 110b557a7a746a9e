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
  // Each group against its own pool: group 1's block 6 needs 7 blocks there.
  const std::array<int64_t, 2> pools = {8, 7};
  EXPECT_TRUE(ValidateRaggedBatch({s.positions, s.cu_seqlens, both_good}, 4, pools).ok());
  const std::array<int64_t, 2> small_second = {8, 6};
  const Status second =
      ValidateRaggedBatch({s.positions, s.cu_seqlens, both_good}, 4, small_second);
  EXPECT_NE(second.message().find("KV group 1: block id 6"), std::string::npos)
      << second.ToString();
  const std::array<int64_t, 1> one_pool = {8};
  EXPECT_FALSE(ValidateRaggedBatch({s.positions, s.cu_seqlens, both_good}, 4, one_pool).ok());
}

TEST(KvCacheViewTest, ALayerIsAViewOfItsOwnBlocks) {
  std::vector<uint8_t> k(3 * 5 * 4 * 2 * 8), v(k.size());
  std::vector<float> k_scale(3 * 5 * 4 * 2), v_scale(k_scale.size());
  const KvCacheView pool{KvType::kInt8, k.data(), v.data(), 5, 4, 2, 8,
                         k_scale.data(), v_scale.data(), nullptr, 3};
  const KvCacheView layer = pool.Layer(2);
  EXPECT_EQ(layer.n_layers, 1);
  EXPECT_EQ(layer.num_blocks, 5);
  EXPECT_EQ(static_cast<uint8_t*>(layer.k), k.data() + 2 * 5 * 4 * 2 * 8);
  EXPECT_EQ(static_cast<uint8_t*>(layer.v), v.data() + 2 * 5 * 4 * 2 * 8);
  EXPECT_EQ(layer.k_scale, k_scale.data() + 2 * 5 * 4 * 2);
  EXPECT_EQ(layer.v_scale, v_scale.data() + 2 * 5 * 4 * 2);
  const KvCacheView f16{KvType::kF16, k.data(), v.data(), 5, 4, 2, 4, nullptr, nullptr,
                        nullptr, 3};
  EXPECT_EQ(static_cast<uint8_t*>(f16.Layer(1).k), k.data() + 5 * 4 * 2 * 4 * 2);
  EXPECT_EQ(f16.Layer(1).k_scale, nullptr);
  // q4_0 rows of 64: 32 bytes of codes, two f16 scales.
  const KvCacheView q4{KvType::kQ4_0, k.data(), v.data(), 5, 4, 2, 64, k_scale.data(),
                       v_scale.data(), nullptr, 3};
  EXPECT_EQ(static_cast<uint8_t*>(q4.Layer(2).k), k.data() + 2 * 5 * 4 * 2 * 32);
  EXPECT_EQ(static_cast<uint8_t*>(q4.Layer(2).v_scale),
            reinterpret_cast<uint8_t*>(v_scale.data()) + 2 * 5 * 4 * 2 * 4);
}

// KV groups of different pool sizes: layer 1 (a sliding-window group's, 2 blocks) sits
// between layers 0 and 2 (5 blocks each), each view holding only its own blocks.
TEST(KvCacheViewTest, GroupedLayersHaveTheirOwnBlockCounts) {
  const int64_t layer_blocks[] = {0, 5, 7, 12};
  std::vector<uint8_t> k(12 * 4 * 2 * 8), v(k.size());
  std::vector<float> k_scale(12 * 4 * 2), v_scale(k_scale.size());
  const KvCacheView pool{KvType::kInt8, k.data(), v.data(), 5, 4, 2, 8,
                         k_scale.data(), v_scale.data(), layer_blocks, 3};
  EXPECT_EQ(pool.Layer(0).num_blocks, 5);
  EXPECT_EQ(pool.Layer(1).num_blocks, 2);
  EXPECT_EQ(pool.Layer(2).num_blocks, 5);
  EXPECT_EQ(static_cast<uint8_t*>(pool.Layer(1).k), k.data() + 5 * 4 * 2 * 8);
  EXPECT_EQ(static_cast<uint8_t*>(pool.Layer(2).v), v.data() + 7 * 4 * 2 * 8);
  EXPECT_EQ(pool.Layer(2).k_scale, k_scale.data() + 7 * 4 * 2);
  EXPECT_EQ(pool.Layer(2).layer_blocks, nullptr);
  // The last layer ends at the end of the arrays.
  EXPECT_EQ(static_cast<uint8_t*>(pool.Layer(2).k) + 5 * 4 * 2 * 8, k.data() + k.size());
}

}  // namespace
}  // namespace tokenmill
