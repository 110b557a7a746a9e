#include "common/byte_size.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tokenmill {
namespace {

using ::testing::HasSubstr;

TEST(ByteSizeTest, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(*ParseByteSize("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("1.5 GB"), 1'500'000'000);
  EXPECT_EQ(*ParseByteSize("4KiB"), 4096);
  EXPECT_EQ(*ParseByteSize("100B"), 100);
  EXPECT_EQ(*ParseByteSize(" 1TiB "), int64_t{1} << 40);
}

TEST(ByteSizeTest, RejectsWhatItCannotRead) {
  for (const char* bad : {"", "GiB", "2", "2gb", "2 GiBs", "-1GiB", "two GiB"}) {
    const StatusOr<int64_t> size = ParseByteSize(bad);
    ASSERT_FALSE(size.ok()) << bad;
    EXPECT_THAT(size.status().message(), HasSubstr("2GiB")) << bad;
  }
}

TEST(ByteSizeTest, FormatsWithBinaryUnits) {
  EXPECT_EQ(FormatBytes(100), "100 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(int64_t{2} << 30), "2.00 GiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 40), "3.00 TiB");
}

TEST(MemoryBudgetTest, BareNumberIsAFractionOfFreeMemory) {
  const StatusOr<MemoryBudget> budget = ParseMemoryBudget("0.9");
  ASSERT_TRUE(budget.ok());
  EXPECT_TRUE(budget->is_fraction());
  EXPECT_EQ(budget->Resolve(1000), 900);
  EXPECT_EQ(budget->ToString(), "90% of free memory");
}

TEST(MemoryBudgetTest, SizeIgnoresFreeMemory) {
  const StatusOr<MemoryBudget> budget = ParseMemoryBudget("2GiB");
  ASSERT_TRUE(budget.ok());
  EXPECT_FALSE(budget->is_fraction());
  EXPECT_EQ(budget->Resolve(1000), int64_t{2} << 30);
  EXPECT_EQ(budget->ToString(), "2.00 GiB");
}

TEST(MemoryBudgetTest, RejectsFractionsOutsideZeroToOneAndEmptyBudgets) {
  for (const char* bad : {"0", "1.5", "3", "0GiB"}) {
    EXPECT_FALSE(ParseMemoryBudget(bad).ok()) << bad;
  }
  EXPECT_THAT(ParseMemoryBudget("3").status().message(), HasSubstr("fraction"));
}

}  // namespace
}  // namespace tokenmill
