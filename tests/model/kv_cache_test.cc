// KvCacheStorage: each layer's K/V (and int8 scales) round-trip through StoreKv and stay
// apart from the other layers' memory; Release lets a range of blocks' pages go.
#include "model/kv_cache.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/half.h"
#include "kernels/kv_type.h"

namespace tokenmill {
namespace {

ModelConfig TinyConfig() {
  ModelConfig c;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 24;
  return c;
}

// Element i of a layer's K or V as float (int8: q · its row's scale).
float Load(const KvCacheView& layer, bool k, int64_t i) {
  const void* base = k ? layer.k : layer.v;
  switch (layer.type) {
    case KvType::kF16: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case KvType::kF32: return static_cast<const float*>(base)[i];
    case KvType::kInt8: {
      const auto* scales = static_cast<const float*>(k ? layer.k_scale : layer.v_scale);
      return static_cast<const int8_t*>(base)[i] * scales[i / layer.head_dim];
    }
    case KvType::kFp8:
    case KvType::kQ4_0:
    case KvType::kInt4:
      break;  // no CPU store (fp8: the CUDA tests cover it) or heads of 24 (the 4-bit types)
  }
  return NAN;
}

class KvCacheStorageTest : public ::testing::TestWithParam<KvType> {};

TEST_P(KvCacheStorageTest, StoredRowsReadBackInTheirLayerOnly) {
  const KvType type = GetParam();
  const ModelConfig c = TinyConfig();
  constexpr int kBlocks = 5, kBlockSize = 3;
  KvCacheStorage storage(c, type, kBlocks, kBlockSize);
  const KvCacheView view = storage.view();
  ASSERT_EQ(view.k_scale != nullptr, type == KvType::kInt8);
  const std::vector<int64_t> slots = {13, 0, 7, 14};
  const int64_t row = c.kv_dim();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(slots.size() * row), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    // Rows of very different magnitudes: each (token, KV head) row has its own scale.
    const float m = std::pow(10.0f, static_cast<float>(i / c.head_dim % 4) - 2.0f);
    k[i] = normal(rng) * m;
    v[i] = normal(rng) * m;
  }
  StoreKv(view.Layer(1), slots, k.data(), v.data());

