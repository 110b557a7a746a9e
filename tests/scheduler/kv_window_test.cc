// The kv_window arithmetic (scheduler/kv_window.h) that the Scheduler and
// `tokenmill perplexity --kv-window` share.
#include "scheduler/kv_window.h"

#include <gtest/gtest.h>

#include <string>

namespace tokenmill {
namespace kv_window_test {

TEST(KvWindowTest, SinksRoundUpToBlocksAndTheLimitIsSinksPlusWindow) {
  EXPECT_EQ(KvWindowSinkTokens(KvWindow{.sink_tokens = 4}, 16), 16);
  EXPECT_EQ(KvWindowSinkTokens(KvWindow{.sink_tokens = 0}, 16), 0);
  EXPECT_EQ(KvWindowSinkTokens(KvWindow{.sink_tokens = 17}, 16), 32);
  EXPECT_EQ(KvWindowLimit(KvWindow{.sink_tokens = 4, .window_tokens = 256}, 16, 8192), 272);
  EXPECT_EQ(KvWindowLimit(KvWindow{.sink_tokens = 4, .window_tokens = 0}, 16, 8192), 8192);
  EXPECT_EQ(KvWindowLimit(KvWindow{.sink_tokens = 4, .window_tokens = 9000}, 16, 8192), 8192);
}

TEST(KvWindowTest, EvictsAllButSinksAndHalfTheWindowOnceOverTheLimit) {
  const KvWindow w{.sink_tokens = 4, .window_tokens = 256};
  EXPECT_EQ(KvWindowTokensToEvict(w, 16, 8192, 272), 0);
  // 273 tokens: keep 16 sinks + 128 recent.
  EXPECT_EQ(KvWindowTokensToEvict(w, 16, 8192, 273), 273 - 16 - 128);
  // The smallest window keeps at least one block of recent tokens.
  const KvWindow small{.sink_tokens = 0, .window_tokens = 32};
  EXPECT_EQ(KvWindowTokensToEvict(small, 16, 8192, 33), 33 - 16);
}

TEST(KvWindowTest, BadWindowsNameTheFieldToChange) {
  const Status negative = CheckKvWindow(KvWindow{.sink_tokens = -1}, 16, 128);
  EXPECT_NE(negative.message().find("must be >= 0"), std::string::npos);
  const Status too_many_sinks = CheckKvWindow(KvWindow{.sink_tokens = 100}, 16, 128);
  EXPECT_NE(too_many_sinks.message().find("give at most 96"), std::string::npos);
  const Status tiny = CheckKvWindow(KvWindow{.sink_tokens = 4, .window_tokens = 31}, 16, 128);
  EXPECT_NE(tiny.message().find("at least 32"), std::string::npos);
  EXPECT_TRUE(CheckKvWindow(KvWindow{.sink_tokens = 4, .window_tokens = 32}, 16, 128).ok());
}

}  // namespace kv_window_test
}  // namespace tokenmill
