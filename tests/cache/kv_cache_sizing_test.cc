#include "cache/kv_cache_sizing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/byte_size.h"

namespace tokenmill {
namespace {

using ::testing::HasSubstr;

// SmolLM2-135M: 30 layers, 3 KV heads of dim 64; fp16 K/V.
constexpr KvGeometry kSmolLm2{
    .num_layers = 30, .num_kv_heads = 3, .head_dim = 64, .element_bytes = 2};

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
  int8.element_bytes = 1;
  int8.scale_bytes = 4;
  EXPECT_EQ(int8.BytesPerToken(), 2 * 30 * 3 * (64 * 1 + 4));  // 12240
  const StatusOr<KvCachePlan> plan = PlanKvCache(int8, 16, *ParseByteSize("2GiB"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->num_blocks, 10965);  // floor(2147483648 / (12240 * 16)), 1.88x fp16's 5825
  EXPECT_EQ(plan->Describe(),
            "KV cache: 10965 blocks x 16 tokens = 175440 tokens in 2.00 GiB (11.95 KiB/token = "
            "2 x 30 layers x 3 KV heads x (64 head dim x 1 B + 4 B scale))");
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

}  // namespace
}  // namespace tokenmill