  for (int layer = 0; layer < c.n_layers; ++layer) {
    const KvCacheView l = view.Layer(layer);
    for (int64_t s = 0; s < kBlocks * kBlockSize; ++s) {
      const auto it = std::find(slots.begin(), slots.end(), s);
      for (int64_t e = 0; e < row; ++e) {
        const int64_t i = s * row + e;
        if (layer != 1 || it == slots.end()) {
          ASSERT_EQ(Load(l, true, i), 0.0f) << "layer " << layer << " slot " << s;
          ASSERT_EQ(Load(l, false, i), 0.0f) << "layer " << layer << " slot " << s;
          continue;
        }
        const int64_t src = (it - slots.begin()) * row + e;
        const int64_t head_begin = (it - slots.begin()) * row + e / c.head_dim * c.head_dim;
        for (const auto& [x, is_k] : {std::pair{&k, true}, std::pair{&v, false}}) {
          const float want = (*x)[src];
          float tolerance = 0.0f;
          if (type == KvType::kF16) tolerance = std::fabs(want) * 0x1p-11f;
          if (type == KvType::kInt8) {
            float amax = 0.0f;
            for (int d = 0; d < c.head_dim; ++d) {
              amax = std::max(amax, std::fabs((*x)[head_begin + d]));
            }
            tolerance = amax / 127.0f / 2.0f * (1 + 1e-5f);
          }
          ASSERT_LE(std::fabs(Load(l, is_k, i) - want), tolerance)
              << KvTypeName(type) << " slot " << s << " element " << e;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, KvCacheStorageTest,
                         ::testing::Values(KvType::kF16, KvType::kF32, KvType::kInt8),
                         [](const ::testing::TestParamInfo<KvType>& param_info) {
                           return std::string(KvTypeName(param_info.param));
                         });

// An elastic pool's memory is committed as it is written, and the pool gives blocks back from
// its top (cache/block_pool.h): their pages leave RAM and read as zeros, while the blocks below
// keep their bytes.
TEST(KvCacheReleaseTest, DropsTheRangesPagesOnly) {
  ModelConfig c = TinyConfig();
  c.head_dim = 64;  // a block of 16 tokens: 16 x 2 heads x 64 x 2 B = 4 KiB a layer's K
  constexpr int kBlocks = 64, kBlockSize = 16;
  KvCacheStorage storage(c, KvType::kF16, kBlocks, kBlockSize, std::nullopt,
                         KvCacheStorage::Commit::kOnWrite);
  const KvCacheView view = storage.view();
  const int64_t block_bytes = int64_t{kBlockSize} * c.n_kv_heads * c.head_dim * 2;
  const int64_t page = sysconf(_SC_PAGESIZE);
  ASSERT_EQ(block_bytes % page, 0) << "the test assumes blocks of whole pages";
  const auto resident_pages = [&](const void* data, int64_t first, int64_t end) {
    std::vector<unsigned char> in_core(static_cast<size_t>((end - first) * block_bytes / page));
    EXPECT_EQ(mincore(static_cast<uint8_t*>(const_cast<void*>(data)) + first * block_bytes,
                      static_cast<size_t>((end - first) * block_bytes), in_core.data()),
              0);
    return std::count_if(in_core.begin(), in_core.end(), [](unsigned char b) { return b & 1; });
  };
  // Mapped, not committed: nothing is resident before a write.
  for (int layer = 0; layer < c.n_layers; ++layer) {
    EXPECT_EQ(resident_pages(view.Layer(layer).k, 0, kBlocks), 0);
  }
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const KvCacheView l = view.Layer(layer);
    std::memset(l.k, 0x5a, static_cast<size_t>(kBlocks * block_bytes));
    std::memset(l.v, 0x5a, static_cast<size_t>(kBlocks * block_bytes));
  }
  ASSERT_TRUE(storage.Release(0, 40, kBlocks).ok());
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const KvCacheView l = view.Layer(layer);
    for (void* array : {l.k, l.v}) {
      EXPECT_EQ(resident_pages(array, 40, kBlocks), 0) << "layer " << layer;
      EXPECT_EQ(resident_pages(array, 0, 40), 40 * block_bytes / page) << "layer " << layer;
      const auto* bytes = static_cast<const uint8_t*>(array);
      EXPECT_EQ(bytes[40 * block_bytes - 1], 0x5a);
      EXPECT_EQ(bytes[40 * block_bytes], 0);
      EXPECT_EQ(bytes[kBlocks * block_bytes - 1], 0);
    }
  }
  EXPECT_FALSE(storage.Release(0, 60, kBlocks + 1).ok());

  // A fixed pool is committed whole at once: it fails at startup, not under load.
  KvCacheStorage fixed(c, KvType::kF16, kBlocks, kBlockSize);
  EXPECT_EQ(resident_pages(fixed.view().Layer(0).k, 0, kBlocks), kBlocks * block_bytes / page);
}

TEST(BatchBuilderTest, TruncateKeepsThePrefixAndReusesItsBlocks) {
  BatchBuilder builder(4, 4);
  const int seq = builder.AddSequence();
  const std::vector<int32_t> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ASSERT_TRUE(builder.Append(seq, ten, BatchBuilder::Logits::kNone).ok());
  const std::span<const int64_t> slots = builder.batch().block_tables[0].slot_mapping;
  const std::vector<int64_t> first_slots(slots.begin(), slots.end());
  EXPECT_FALSE(builder.Truncate(seq, 5).ok());  // not during a step
  builder.Clear();
  ASSERT_TRUE(builder.Truncate(seq, 5).ok());
  EXPECT_EQ(builder.SequenceLength(seq), 5);
  EXPECT_FALSE(builder.Truncate(seq, 6).ok());  // only shorter
  // Positions 5..14 go to the sequence's own blocks first (3 of them), then one fresh block:
  // 4 blocks in all, none past the pool.
  const std::vector<int32_t> more(10, 7);
  ASSERT_TRUE(builder.Append(seq, more, BatchBuilder::Logits::kLast).ok());
  const RaggedBatch b = builder.batch();
  ASSERT_EQ(b.positions.front(), 5);
  const KvBlockTable& table = b.block_tables[0];
  for (size_t i = 0; i + 5 < first_slots.size(); ++i) {
    EXPECT_EQ(table.slot_mapping[i], first_slots[i + 5]);
  }
  EXPECT_EQ(table.kv_indptr[1] - table.kv_indptr[0], 4);
  EXPECT_EQ(table.kv_last_block_len[0], 3);
  EXPECT_TRUE(ValidateRaggedBatch(b, 4, 4).ok());
}

TEST(KvTypeTest, NamesRoundTripAndEachDeviceRefusesWhatItLacks) {
  for (KvType type :
       {KvType::kF16, KvType::kF32, KvType::kInt8, KvType::kFp8, KvType::kQ4_0, KvType::kInt4}) {
    const StatusOr<KvType> parsed = ParseKvType(KvTypeName(type));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, type);
  }
  EXPECT_EQ(KvRowBytes(KvType::kInt8, 64), 64);
  EXPECT_EQ(KvRowScaleBytes(KvType::kInt8, 64), 4);
  EXPECT_EQ(KvRowScaleBytes(KvType::kF16, 64), 0);
  EXPECT_EQ(KvRowBytes(KvType::kFp8, 64), 64);
  EXPECT_EQ(KvRowScaleBytes(KvType::kFp8, 64), 4);
  // llama.cpp's Q4_0: 32 values in 18 bytes, 3.56x fewer than f16's 64.
  EXPECT_EQ(KvRowTotalBytes(KvType::kQ4_0, 32), 18);
  EXPECT_EQ(KvRowTotalBytes(KvType::kQ4_0, 128), 4 * 18);
  // int4: 16 bytes of codes and an f16 scale and zero per 32 values.
  EXPECT_EQ(KvRowTotalBytes(KvType::kInt4, 32), 20);
  EXPECT_TRUE(KvTypeOnCuda(KvType::kInt4));
  EXPECT_EQ(CheckKvTypeFits(KvType::kInt4, 48).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(KvTypeOnCpu(KvType::kInt8));
  EXPECT_TRUE(KvTypeOnCpu(KvType::kQ4_0));
  EXPECT_FALSE(KvTypeOnCpu(KvType::kFp8));
  // The CUDA kernels read every type (the 4-bit ones since issue 39's CUDA half).
  for (KvType type :
       {KvType::kF16, KvType::kF32, KvType::kInt8, KvType::kFp8, KvType::kQ4_0, KvType::kInt4}) {
    EXPECT_TRUE(KvTypeOnCuda(type)) << KvTypeName(type);
    EXPECT_TRUE(CheckKvTypeOnDevice(type, true, "--kv-cache-dtype").ok()) << KvTypeName(type);
  }
  EXPECT_TRUE(CheckKvTypeOnDevice(KvType::kQ4_0, false, "--kv-type").ok());
  const Status on_cpu = CheckKvTypeOnDevice(KvType::kFp8, false, "--kv-type");
  EXPECT_EQ(on_cpu.message(),
            "--kv-type fp8 needs --device cuda; on the CPU use f16, f32, int8, q4_0 or int4");
  EXPECT_TRUE(CheckKvTypeFits(KvType::kQ4_0, 64).ok());
  const Status fits = CheckKvTypeFits(KvType::kQ4_0, 48);
  EXPECT_EQ(fits.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fits.message().find("heads have 48"), std::string::npos) << fits.message();
  const StatusOr<KvType> int3 = ParseKvType("int3");
  ASSERT_FALSE(int3.ok());
  EXPECT_NE(int3.status().message().find("f16, f32, int8, q4_0, int4 or fp8"), std::string::npos)
      << int3.status().message();
}

}  // namespace
}  // namespace tokenmill
