// Paging wastes less than one block per sequence: for any mix of sequence lengths, chunked
// prefill and decode, allocated-but-unused token slots stay below block_size per sequence.
#include <gtest/gtest.h>

#include <iostream>
#include <random>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "tests/cache/cache_test_util.h"

namespace tokenmill {
namespace kv_cache_waste_test {

using testing::TestRequest;

TEST(KvCacheWasteTest, UnusedSlotsStayBelowOneBlockPerSequence) {
  constexpr int kBlockSize = 16;
  constexpr int kSequences = 300;
  constexpr uint64_t kSeed = 4;
  std::cout << "seed " << kSeed << "\n";
  std::mt19937_64 rng(kSeed);
  const auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  KvCacheManager manager(testing::CacheConfig(kSequences * 200, kBlockSize));

  // Lengths from 1 token to 3000, skewed short, some sharing a 100-token system prompt.
  std::vector<TestRequest> requests(kSequences);
  std::vector<TokenId> system_prompt(100);
  for (TokenId& t : system_prompt) t = uniform(0, 49151);
  for (int i = 0; i < kSequences; ++i) {
    TestRequest& r = requests[i];
    r.id = i;
    if (uniform(0, 2) == 0) r.tokens = system_prompt;
    const int length = uniform(0, 3) == 0 ? uniform(1, 3000) : uniform(1, 300);
    while (static_cast<int>(r.tokens.size()) < length) r.tokens.push_back(uniform(0, 49151));
  }

  int64_t allocated_slots = 0;
  int64_t used_slots = 0;
  for (TestRequest& r : requests) {
    const int prompt_length = static_cast<int>(r.tokens.size());
    const int num_generated = uniform(0, 200);
    const PrefixHit hit = manager.GetComputedBlocks(r.view());
    int num_new = std::min(prompt_length - hit.num_tokens, uniform(1, 512));
    ASSERT_TRUE(manager.AllocateSlots(r.view(), num_new, 0, hit).has_value());
    r.num_computed_tokens = hit.num_tokens;
    // Chunked prefill, then decode one token at a time; check after every step.
    while (true) {
      r.num_computed_tokens += num_new;
      const int64_t slots = int64_t{kBlockSize} * manager.BlockTable(r.id).size();
      ASSERT_GE(slots, r.num_computed_tokens);
      ASSERT_LT(slots - r.num_computed_tokens, kBlockSize)
          << "request " << r.id << " holds " << slots << " slots for " << r.num_computed_tokens
          << " tokens";
      if (r.num_computed_tokens == static_cast<int>(r.tokens.size())) {
        if (static_cast<int>(r.tokens.size()) >= prompt_length + num_generated) break;
        r.tokens.push_back(uniform(0, 49151));
      }
      num_new =
          std::min(static_cast<int>(r.tokens.size()) - r.num_computed_tokens, uniform(1, 512));
      ASSERT_TRUE(manager.AllocateSlots(r.view(), num_new).has_value());
    }
    allocated_slots += int64_t{kBlockSize} * manager.BlockTable(r.id).size();
    used_slots += r.num_computed_tokens;
  }
  ASSERT_EQ(manager.CheckInvariants().ToString(), "OK");
  const double waste =
      static_cast<double>(allocated_slots - used_slots) / static_cast<double>(allocated_slots);
  std::cout << "measured waste: " << allocated_slots - used_slots << " unused of "
            << allocated_slots << " allocated token slots = " << waste << " over " << kSequences
            << " sequences (block size " << kBlockSize << ")\n";
  EXPECT_LT(allocated_slots - used_slots, int64_t{kSequences} * kBlockSize);
}

}  // namespace kv_cache_waste_test
}  // namespace tokenmill
