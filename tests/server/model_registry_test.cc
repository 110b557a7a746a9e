// ModelRegistry over real model loads (stories260K under several names): loads on first use,
// unloads the least recently used for room only once its leases end, grants nothing new on a
// model making room, times waits out, reports failed loads, unloads idle models.
#include "server/grpc/model_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "server/grpc/server_options.h"
#include "tests/test_paths.h"

namespace tokenmill::server {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kModelPath = TestModelsDir() + "/stories260K.gguf";
constexpr int64_t kFootprint = 60;  // as the registry counts it: two do not fit in 100

// A registry of `names.size()` copies of stories260K; a name starting with "broken" loads a
// missing file. `loads` counts the loader's calls.
class Registry {
 public:
  Registry(std::vector<std::string> names, ModelLimits limits) {
    std::vector<RegisteredModel> models;
    for (const std::string& name : names) {
      models.push_back({.names = {name}, .adapters = nullptr, .footprint_bytes = kFootprint});
    }
    models.front().adapters = std::make_shared<LoraTable>(
        1, std::vector<std::pair<std::string, std::string>>{{"adapter", "adapter.gguf"}});
    registry_ = std::make_unique<ModelRegistry>(
        std::move(models), limits, [this, names](int index) {
          ++loads;
          ServerOptions options;
          options.kv_cache_memory = "1MiB";
          const ModelSource source{
              .path = names[index].starts_with("broken") ? std::string("no/such/model.gguf") : kModelPath,
              .names = {names[index]}};
          const ServerOptions model_options = OptionsForModel(options, source, index == 0);
          const StatusOr<EngineConfig> config = MakeEngineConfig(model_options, 0);
          TM_CHECK(config.ok());
          return LoadServingModel(model_options, *config, int64_t{16} << 20,
                                  std::make_shared<LoraTable>(1));
        });
  }
  ModelRegistry* operator->() { return registry_.get(); }
  ModelRegistry& get() { return *registry_; }
  std::atomic<int> loads{0};

 private:
  std::unique_ptr<ModelRegistry> registry_;
};

// Acquire's outcome, awaited.
std::future<StatusOr<ModelLease>> AcquireLater(ModelRegistry& registry, int index) {
  auto promise = std::make_shared<std::promise<StatusOr<ModelLease>>>();
  registry.Acquire(index, [promise](StatusOr<ModelLease> lease) {
    promise->set_value(std::move(lease));
  });
  return promise->get_future();
}

bool Loaded(const ModelRegistry& registry, int index) { return registry.States()[index].loaded; }

TEST(ModelRegistry, ResolvesNamesAndAdaptersAndRefusesOthers) {
  Registry registry({"a", "b"}, {});
  EXPECT_EQ(registry->Resolve("")->index, 0);
  EXPECT_EQ(registry->Resolve("b")->index, 1);
  const auto adapter = registry->Resolve("adapter");
  ASSERT_TRUE(adapter.ok());
  EXPECT_EQ(adapter->index, 0);
  EXPECT_TRUE(adapter->adapter);
  const auto unknown = registry->Resolve("../../etc/passwd");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("serves 'a', 'b', 'adapter'"));
  EXPECT_THAT(registry->Ids(), ::testing::ElementsAre("a", "b"));
}

TEST(ModelRegistry, LoadsOnFirstUseAndSwapsWithinTheMemoryLimit) {
  Registry registry({"a", "b"}, {.memory_bytes = 100});
  ASSERT_TRUE(registry->Start().ok());
  EXPECT_TRUE(Loaded(registry.get(), 0));
  EXPECT_FALSE(Loaded(registry.get(), 1));
  ModelLease a = registry->TryAcquire(0);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(registry->TryAcquire(1), nullptr);  // not loaded

  // b waits while a is held; a takes no new lease meanwhile (it makes room).
  std::future<StatusOr<ModelLease>> b = AcquireLater(registry.get(), 1);
  EXPECT_EQ(b.wait_for(300ms), std::future_status::timeout);
  EXPECT_EQ(registry->TryAcquire(0), nullptr);
  std::future<StatusOr<ModelLease>> a_again = AcquireLater(registry.get(), 0);
  EXPECT_EQ(a->name, "a");
  a.reset();  // a's last lease: it unloads, b loads

  ASSERT_EQ(b.wait_for(60s), std::future_status::ready);
  StatusOr<ModelLease> b_lease = b.get();
  ASSERT_TRUE(b_lease.ok()) << b_lease.status().message();
  EXPECT_EQ((*b_lease)->name, "b");
  const std::vector<ModelState> states = registry->States();
  EXPECT_FALSE(states[0].loaded);
  EXPECT_EQ(states[0].unloads, 1);
  EXPECT_EQ(states[1].loads, 1);

  // a's waiter gets it back once b's lease ends.
  EXPECT_EQ(a_again.wait_for(200ms), std::future_status::timeout);
  b_lease->reset();
  ASSERT_EQ(a_again.wait_for(60s), std::future_status::ready);
  StatusOr<ModelLease> a_lease = a_again.get();
  ASSERT_TRUE(a_lease.ok());
  EXPECT_EQ((*a_lease)->name, "a");
  EXPECT_EQ(registry->States()[0].loads, 2);
  EXPECT_EQ(registry.loads, 3);
}

