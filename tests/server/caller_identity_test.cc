// Who a call comes from (server/grpc/caller_identity.h): the tenant metadata is believed only
// with the server's key; a negative priority needs the key; the prefix-cache salt keeps
// tenants apart unless shared.
#include "server/grpc/caller_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/grpc/request_builder.h"

namespace tokenmill::server {
namespace {

using ::testing::HasSubstr;

// Metadata as gRPC hands it over; the strings must outlive the map.
class Metadata {
 public:
  Metadata(std::initializer_list<std::pair<std::string, std::string>> entries)
      : entries_(entries) {
    for (const auto& [key, value] : entries_) map_.emplace(key, value);
  }
  const std::multimap<grpc::string_ref, grpc::string_ref>& map() const { return map_; }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
  std::multimap<grpc::string_ref, grpc::string_ref> map_;
};

TEST(CallerIdentityTest, NoKeyAnonymousMayRaisePriority) {
  CallerIdentity caller;
  ASSERT_TRUE(IdentifyCaller(Metadata{}.map(), "", caller).ok());
  EXPECT_EQ(caller.tenant, "");
  EXPECT_FALSE(caller.authenticated);
  EXPECT_TRUE(CheckPriorityAllowed(-3, caller).ok());
}

TEST(CallerIdentityTest, NoKeyRefusesATenant) {
  CallerIdentity caller;
  const grpc::Status status =
      IdentifyCaller(Metadata{{"x-tokenmill-tenant", "acme"}}.map(), "", caller);
  EXPECT_EQ(status.error_code(), grpc::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("--api-key"));
}

TEST(CallerIdentityTest, KeyedCallNamesItsTenant) {
  CallerIdentity caller;
  const Metadata metadata{{"authorization", "Bearer k"}, {"x-tokenmill-tenant", "acme"}};
  ASSERT_TRUE(IdentifyCaller(metadata.map(), "k", caller).ok());
  EXPECT_EQ(caller.tenant, "acme");
  EXPECT_TRUE(caller.authenticated);
  EXPECT_TRUE(CheckPriorityAllowed(-1, caller).ok());
}

TEST(CallerIdentityTest, WrongKeyIsUnauthenticatedBeforeTheTenant) {
  CallerIdentity caller;
  const Metadata metadata{{"authorization", "Bearer x"}, {"x-tokenmill-tenant", "acme"}};
  EXPECT_EQ(IdentifyCaller(metadata.map(), "k", caller).error_code(), grpc::UNAUTHENTICATED);
}

TEST(CallerIdentityTest, TenantTwiceOrTooLongIsInvalid) {
  CallerIdentity caller;
  const Metadata twice{{"authorization", "Bearer k"},
                       {"x-tokenmill-tenant", "a"},
                       {"x-tokenmill-tenant", "b"}};
  EXPECT_EQ(IdentifyCaller(twice.map(), "k", caller).error_code(), grpc::INVALID_ARGUMENT);
  const Metadata long_name{{"authorization", "Bearer k"},
                           {"x-tokenmill-tenant", std::string(kMaxTenantBytes + 1, 't')}};
  EXPECT_EQ(IdentifyCaller(long_name.map(), "k", caller).error_code(), grpc::INVALID_ARGUMENT);
}

TEST(CallerIdentityTest, UnauthenticatedCallerMayNotRaisePriority) {
  const CallerIdentity caller{.tenant = "", .authenticated = false, .may_raise_priority = false};
  EXPECT_TRUE(CheckPriorityAllowed(0, caller).ok());
  EXPECT_TRUE(CheckPriorityAllowed(7, caller).ok());
  const grpc::Status status = CheckPriorityAllowed(-1, caller);
  EXPECT_EQ(status.error_code(), grpc::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("--api-key"));
}

TEST(PrefixCacheSaltTest, PrivateSaltsNeverCollideAcrossTenants) {
  // Every (tenant, client salt) split of the same bytes gives a distinct salt.
  const std::string joined = "redsalt";
  std::vector<std::string> salts;
  for (size_t cut = 0; cut <= joined.size(); ++cut) {
    salts.push_back(PrefixCacheSalt(joined.substr(0, cut), joined.substr(cut), false));
  }
  // An anonymous client spelling a tenant's derived salt gets another.
  salts.push_back(PrefixCacheSalt("", PrefixCacheSalt("red", "salt", false), false));
  salts.push_back(PrefixCacheSalt("", "", false));
  std::sort(salts.begin(), salts.end());
  EXPECT_EQ(std::adjacent_find(salts.begin(), salts.end()), salts.end());
  EXPECT_EQ(PrefixCacheSalt("red", "s", false), PrefixCacheSalt("red", "s", false));
  // No tenant and no salt: the empty salt of a single-tenant server, as before.
  EXPECT_EQ(PrefixCacheSalt("", "", false), "");
}

TEST(PrefixCacheSaltTest, SharedIsTheClientSaltAlone) {
  EXPECT_EQ(PrefixCacheSalt("red", "s", true), "s");
  EXPECT_EQ(PrefixCacheSalt("blue", "s", true), PrefixCacheSalt("red", "s", true));
}

}  // namespace
}  // namespace tokenmill::server
