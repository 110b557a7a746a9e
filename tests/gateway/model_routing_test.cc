// Which names route to a backend's model (its own or the gateway's, and its LoRA adapters'),
// how an adapter's requests hash, and how /v1/models lists a model and its adapters.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gateway/api/openai/response_format.h"
#include "gateway/backends/affinity.h"
#include "gateway/backends/backend_pool.h"
#include "gateway/backends/backend_request.h"

namespace tokenmill::gateway {
namespace {

using nlohmann::json;

v1::ModelInfo InfoWithAdapters() {
  v1::ModelInfo info;
  info.set_name("base");
  info.add_served_model_names("base");
  info.add_served_model_names("alias");
  info.add_lora_adapters("a");
  info.add_lora_adapters("b");
  info.set_created(1700000000);
  info.set_max_model_len(2048);
  info.set_tool_call_format("hermes");
  return info;
}

TEST(GatewayModelRouting, BaseNamesThenAdapterNames) {
  BackendPool pool({}, BackendSecurity{}, std::chrono::milliseconds(1000), 0, {});
  const v1::ModelInfo info = InfoWithAdapters();
  EXPECT_EQ(pool.Match(info, ""), ModelMatch::kBase);
  EXPECT_EQ(pool.Match(info, "base"), ModelMatch::kBase);
  EXPECT_EQ(pool.Match(info, "alias"), ModelMatch::kBase);
  EXPECT_EQ(pool.Match(info, "a"), ModelMatch::kAdapter);
  EXPECT_EQ(pool.Match(info, "b"), ModelMatch::kAdapter);
  EXPECT_EQ(pool.Match(info, "c"), ModelMatch::kNone);
  EXPECT_EQ(pool.Match(info, "A"), ModelMatch::kNone);  // names are exact

  // The gateway's --served-model-name renames the base model only.
  BackendPool renamed({}, BackendSecurity{}, std::chrono::milliseconds(1000), 0, {"gw"});
  EXPECT_EQ(renamed.Match(info, "gw"), ModelMatch::kBase);
  EXPECT_EQ(renamed.Match(info, "base"), ModelMatch::kNone);
  EXPECT_EQ(renamed.Match(info, "a"), ModelMatch::kAdapter);

  // A base model's name shadows an adapter of the same name.
  v1::ModelInfo clash = info;
  clash.add_lora_adapters("alias");
  EXPECT_EQ(pool.Match(clash, "alias"), ModelMatch::kBase);
}

TEST(GatewayModelRouting, AnAdaptersPromptsHashApart) {
  EXPECT_EQ(AdapterAffinityKey("a", ""), "");  // no key, no affinity
  EXPECT_NE(AdapterAffinityKey("a", "system"), "system");
  EXPECT_NE(AdapterAffinityKey("a", "system"), AdapterAffinityKey("b", "system"));
  EXPECT_EQ(AdapterAffinityKey("a", "system"), AdapterAffinityKey("a", "system"));
  // The name and the key cannot run into each other.
  EXPECT_NE(AdapterAffinityKey("ab", "c"), AdapterAffinityKey("a", "bc"));
}

TEST(GatewayModelRouting, BackendsOfAnotherModelAreOutOfTheHash) {
  // Keys whose rendezvous winner is a backend without the adapter stay on one backend of
  // those that have it (the winner among them), rather than go to the least-loaded one.
  std::vector<BackendCandidate> c(3);
  c[0].address = "a:1";
  c[1].address = "b:1";
  c[2].address = "c:1";
  c[1].eligible = c[2].eligible = true;
  c[0].hashed = false;
  int moved_by_load = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string key = "k" + std::to_string(i);
    const int chosen = ChooseBackend(c, key, 4);
    ASSERT_TRUE(chosen == 1 || chosen == 2);
    c[chosen].in_flight = 1;  // the busier of the two, within the imbalance: still chosen
    EXPECT_EQ(ChooseBackend(c, key, 4), chosen);
    // Hashed over all three, about a third of the keys would win on "a:1" and go by load.
    c[0].hashed = true;
    if (ChooseBackend(c, key, 4) != chosen) ++moved_by_load;
    c[0].hashed = false;
    c[chosen].in_flight = 0;
  }
  EXPECT_GT(moved_by_load, 30);
}

TEST(GatewayModelRouting, ModelsListsTheAliasesThenTheAdapters) {
  const v1::ModelInfo info = InfoWithAdapters();
  const json entries = ModelEntries({"base", "alias"}, info);
  ASSERT_EQ(entries.size(), 4u);
  std::vector<std::string> ids;
  for (const json& entry : entries) {
    ids.push_back(entry["id"]);
    EXPECT_EQ(entry["object"], "model");
    EXPECT_EQ(entry["owned_by"], "tokenmill");
    EXPECT_EQ(entry["created"], 1700000000);
    EXPECT_EQ(entry["max_model_len"], 2048);
    EXPECT_EQ(entry["root"], "base");
    EXPECT_EQ(entry["capabilities"]["tool_call_format"], "hermes");
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"base", "alias", "a", "b"}));
  EXPECT_TRUE(entries[0]["parent"].is_null());
  EXPECT_TRUE(entries[1]["parent"].is_null());
  EXPECT_EQ(entries[2]["parent"], "base");
  EXPECT_EQ(entries[3]["parent"], "base");

  // Renamed by the gateway: the adapters' parent is the gateway's id.
  const json renamed = ModelEntries({"gw"}, info);
  ASSERT_EQ(renamed.size(), 3u);
  EXPECT_EQ(renamed[0]["id"], "gw");
  EXPECT_EQ(renamed[1]["parent"], "gw");
  EXPECT_EQ(renamed[1]["root"], "gw");
}

TEST(GatewayModelRouting, RoomIsKeptForTheAdaptersName) {
  v1::GenerateRequest generate;
  generate.set_text("hello");
  const size_t before = generate.ByteSizeLong();
  for (const size_t length : {1, 127, 128, 20000}) {
    const std::string name(length, 'x');
    v1::GenerateRequest named = generate;
    named.set_model(name);
    named.set_request_id(std::string(46, 'r'));  // "chatcmpl-", 32 hex digits, "-63"
    named.set_max_tokens_rest_of_context(true);
    EXPECT_LE(named.ByteSizeLong() - before, BytesAddedOnRouting(name)) << length;
  }
  EXPECT_EQ(BytesAddedOnRouting(""), kRequestIdBytes);
}

}  // namespace
}  // namespace tokenmill::gateway
