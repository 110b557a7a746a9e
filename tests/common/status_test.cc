#include "common/status.h"

#include <gtest/gtest.h>

namespace tokenmill {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  TM_ASSIGN_OR_RETURN(const int half, Half(x));
  TM_ASSIGN_OR_RETURN(const int quarter, Half(half));
  return quarter;
}

TEST(StatusTest, OkAndErrorsRenderWithTheirCode) {
  EXPECT_TRUE(OkStatus().ok());
  EXPECT_EQ(OkStatus().ToString(), "OK");
  const Status s = NotFoundError("no such key");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: no such key");
}

TEST(StatusTest, AssignOrReturnPropagatesTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  const StatusOr<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "3 is odd");
}

TEST(StatusDeathTest, ValueOfAnErrorIsAProgrammerError) {
  const StatusOr<int> r = Half(3);
  EXPECT_DEATH((void)r.value(), "value\\(\\) of a failed StatusOr");
}

TEST(CheckDeathTest, FailedCheckSaysWhereAndWhy) {
  EXPECT_DEATH(TM_CHECK_EQ(1 + 1, 3) << "math", "CHECK failed: .*\\(2 vs 3\\) math");
}

}  // namespace
}  // namespace tokenmill
