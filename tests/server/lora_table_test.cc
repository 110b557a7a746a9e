// The server's LoraTable: --lora's adapters as ids 1, 2, ...; ids the admin's loads get are
// never reused, and every id ever given keeps its name (running requests and KV events of an
// unloaded adapter); names are unique and --max-loras bounds the adapters served at once.
#include "server/grpc/lora_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tokenmill::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LoraTable, StartupAdaptersAreIdsOneOnInFlagOrder) {
  LoraTable table(4, {{"a", "a.gguf"}, {"b", "b.gguf"}});
  EXPECT_EQ(table.IdOf("a"), 1);
  EXPECT_EQ(table.IdOf("b"), 2);
  EXPECT_FALSE(table.IdOf("c").has_value());
  EXPECT_THAT(table.Names(), ElementsAre("a", "b"));
  EXPECT_THAT(table.NamesById(), ElementsAre("a", "b"));
  ASSERT_EQ(table.Live().size(), 2u);
  EXPECT_EQ(table.Live()[1].path, "b.gguf");
}

TEST(LoraTable, IdsAreNeverReusedAndKeepTheirNames) {
  LoraTable table(2, {{"a", "a.gguf"}});
  ASSERT_TRUE(table.CheckRoom("b").ok());
  const int b = table.NewId("b");
  EXPECT_EQ(b, 2);
  EXPECT_FALSE(table.IdOf("b").has_value());  // not served until published
  table.Publish({"b", b, "b.gguf"});
  EXPECT_EQ(table.IdOf("b"), 2);
  EXPECT_EQ(table.Remove("a").value(), 1);
  EXPECT_FALSE(table.IdOf("a").has_value());
  const int a_again = table.NewId("a");
  table.Publish({"a", a_again, "a.gguf"});
  EXPECT_EQ(a_again, 3);
  EXPECT_THAT(table.NamesById(), ElementsAre("a", "b", "a"));
  EXPECT_THAT(table.Names(), ElementsAre("b", "a"));
}

TEST(LoraTable, RefusesATakenNameAFullTableAndAnUnknownRemoval) {
  LoraTable table(1, {{"a", "a.gguf"}});
  const Status taken = table.CheckRoom("a");
  EXPECT_EQ(taken.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(taken.message(), HasSubstr("already"));
  const Status full = table.CheckRoom("b");
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("--max-loras"));
  EXPECT_EQ(table.Remove("b").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(table.Remove("a").ok());
  EXPECT_TRUE(table.CheckRoom("b").ok());
}

}  // namespace
}  // namespace tokenmill::server
