// Fair sharing between tenants (issue 35): while one tenant's hog fills the KV pool or the
// batch, another tenant's small request is admitted within a few steps, by preempting the
// hog's latest sequences; one tenant alone keeps today's order (priority, then arrival).
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "tests/scheduler/scheduler_sim.h"

namespace tokenmill::testing {
namespace scheduler_fairness_test {

NewRequest OfTenant(std::string tenant, NewRequest request) {
  request.tenant = std::move(tenant);
  return request;
}

SchedulerConfig Config(int max_num_seqs) {
  SchedulerConfig config;
  config.max_num_batched_tokens = 256;
  config.max_num_seqs = max_num_seqs;
  config.max_model_len = 512;
  config.max_queue = 1024;
  return config;
}

bool Admitted(SchedulerSim& sim, RequestId id) {
  const Request* request = sim.scheduler().Find(id);
  return request == nullptr || request->state == RequestState::kRunning;
}

// Steps until `id` runs (or ran); the steps it took, or -1 past `max_steps`.
int StepsUntilAdmitted(SchedulerSim& sim, RequestId id, int max_steps) {
  for (int step = 1; step <= max_steps; ++step) {
    sim.Step();
    if (Admitted(sim, id)) return step;
  }
  return -1;
}

// The hog: 64 requests of tenant "a" (as 4 prompts × n = 16 arrive), each long.
void AddHog(SchedulerSim& sim, int max_tokens) {
  for (RequestId id = 1; id <= 64; ++id) {
    ASSERT_TRUE(sim.Add(OfTenant("a", MakeRequest(id, 16, max_tokens))).ok());
  }
}

constexpr RequestId kSmall = 1000;
constexpr int kWithinSteps = 3;

TEST(SchedulerFairnessTest, SmallTenantIsAdmittedWhileAHogFillsTheKvPool) {
  // 64 blocks of 4 tokens: a few of the hog's sequences fill it.
  SchedulerSim sim(Config(/*max_num_seqs=*/256), MakeCacheConfig(64, 4));
  AddHog(sim, /*max_tokens=*/200);
  for (int i = 0; i < 40; ++i) sim.Step();
  ASSERT_GT(sim.kv_cache().pool().Usage(), 0.8);
  ASSERT_TRUE(sim.Add(OfTenant("b", MakeRequest(kSmall, 4, 4))).ok());
  const int steps = StepsUntilAdmitted(sim, kSmall, 50);
  EXPECT_GE(steps, 1);
  EXPECT_LE(steps, kWithinSteps);
  // And it finishes while the hog still runs.
  for (int i = 0; i < 10 && sim.scheduler().Find(kSmall) != nullptr; ++i) sim.Step();
  EXPECT_EQ(sim.scheduler().Find(kSmall), nullptr);
  EXPECT_EQ(sim.streamed(kSmall).size(), 4u);
  ASSERT_TRUE(sim.RunToCompletion(20000));
  sim.ExpectReferenceOutputs();
  EXPECT_EQ(sim.kv_cache().Stats().num_in_use_blocks, 0);
}

TEST(SchedulerFairnessTest, SmallTenantIsAdmittedWhileAHogHoldsEverySeat) {
  // Room in the pool, but the hog's sequences take all 8 seats of the batch.
  SchedulerSim sim(Config(/*max_num_seqs=*/8), MakeCacheConfig(1024, 4));
  AddHog(sim, /*max_tokens=*/300);
  for (int i = 0; i < 10; ++i) sim.Step();
  ASSERT_EQ(sim.scheduler().Stats().num_running, 8);
  ASSERT_TRUE(sim.Add(OfTenant("b", MakeRequest(kSmall, 4, 4))).ok());
  const int steps = StepsUntilAdmitted(sim, kSmall, 50);
  EXPECT_GE(steps, 1);
  EXPECT_LE(steps, kWithinSteps);
  ASSERT_TRUE(sim.RunToCompletion(20000));
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerFairnessTest, TwoBusyTenantsShareTheSeats) {
  SchedulerSim sim(Config(/*max_num_seqs=*/8), MakeCacheConfig(1024, 4));
  AddHog(sim, /*max_tokens=*/100);
  for (int i = 0; i < 5; ++i) sim.Step();
  for (RequestId id = 2001; id <= 2032; ++id) {
    ASSERT_TRUE(sim.Add(OfTenant("b", MakeRequest(id, 8, 100))).ok());
  }
  for (int i = 0; i < 20; ++i) sim.Step();
  int running_b = 0;
  for (RequestId id = 2001; id <= 2032; ++id) running_b += Admitted(sim, id) ? 1 : 0;
  EXPECT_EQ(running_b, 4);  // half the seats, no more: the shares converge without churn
  ASSERT_TRUE(sim.RunToCompletion(20000));
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerFairnessTest, AFullQueueStillTakesATenantBelowItsShare) {
  SchedulerConfig config = Config(/*max_num_seqs=*/8);
  config.max_queue = 4;
  SchedulerSim sim(config, MakeCacheConfig(64, 4));
  for (RequestId id = 1; id <= 4; ++id) {
    ASSERT_TRUE(sim.Add(OfTenant("a", MakeRequest(id, 4, 2))).ok());
  }
  EXPECT_EQ(sim.Add(OfTenant("a", MakeRequest(5, 4, 2))).code(),
            StatusCode::kResourceExhausted);
  // Two tenants waiting: each may hold half of --max-queue.
  EXPECT_TRUE(sim.Add(OfTenant("b", MakeRequest(6, 4, 2))).ok());
  EXPECT_TRUE(sim.Add(OfTenant("b", MakeRequest(7, 4, 2))).ok());
  EXPECT_EQ(sim.Add(OfTenant("b", MakeRequest(8, 4, 2))).code(),
            StatusCode::kResourceExhausted);
  ASSERT_TRUE(sim.RunToCompletion(100));
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerFairnessTest, OneTenantKeepsPriorityThenArrivalOrder) {
  // The same requests, all of tenant "x": served as the anonymous tenant's would be.
  for (const std::string tenant : {"", "x"}) {
    SchedulerSim sim(Config(/*max_num_seqs=*/2), MakeCacheConfig(64, 4));
    ASSERT_TRUE(sim.Add(OfTenant(tenant, MakeRequest(1, 4, 3))).ok());
    ASSERT_TRUE(sim.Add(OfTenant(tenant, MakeRequest(2, 4, 3))).ok());
    ASSERT_TRUE(sim.Add(OfTenant(tenant, MakeRequest(3, 4, 3, /*priority=*/-1))).ok());
    ASSERT_TRUE(sim.Add(OfTenant(tenant, MakeRequest(4, 4, 3))).ok());
    EXPECT_EQ(sim.Step(), "3:4 1:4") << tenant;
    EXPECT_EQ(sim.States(), "1:R 2:W 3:R 4:W") << tenant;
    ASSERT_TRUE(sim.RunToCompletion(100));
    sim.ExpectReferenceOutputs();
  }
}

}  // namespace scheduler_fairness_test
}  // namespace tokenmill::testing