TEST(ModelRegistry, AWaitEndsAfterTheLoadTimeout) {
  Registry registry({"a", "b"}, {.memory_bytes = 100, .load_timeout = 200ms});
  ASSERT_TRUE(registry->Start().ok());
  const ModelLease a = registry->TryAcquire(0);  // held throughout: b never fits
  std::future<StatusOr<ModelLease>> b = AcquireLater(registry.get(), 1);
  ASSERT_EQ(b.wait_for(30s), std::future_status::ready);
  const StatusOr<ModelLease> refused = b.get();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(), HasSubstr("--model-load-timeout"));
}

TEST(ModelRegistry, WaitingCallsAreCapped) {
  Registry registry({"a", "b"}, {.memory_bytes = 100, .load_timeout = 60s, .max_waiting = 1});
  ASSERT_TRUE(registry->Start().ok());
  ModelLease a = registry->TryAcquire(0);
  std::future<StatusOr<ModelLease>> first = AcquireLater(registry.get(), 1);
  std::future<StatusOr<ModelLease>> second = AcquireLater(registry.get(), 1);
  ASSERT_EQ(second.wait_for(0s), std::future_status::ready);
  const StatusOr<ModelLease> refused = second.get();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("--max-queue"));
  a.reset();  // the first still gets its model
  ASSERT_EQ(first.wait_for(60s), std::future_status::ready);
  EXPECT_TRUE(first.get().ok());
}

TEST(ModelRegistry, WithoutALimitModelsStayLoadedTogether) {
  Registry registry({"a", "b", "c"}, {});
  ASSERT_TRUE(registry->Start().ok());
  const ModelLease a = registry->TryAcquire(0);
  for (int index : {1, 2}) {
    std::future<StatusOr<ModelLease>> lease = AcquireLater(registry.get(), index);
    ASSERT_EQ(lease.wait_for(60s), std::future_status::ready);
    ASSERT_TRUE(lease.get().ok());
  }
  for (const ModelState& state : registry->States()) EXPECT_TRUE(state.loaded) << state.name;
}

TEST(ModelRegistry, AFailedLoadIsEveryCallersError) {
  Registry registry({"a", "broken"}, {});
  ASSERT_TRUE(registry->Start().ok());
  std::future<StatusOr<ModelLease>> first = AcquireLater(registry.get(), 1);
  ASSERT_EQ(first.wait_for(60s), std::future_status::ready);
  const StatusOr<ModelLease> refused = first.get();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("model broken failed to load"));
  // Later calls get the same error at once, without another load.
  std::future<StatusOr<ModelLease>> second = AcquireLater(registry.get(), 1);
  ASSERT_EQ(second.wait_for(0s), std::future_status::ready);
  EXPECT_FALSE(second.get().ok());
  EXPECT_EQ(registry.loads, 2);
  // The default model's load failing fails the start.
  Registry broken_default({"broken-default"}, {});
  EXPECT_FALSE(broken_default->Start().ok());
}

TEST(ModelRegistry, AnIdleModelUnloadsAfterTheTimeoutAndAPeekIsNoUse) {
  Registry registry({"a"}, {.idle_timeout = 300ms});
  ASSERT_TRUE(registry->Start().ok());
  ModelLease lease = registry->TryAcquire(0);
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(Loaded(registry.get(), 0));  // held: not idle
  lease.reset();
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (Loaded(registry.get(), 0) && std::chrono::steady_clock::now() < deadline) {
    EXPECT_NE(registry->Peek(0), nullptr);  // looking at it is not using it
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_FALSE(Loaded(registry.get(), 0));
  EXPECT_EQ(registry->Peek(0), nullptr);
  // The next call loads it again.
  std::future<StatusOr<ModelLease>> again = AcquireLater(registry.get(), 0);
  ASSERT_EQ(again.wait_for(60s), std::future_status::ready);
  EXPECT_TRUE(again.get().ok());
}

TEST(ModelRegistry, ShutdownAnswersTheWaitersAndGrantsNoMore) {
  Registry registry({"a", "b"}, {.memory_bytes = 100});
  ASSERT_TRUE(registry->Start().ok());
  std::future<StatusOr<ModelLease>> b;
  {
    const ModelLease a = registry->TryAcquire(0);
    b = AcquireLater(registry.get(), 1);
    EXPECT_EQ(b.wait_for(100ms), std::future_status::timeout);
    // The engine drains with the lease still held; the waiter hears at once.
    registry->Shutdown(0ms);
    ASSERT_EQ(b.wait_for(0s), std::future_status::ready);
  }
  const StatusOr<ModelLease> refused = b.get();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(registry->TryAcquire(0), nullptr);
  EXPECT_FALSE(AcquireLater(registry.get(), 0).get().ok());
}

}  // namespace
}  // namespace tokenmill::server
