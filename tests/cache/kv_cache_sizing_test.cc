#include "cache/kv_cache_sizing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "common/byte_size.h"

namespace tokenmill {
namespace kv_cache_sizing_test {

using ::testing::HasSubstr;

// SmolLM2-135M: 30 layers, 3 KV heads of dim 64; fp16 K/V.
constexpr KvGeometry kSmolLm2{
    .num_layers = 30, .num_kv_heads = 3, .head_dim = 64, .element_bits = 16};

TEST(KvCacheSizingTest, BytesPerTokenCountsKAndVOfEveryLayer) {
  EXPECT_EQ(kSmolLm2.BytesPerToken(), 2 * 30 * 3 * 64 * 2);  // 23040
}

TEST(KvCacheSizingTest, FitsWholeBlocksInTheBudget) {
  const StatusOr<KvCachePlan> plan = PlanKvCache(kSmolLm2, 16, *ParseByteSize("2GiB"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->bytes_per_block, 23040 * 16);
  EXPECT_EQ(plan->num_blocks, 5825);  // floor(2147483648 / 368640)
  EXPECT_EQ(plan->num_token_slots(), 5825 * 16);
  EXPECT_EQ(plan->total_bytes, int64_t{5825} * 368640);
  EXPECT_LE(plan->total_bytes, int64_t{2} << 30);
  EXPECT_EQ(plan->Describe(),
            "KV cache: 5825 blocks x 16 tokens = 93200 tokens in 2.00 GiB "
            "(22.50 KiB/token = 2 x 30 layers x 3 KV heads x 64 head dim x 2 B)");
}

TEST(KvCacheSizingTest, Int8CountsItsScalesAndFitsAboutTwiceTheTokens) {
  // int8 K/V with a 4-byte scale per (token, KV head) for K and for V.
  KvGeometry int8 = kSmolLm2;
  int8.element_bits = 8;
  int8.scale_bytes = 4;
  EXPECT_EQ(int8.BytesPerToken(), 2 * 30 * 3 * (64 * 1 + 4));  // 12240
  const StatusOr<KvCachePlan> plan = PlanKvCache(int8, 16, *ParseByteSize("2GiB"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->num_blocks, 10965);  // floor(2147483648 / (12240 * 16)), 1.88x fp16's 5825
  EXPECT_EQ(plan->Describe(),
            "KV cache: 10965 blocks x 16 tokens = 175440 tokens in 2.00 GiB (11.95 KiB/token = "
            "2 x 30 layers x 3 KV heads x (64 head dim x 1 B + 4 B scale))");
}

TEST(KvCacheSizingTest, KAndVApartCountEachSidesBytes) {
  // int8 K (64 B + a 4 B scale a row) beside q4_0 V (32 B + two 2 B block scales).
  KvGeometry apart = kSmolLm2;
  apart.element_bits = 8;
  apart.scale_bytes = 4;
  apart.v_element_bits = 4;
  apart.v_scale_bytes = 4;
  EXPECT_EQ(apart.BytesPerToken(), 30 * 3 * ((64 + 4) + (32 + 4)));  // 9360
  const StatusOr<KvCachePlan> plan = PlanKvCache(apart, 16, *ParseByteSize("2GiB"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->num_blocks, 14339);  // floor(2147483648 / (9360 * 16)), 2.46x fp16's 5825
  EXPECT_EQ(plan->Describe(),
            "KV cache: 14339 blocks x 16 tokens = 229424 tokens in 2.00 GiB (9.14 KiB/token = "
            "30 layers x 3 KV heads x (K (64 head dim x 1 B + 4 B scale) + V (64 head dim x "
            "0.5 B + 4 B scale)))");
}

TEST(KvCacheSizingTest, AFractionOfFreeMemoryResolvesBeforePlanning) {
  const StatusOr<MemoryBudget> budget = ParseMemoryBudget("0.5");
  ASSERT_TRUE(budget.ok());
  const StatusOr<KvCachePlan> plan =
      PlanKvCache(kSmolLm2, 16, budget->Resolve(int64_t{368640} * 100));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_blocks, 50);
}

TEST(KvCacheSizingTest, ABudgetBelowOneBlockSaysHowMuchIsNeeded) {
  const StatusOr<KvCachePlan> plan = PlanKvCache(kSmolLm2, 16, 100'000);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("--kv-cache-memory to at least 360.00 KiB"));
}

TEST(KvCacheSizingTest, RejectsAnEmptyGeometry) {
  KvGeometry bad = kSmolLm2;
  bad.num_kv_heads = 0;
  EXPECT_FALSE(PlanKvCache(bad, 16, int64_t{1} << 30).ok());
  EXPECT_FALSE(PlanKvCache(kSmolLm2, 0, int64_t{1} << 30).ok());
}

// Gemma 3 270M: 18 layers (every sixth global), 1 KV head of 256, a 512-token window; f16.
const KvGroupsShape kGemma3{
    .full = {.num_layers = 3, .num_kv_heads = 1, .head_dim = 256, .element_bits = 16},
    .sliding = {.num_layers = 15, .num_kv_heads = 1, .head_dim = 256, .element_bits = 16},
    .sliding_window = 512};

TEST(KvCacheSizingTest, GroupBlocksPerRequest) {
  EXPECT_EQ(FullGroupBlocks(8192, 16), 512);
  // Positions [p - 511, p] cross at most 32 block edges: 33 blocks.
  EXPECT_EQ(SlidingGroupBlocks(kGemma3, 8192, 16), 33);
  EXPECT_EQ(SlidingGroupBlocks(kGemma3, 100, 16), 7);  // short requests hold all of theirs
}

TEST(KvCacheSizingTest, GroupPoolsFillUpTogetherForRequestsOfTheDesignLength) {
  const int64_t budget = int64_t{1} << 30;
  const int headroom = 162;  // watermark 1 + 1 + (2048 + 511 + 15) / 16
  const StatusOr<KvGroupsPlan> plan = PlanKvCacheGroups(kGemma3, 16, budget, 8192, headroom);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->full.bytes_per_block, 2 * 3 * 256 * 2 * 16);
  EXPECT_EQ(plan->sliding.bytes_per_block, 2 * 15 * 256 * 2 * 16);
  EXPECT_LE(plan->total_bytes(), budget);
  // Less than a block of either pool is left over.
  EXPECT_LT(budget - plan->total_bytes(),
            plan->sliding.bytes_per_block + plan->full.bytes_per_block);
  const int64_t by_full = plan->full.num_blocks / 512;
  const int64_t by_sliding = (plan->sliding.num_blocks - headroom) / 33;
  EXPECT_LE(std::abs(by_full - by_sliding), 1) << by_full << " vs " << by_sliding;
  // Against every layer in full: 4.5x the requests of 8k tokens in the same bytes.
  const StatusOr<KvCachePlan> whole = PlanKvCache(
      {.num_layers = 18, .num_kv_heads = 1, .head_dim = 256, .element_bits = 16}, 16, budget);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->num_blocks / 512, 7);
  EXPECT_GE(std::min(by_full, by_sliding), 31);
  EXPECT_THAT(plan->Describe(), HasSubstr("for full-attention layers; sliding-window layers' "));
}

TEST(KvCacheSizingTest, GroupPoolsNeedRoomForTheWindow) {
  const StatusOr<KvGroupsPlan> plan =
      PlanKvCacheGroups(kGemma3, 16, 162 * int64_t{245760}, 8192, 162);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("raise --kv-cache-memory above"));
  KvGroupsShape no_window = kGemma3;
  no_window.sliding_window = 0;
  EXPECT_FALSE(PlanKvCacheGroups(no_window, 16, int64_t{1} << 30, 8192, 162).ok());
}

}  // namespace kv_cache_sizing_test
}  // namespace tokenmill
