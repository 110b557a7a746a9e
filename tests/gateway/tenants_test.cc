// The gateway's tenants without a network: the key file's lines, key lookup, reload on a bad
// file, the per-tenant limiter (in flight, tokens a minute), stored responses kept per
// tenant, and response ids that carry fresh randomness.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <variant>

#include "gateway/api/responses/response_store.h"
#include "gateway/gateway_context.h"
#include "gateway/tenants/key_store.h"
#include "gateway/tenants/key_table.h"
#include "gateway/tenants/tenant_limiter.h"

namespace tokenmill::gateway {
namespace {

namespace http = boost::beast::http;
using Clock = TenantLimiter::Clock;

constexpr char kKeyA[] = "sk-tenant-a-0123456789";
constexpr char kKeyB[] = "sk-tenant-b-0123456789";

TEST(KeyTable, ParsesKeysTenantsCommentsAndThePriorityMark) {
  const StatusOr<KeyTable> table = KeyTable::Parse(
      "# keys of the two teams\n"
      "\n"
      "sk-tenant-a-0123456789 team-a   # the batch jobs\n"
      "  sk-tenant-b-0123456789\tteam_b priority\r\n"
      "sk-tenant-a2-012345678 team-a\n");
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_EQ(table->size(), 3u);
  ASSERT_TRUE(table->Find(kKeyA).has_value());
  EXPECT_EQ(table->Find(kKeyA)->name, "team-a");
  EXPECT_FALSE(table->Find(kKeyA)->may_prioritize);
  EXPECT_EQ(table->Find(kKeyB)->name, "team_b");
  EXPECT_TRUE(table->Find(kKeyB)->may_prioritize);
  EXPECT_EQ(table->Find("sk-tenant-a2-012345678")->name, "team-a");
  EXPECT_FALSE(table->Find("sk-tenant-a-012345678").has_value());   // a prefix
  EXPECT_FALSE(table->Find("sk-tenant-a-01234567890").has_value());  // longer
  EXPECT_FALSE(table->Find("").has_value());
}

TEST(KeyTable, AMalformedLineIsRefusedNamingIt) {
  const struct {
    const char* text;
    const char* says;
  } cases[] = {
      {"# ok\nsk-tenant-a-0123456789\n", "line 2: expected 'KEY TENANT [priority]"},
      {"sk-tenant-a-0123456789 a b c d e\n", "line 1: expected"},
      {"sk-tenant-a-0123456789 a b c\n", "line 1: 'b' is not one of priority"},
      {"sk-tenant-a-0123456789 a priority priority\n", "line 1: 'priority' is not one of"},
      {"sk-tenant-a-0123456789 a max-concurrent=1 max-concurrent=1\n", "(each once)"},
      {"sk-tenant-a-0123456789 a max-concurrent=-1\n", "line 1: max-concurrent must be"},
      {"sk-tenant-a-0123456789 a tokens-per-minute=1e6\n", "line 1: tokens-per-minute must"},
      {"sk-tenant-a-0123456789 a tokens-per-minute=10000000000000\n", "must be an integer"},
      {"sk-tenant-a-0123456789 a max-concurrent=2\nsk-tenant-b-0123456789 a max-concurrent=3\n",
       "line 2: an earlier line gave tenant 'a' another max-concurrent"},
      {"\n\nshort team\n", "line 3: the key has 5 characters; use at least 16"},
      {"sk-tenant-a-0123456789 team/a\n", "line 1: the tenant name"},
      {"sk-tenant-a-0123456789 team-a admin\n", "line 1: 'admin' is not one of"},
      {"sk-tenant-a-0123456789 a\nsk-tenant-a-0123456789 b\n",
       "line 2: the key of line 1 again"},
      {"# nothing\n\n", "no key in the file"},
      {"sk-tenant-a-01234\x01" "56789 a\n", "line 1: the key must be printable"},
  };
  for (const auto& c : cases) {
    const StatusOr<KeyTable> table = KeyTable::Parse(c.text);
    ASSERT_FALSE(table.ok()) << c.text;
    EXPECT_NE(table.status().message().find(c.says), std::string::npos)
        << table.status().message();
  }
  const StatusOr<KeyTable> long_name =
      KeyTable::Parse("sk-tenant-a-0123456789 " + std::string(65, 'x') + "\n");
  EXPECT_FALSE(long_name.ok());
}

TEST(KeyTable, ATenantsLimitsOnOneLineHoldForAllItsKeys) {
  const StatusOr<KeyTable> table = KeyTable::Parse(
      "sk-tenant-a-0123456789 team-a\n"
      "sk-tenant-b-0123456789 team-b\n"
      "sk-tenant-a2-012345678 team-a max-concurrent=3 priority tokens-per-minute=0\n"
      "sk-tenant-a3-012345678 team-a max-concurrent=3\n");
  ASSERT_TRUE(table.ok()) << table.status().message();
  for (const char* key : {kKeyA, "sk-tenant-a2-012345678", "sk-tenant-a3-012345678"}) {
    EXPECT_EQ(table->Find(key)->max_concurrent, std::optional<int64_t>(3)) << key;
    EXPECT_EQ(table->Find(key)->tokens_per_minute, std::optional<int64_t>(0)) << key;
  }
  EXPECT_TRUE(table->Find("sk-tenant-a2-012345678")->may_prioritize);
  EXPECT_FALSE(table->Find(kKeyA)->may_prioritize);  // priority is the key's, not the tenant's
  EXPECT_FALSE(table->Find(kKeyB)->max_concurrent.has_value());
  EXPECT_FALSE(table->Find(kKeyB)->tokens_per_minute.has_value());
}

TEST(KeyTable, TheSingleApiKeyIsTheDefaultTenant) {
  const KeyTable table = KeyTable::SingleKey("k");
  EXPECT_EQ(table.Find("k")->name, "default");
  EXPECT_FALSE(table.Find("k")->may_prioritize);
  EXPECT_FALSE(table.Find("K").has_value());
}

http::request_header<> WithHeader(http::field field, const std::string& value) {
  http::request_header<> header;
  header.set(field, value);
  return header;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(KeyStore, AuthenticatesByBearerOrXApiKeyAndKeepsItsTableOnABadReload) {
  GatewayOptions options;
  options.backend_api_key = "backend";
  options.api_key_file = WriteFile("keys_reload.txt", std::string(kKeyA) + " team-a\n");
  StatusOr<std::unique_ptr<KeyStore>> store = KeyStore::FromOptions(options);
  ASSERT_TRUE(store.ok()) << store.status().message();
  KeyStore& keys = **store;
  EXPECT_FALSE(keys.open());
  EXPECT_EQ(keys.Authenticate(WithHeader(http::field::authorization,
                                         std::string("Bearer ") + kKeyA))->name,
            "team-a");
  EXPECT_EQ(keys.Authenticate(WithHeader(http::field::authorization,
                                         std::string("bearer ") + kKeyA))->name,
            "team-a");
  http::request_header<> x_api_key;
  x_api_key.set("x-api-key", kKeyA);
  EXPECT_EQ(keys.Authenticate(x_api_key)->name, "team-a");
  EXPECT_FALSE(keys.Authenticate(WithHeader(http::field::authorization, kKeyA)).has_value());
  EXPECT_FALSE(keys.Authenticate(http::request_header<>{}).has_value());
  EXPECT_FALSE(keys.Authenticate(WithHeader(http::field::authorization,
                                            std::string("Bearer ") + kKeyB))
                   .has_value());

  // A new key after a reload; a bad file then leaves the table as it was.
  WriteFile("keys_reload.txt", std::string(kKeyA) + " team-a\n" + kKeyB + " team-b\n");
  ASSERT_TRUE(keys.Reload().ok());
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.Authenticate(WithHeader(http::field::authorization,
                                         std::string("Bearer ") + kKeyB))->name,
            "team-b");
  WriteFile("keys_reload.txt", std::string(kKeyA) + " team-a\nbroken\n");
  const Status bad = keys.Reload();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("line 2"), std::string::npos) << bad.message();
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_TRUE(keys.Authenticate(WithHeader(http::field::authorization,
                                           std::string("Bearer ") + kKeyB))
                  .has_value());
}

TEST(KeyStore, FlagsThatDoNotGoTogetherAreRefused) {
  GatewayOptions options;
  options.api_key_file = WriteFile("keys_flags.txt", std::string(kKeyA) + " team-a\n");
  StatusOr<std::unique_ptr<KeyStore>> no_backend_key = KeyStore::FromOptions(options);
  ASSERT_FALSE(no_backend_key.ok());
  EXPECT_NE(no_backend_key.status().message().find("--backend-api-key"), std::string::npos);
  options.backend_api_key = "backend";
  options.api_key = "single";
  EXPECT_FALSE(KeyStore::FromOptions(options).ok());
  options.api_key.clear();
  options.api_key_file = ::testing::TempDir() + "no_such_key_file.txt";
  EXPECT_FALSE(KeyStore::FromOptions(options).ok());

  GatewayOptions open_gateway;
  StatusOr<std::unique_ptr<KeyStore>> open = KeyStore::FromOptions(open_gateway);
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE((*open)->open());
  EXPECT_EQ((*open)->Authenticate(http::request_header<>{})->name, "");
  GatewayOptions single;
  single.api_key = "single";
  EXPECT_EQ((*KeyStore::FromOptions(single))
                ->Authenticate(WithHeader(http::field::authorization, "Bearer single"))
                ->name,
            "default");
}

Tenant Named(const std::string& name) {
  Tenant tenant;
  tenant.name = name;
  return tenant;
}

TenantLimiter::Admission Admitted(std::variant<TenantLimiter::Admission, HttpError> result) {
  EXPECT_TRUE(std::holds_alternative<TenantLimiter::Admission>(result))
      << std::get<HttpError>(result).message;
  return std::move(std::get<TenantLimiter::Admission>(result));
}

HttpError Refused(std::variant<TenantLimiter::Admission, HttpError> result) {
  EXPECT_TRUE(std::holds_alternative<HttpError>(result));
  if (!std::holds_alternative<HttpError>(result)) return {};
  return std::get<HttpError>(result);
}

TEST(TenantLimiter, CapsRequestsInFlightPerTenant) {
  TenantLimiter limiter({.max_concurrent = 2});
  const Clock::time_point now = Clock::now();
  TenantLimiter::Admission first = Admitted(limiter.Admit(Named("a"), 0, now));
  TenantLimiter::Admission second = Admitted(limiter.Admit(Named("a"), 0, now));
  const HttpError third = Refused(limiter.Admit(Named("a"), 0, now));
  EXPECT_EQ(third.status, 429);
  EXPECT_EQ(third.code, "tenant_concurrency_limit");
  EXPECT_NE(third.message.find("--tenant-max-concurrent (2)"), std::string::npos) << third.message;
  EXPECT_GT(third.retry_after_seconds, 0);
  // Another tenant is not held back by a's.
  TenantLimiter::Admission other = Admitted(limiter.Admit(Named("b"), 0, now));
  EXPECT_EQ(limiter.InFlight("a"), 2);
  first.End(now);
  EXPECT_EQ(limiter.InFlight("a"), 1);
  TenantLimiter::Admission again = Admitted(limiter.Admit(Named("a"), 0, now));
  {
    TenantLimiter::Admission moved = std::move(second);  // a move holds one slot, not two
    EXPECT_EQ(limiter.InFlight("a"), 2);
  }
  EXPECT_EQ(limiter.InFlight("a"), 1);
}

TEST(TenantLimiter, NoLimitsAdmitEverything) {
  TenantLimiter limiter({});
  const Clock::time_point now = Clock::now();
  std::vector<TenantLimiter::Admission> held;
  for (int i = 0; i < 1000; ++i) held.push_back(Admitted(limiter.Admit(Named(""), 1'000'000, now)));
  EXPECT_EQ(limiter.InFlight(""), 1000);
}

TEST(TenantLimiter, TokensAMinuteReserveMaxTokensAndChargeWhatWasUsed) {
  TenantLimiter limiter({.tokens_per_minute = 600});  // 10 a second
  const Clock::time_point start = Clock::now();
  // Reserves 500 of 600; used 550 (prompt + generated): 50 left.
  TenantLimiter::Admission big = Admitted(limiter.Admit(Named("a"), 500, start));
  {
    const HttpError over = Refused(limiter.Admit(Named("a"), 200, start));
    EXPECT_EQ(over.status, 429);
    EXPECT_EQ(over.code, "tenant_token_limit");
    EXPECT_EQ(over.retry_after_seconds, 10);  // 100 missing at 10 a second
    EXPECT_NE(over.message.find("--tenant-tokens-per-minute is 600"), std::string::npos);
  }
  big.Used(550);
  big.End(start);
  // 50 in the bucket: 50 fit, 51 do not yet; one second later (60) they do.
  EXPECT_TRUE(std::holds_alternative<HttpError>(limiter.Admit(Named("a"), 51, start)));
  Admitted(limiter.Admit(Named("b"), 600, start)).End(start);  // b has its own bucket
  TenantLimiter::Admission later =
      Admitted(limiter.Admit(Named("a"), 51, start + std::chrono::seconds(1)));
  later.Used(0);  // refused by the server: the reservation comes back
  later.End(start + std::chrono::seconds(1));
  // A request that used more than it reserved leaves a debt that later ones wait out.
  TenantLimiter::Admission unbounded =
      Admitted(limiter.Admit(Named("a"), 0, start + std::chrono::seconds(1)));
  unbounded.Used(660);  // 60 in the bucket: 600 owed
  unbounded.End(start + std::chrono::seconds(1));
  const HttpError owed = Refused(limiter.Admit(Named("a"), 0, start + std::chrono::seconds(2)));
  EXPECT_EQ(owed.retry_after_seconds, 59);  // 590 owed at 10 a second
  Admitted(limiter.Admit(Named("a"), 0, start + std::chrono::seconds(62)));
}

TEST(TenantLimiter, ATenantsOwnLimitsReplaceTheFlags) {
  TenantLimiter limiter({.max_concurrent = 1, .tokens_per_minute = 60});
  const Clock::time_point now = Clock::now();
  Tenant big = Named("big");
  big.max_concurrent = 3;
  big.tokens_per_minute = 0;  // none
  std::vector<TenantLimiter::Admission> held;
  for (int i = 0; i < 3; ++i) held.push_back(Admitted(limiter.Admit(big, 1'000'000, now)));
  const HttpError fourth = Refused(limiter.Admit(big, 0, now));
  EXPECT_NE(fourth.message.find("max-concurrent in --api-key-file (3)"), std::string::npos)
      << fourth.message;
  Tenant small = Named("small");
  small.tokens_per_minute = 6;
  Admitted(limiter.Admit(small, 6, now)).Used(6);
  const HttpError empty = Refused(limiter.Admit(small, 6, now));
  EXPECT_EQ(empty.retry_after_seconds, 60);  // 6 a minute
  EXPECT_NE(empty.message.find("tokens-per-minute in --api-key-file is 6"), std::string::npos)
      << empty.message;
  // A reload that raises the limit: the bucket keeps its tokens, refills at the new rate.
  small.tokens_per_minute = 600;
  EXPECT_EQ(Refused(limiter.Admit(small, 6, now + std::chrono::seconds(1))).retry_after_seconds,
            1);
  Admitted(limiter.Admit(small, 6, now + std::chrono::seconds(2)));
}

TEST(TenantLimiter, ARequestThatNeverRanCostsNothing) {
  TenantLimiter limiter({.tokens_per_minute = 600});
  const Clock::time_point now = Clock::now();
  Admitted(limiter.Admit(Named("a"), 600, now)).End(now);  // e.g. no backend was ready: 503
  Admitted(limiter.Admit(Named("a"), 600, now));
}

TEST(TenantLimiter, AReservationOverAMinutesTokensWaitsForAFullBucket) {
  TenantLimiter limiter({.tokens_per_minute = 60});
  const Clock::time_point start = Clock::now();
  TenantLimiter::Admission huge = Admitted(limiter.Admit(Named("a"), 10'000, start));
  huge.Used(100);
  huge.End(start);  // -40
  const HttpError wait = Refused(limiter.Admit(Named("a"), 10'000, start));
  EXPECT_EQ(wait.retry_after_seconds, 100);  // back to 60 at 1 a second
  Admitted(limiter.Admit(Named("a"), 10'000, start + std::chrono::seconds(100)));
}

std::vector<v1::ChatMessage> Conversation(const std::string& text) {
  std::vector<v1::ChatMessage> messages(1);
  messages[0].set_role("user");
  messages[0].set_content(text);
  return messages;
}

TEST(ResponseStoreTenants, AnotherTenantsResponseIsNotThere) {
  ResponseStore store({.max_entries = 10, .max_bytes = 1 << 20, .ttl = std::chrono::hours(1)});
  const auto now = ResponseStore::Clock::now();
  store.Put("resp-a", "team-a", Conversation("secret"), R"({"id":"resp-a"})", "[]", now);
  EXPECT_TRUE(store.Get("resp-a", "team-a", now).has_value());
  EXPECT_FALSE(store.Get("resp-a", "team-b", now).has_value());
  EXPECT_FALSE(store.Get("resp-a", "", now).has_value());
  EXPECT_FALSE(store.GetResponse("resp-a", "team-b", now).has_value());
  EXPECT_FALSE(store.GetInputItems("resp-a", "team-b", now).has_value());
  EXPECT_FALSE(store.Erase("resp-a", "team-b", now));
  EXPECT_TRUE(store.GetResponse("resp-a", "team-a", now).has_value());  // still there
  EXPECT_TRUE(store.Erase("resp-a", "team-a", now));
  EXPECT_FALSE(store.Get("resp-a", "team-a", now).has_value());
}

TEST(ResponseIds, CarryAHundredAndTwentyEightRandomBits) {
  GatewayOptions options;
  GatewayMetrics metrics;
  BackendPool pool({}, BackendSecurity{}, std::chrono::seconds(1), 16, {});
  const StatusOr<std::unique_ptr<KeyStore>> keys = KeyStore::FromOptions(options);
  GatewayContext context(options, 1 << 20, pool, metrics, **keys, {}, 1 << 20);
  std::set<std::string> seen;
  std::string previous;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = context.NewId("resp");
    ASSERT_EQ(id.size(), 5u + 32u) << id;
    ASSERT_TRUE(id.starts_with("resp-")) << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 5), std::string::npos) << id;
    EXPECT_TRUE(seen.insert(id).second) << id;
    // Consecutive ids differ in many places, not in a counter's last digits.
    if (!previous.empty()) {
      int same = 0;
      for (size_t c = 5; c < id.size(); ++c) same += id[c] == previous[c];
      EXPECT_LT(same, 20) << previous << " then " << id;
    }
    previous = id;
  }
}

}  // namespace
}  // namespace tokenmill::gateway
