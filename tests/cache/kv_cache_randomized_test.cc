// Thousands of random scheduler-like operations (admit with prefix hits, chunked prefill,
// decode, speculative drafts, preemption, abort, resets) on the manager and on a naive
// reference model (reference_kv_cache.h). After every operation: CheckInvariants(), equal
// block tables, free-queue order and counters. A simulated KV memory records which tokens
// were written into each slot, so every prefix hit is checked to serve exactly the K/V of
// the request's own prefix, and no write may land in a shared or cached block. A subscriber
// applying the KV events (kv_events.h) holds exactly the cached prefixes after every operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "tests/cache/cache_test_util.h"
#include "tests/cache/reference_kv_cache.h"

namespace tokenmill {
namespace kv_cache_randomized_test {

using testing::ReferenceKvCache;
using testing::TestRequest;

struct SimRequest : TestRequest {
  size_t target_length = 0;
  bool running = false;  // holds blocks
};

// What the engine would have written into one KV slot: the K/V of the last token of
// `prefix`, computed under `salt`.
struct Slot {
  bool written = false;
  std::string salt;
  std::vector<TokenId> prefix;
};

struct Coverage {
  int admitted = 0, prefix_hits = 0, failed_allocations = 0, preemptions = 0, draft_steps = 0,
      finished = 0, aborted = 0, resets = 0;
};

class Simulation {
 public:
  Simulation(const KvCacheConfig& config, BlockHasher hasher, uint64_t seed,
             bool collisions_possible)
      : collisions_possible_(collisions_possible),
        config_(config),
        rng_(seed),
        manager_(config, std::move(hasher)),
        reference_(config.num_blocks, config.block_size, config.watermark_blocks),
        slots_(static_cast<size_t>(config.num_blocks) * config.block_size) {
    const int lengths[] = {0, 5, 13, 37};
    for (const int length : lengths) system_prompts_.push_back(RandomTokens(length));
    manager_.set_event_log(&events_);
  }

  void RunOperation() {
    const int op = Uniform(0, 99);
    if (op < 15) {
      Arrive();
    } else if (op < 80) {
      if (!requests_.empty()) Schedule(PickRequest());
    } else if (op < 86) {
      if (!requests_.empty()) Abort(PickRequest());
    } else if (op < 94) {
      if (!requests_.empty()) {
        SimRequest& r = PickRequest();
        manager_.CacheComputedBlocks(r.view());
        reference_.CacheComputed(r.view());
      }
    } else if (op < 99) {
      EXPECT_EQ(manager_.ResetPrefixCache(), reference_.ResetPrefixCache());
    } else if (Uniform(0, 9) == 0) {
      ResetAll();
    }
    Compare();
  }

  const Coverage& coverage() const { return coverage_; }
  const KvCacheStats stats() const { return manager_.Stats(); }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::vector<TokenId> RandomTokens(int count) {
    std::vector<TokenId> tokens(count);
    // A tiny vocabulary: equal blocks after different prefixes are common.
    for (TokenId& t : tokens) t = Uniform(0, 5);
    return tokens;
  }

  SimRequest& PickRequest() {
    auto it = requests_.begin();
    std::advance(it, Uniform(0, static_cast<int>(requests_.size()) - 1));
    return it->second;
  }

  void Arrive() {
    if (requests_.size() >= 10) return;
    SimRequest r;
    r.id = next_id_++;
    if (!past_prompts_.empty() && Uniform(0, 4) == 0) {
      r.tokens = past_prompts_[Uniform(0, static_cast<int>(past_prompts_.size()) - 1)];
    } else {
      r.tokens = system_prompts_[Uniform(0, 3)];
      const std::vector<TokenId> suffix = RandomTokens(Uniform(1, 30));
      r.tokens.insert(r.tokens.end(), suffix.begin(), suffix.end());
      past_prompts_.push_back(r.tokens);
    }
    const char* salts[] = {"", "", "tenant-b"};
    r.salt = salts[Uniform(0, 2)];
    r.target_length = r.tokens.size() + Uniform(1, 20);
    requests_[r.id] = std::move(r);
  }

  int LookaheadTokens() { return Uniform(0, 3) == 0 ? Uniform(1, 5) : 0; }

  void Schedule(SimRequest& r) {
    if (!r.running) {
      Admit(r);
      return;
    }
    const int remaining = static_cast<int>(r.tokens.size()) - r.num_computed_tokens;
    std::vector<TokenId> drafts;
    if (remaining == 1 && Uniform(0, 2) == 0) drafts = RandomTokens(Uniform(1, 3));
    const int num_new =
        drafts.empty() ? std::min(remaining, Uniform(1, 40)) : 1 + static_cast<int>(drafts.size());
    const int lookahead = LookaheadTokens();
    const auto fresh = manager_.AllocateSlots(r.view(), num_new, lookahead);
    const auto expected = reference_.Allocate(r.view(), num_new, lookahead, {});
    EXPECT_EQ(fresh, expected) << "request " << r.id;
    if (!fresh.has_value()) {
      ++coverage_.failed_allocations;
      Preempt(r);
      return;
    }
    Compute(r, num_new, drafts);
  }

  void Admit(SimRequest& r) {
    const PrefixHit hit = manager_.GetComputedBlocks(r.view());
    const std::vector<BlockId> expected_hit = reference_.Lookup(r.view());
    EXPECT_EQ(hit.blocks, expected_hit) << "request " << r.id;
    ExpectSlotsHoldPrefix(r, hit.blocks);
    const int remaining = static_cast<int>(r.tokens.size()) - hit.num_tokens;
    const int num_new = std::min(remaining, Uniform(1, 40));
    const int lookahead = LookaheadTokens();
    const auto fresh = manager_.AllocateSlots(r.view(), num_new, lookahead, hit);
    const auto expected = reference_.Allocate(r.view(), num_new, lookahead, expected_hit);
    EXPECT_EQ(fresh, expected) << "request " << r.id;
    if (!fresh.has_value()) {
      ++coverage_.failed_allocations;
      // Like a scheduler, sometimes preempt a running request to make room.
      for (auto& [id, other] : requests_) {
        if (other.running && Uniform(0, 1) == 0) {
          Preempt(other);
          break;
        }
      }
      return;
    }
    ++coverage_.admitted;
    if (!hit.blocks.empty()) ++coverage_.prefix_hits;
    r.running = true;
    r.num_computed_tokens = hit.num_tokens;
    Compute(r, num_new, {});
  }

  // The engine's part: write K/V for num_new tokens (the last `drafts.size()` are drafts),
  // then verification accepts some drafts and samples one more token.
  void Compute(SimRequest& r, int num_new, const std::vector<TokenId>& drafts) {
    std::vector<TokenId> sequence = r.tokens;
    sequence.insert(sequence.end(), drafts.begin(), drafts.end());
    const std::span<const BlockId> table = manager_.BlockTable(r.id);
    const int bs = config_.block_size;
    for (int pos = r.num_computed_tokens; pos < r.num_computed_tokens + num_new; ++pos) {
      ASSERT_LT(pos / bs, static_cast<int>(table.size())) << "no slot for position " << pos;
      const KvBlock& block = manager_.pool().block(table[pos / bs]);
      ASSERT_EQ(block.ref_count, 1) << "writing into shared block " << block.id;
      ASSERT_FALSE(block.identity.has_value()) << "writing into cached block " << block.id;
      Slot& slot = slots_[static_cast<size_t>(block.id) * bs + pos % bs];
      slot = Slot{true, r.salt, std::vector<TokenId>(sequence.begin(), sequence.begin() + pos + 1)};
    }
    r.num_computed_tokens += num_new;
    if (!drafts.empty()) {
      ++coverage_.draft_steps;
      const int accepted = Uniform(0, static_cast<int>(drafts.size()));
      r.tokens.insert(r.tokens.end(), drafts.begin(), drafts.begin() + accepted);
      r.num_computed_tokens = static_cast<int>(r.tokens.size());
    }
    if (r.num_computed_tokens == static_cast<int>(r.tokens.size())) {
      r.tokens.push_back(Uniform(0, 5));  // the sampled token
    }
    if (r.tokens.size() >= r.target_length) {
      ++coverage_.finished;
      manager_.Free(r.view());
      reference_.Free(r.view());
      const uint64_t id = r.id;
      requests_.erase(id);  // r dangles from here
    }
  }

  void ExpectSlotsHoldPrefix(const SimRequest& r, const std::vector<BlockId>& hit) {
    const int bs = config_.block_size;
    for (int i = 0; i < static_cast<int>(hit.size()); ++i) {
      for (int offset = 0; offset < bs; ++offset) {
        const int pos = i * bs + offset;
        const Slot& slot = slots_[static_cast<size_t>(hit[i]) * bs + offset];
        const std::vector<TokenId> prefix(r.tokens.begin(), r.tokens.begin() + pos + 1);
        ASSERT_TRUE(slot.written && slot.salt == r.salt && slot.prefix == prefix)
            << "request " << r.id << " hit block " << hit[i] << " whose slot " << offset
            << " holds other K/V";
      }
    }
  }

  void Preempt(SimRequest& r) {
    ++coverage_.preemptions;
    manager_.Free(r.view());
    reference_.Free(r.view());
    r.running = false;
    r.num_computed_tokens = 0;
  }

  void Abort(SimRequest& r) {
    ++coverage_.aborted;
    manager_.Free(r.view());
    reference_.Free(r.view());
    const uint64_t id = r.id;
    requests_.erase(id);
  }

  void ResetAll() {
    ++coverage_.resets;
    manager_.Reset();
    reference_.Reset();
    for (auto& [id, r] : requests_) {
      r.running = false;
      r.num_computed_tokens = 0;
    }
    for (Slot& slot : slots_) slot.written = false;
  }

  void Compare() {
    EXPECT_EQ(manager_.CheckInvariants().ToString(), "OK");
    for (const auto& [id, r] : requests_) {
      const std::span<const BlockId> table = manager_.BlockTable(id);
      EXPECT_EQ(std::vector<BlockId>(table.begin(), table.end()), reference_.Table(id))
          << "table of request " << id;
    }
    EXPECT_EQ(reference_.RequestIds().size(),
              static_cast<size_t>(std::count_if(requests_.begin(), requests_.end(),
                                                [](const auto& e) { return e.second.running; })));
    EXPECT_EQ(manager_.pool().FreeQueueIds(), reference_.Queue());
    const KvCacheStats stats = manager_.Stats();
    EXPECT_EQ(stats.num_cached_evictable_blocks, reference_.NumCachedEvictable());
    EXPECT_EQ(stats.evictions, reference_.evictions());
    EXPECT_EQ(stats.prefix_query_tokens, reference_.query_tokens());
    EXPECT_EQ(stats.prefix_hit_tokens, reference_.hit_tokens());
    CompareSubscriber();
  }

  // A subscriber's prefixes, keyed by hash as a router keys them: several only when the
  // hasher collides (a real 64-bit hash practically never does).
  void CompareSubscriber() {
    for (const KvCacheEvent& event : events_) {
      switch (event.kind) {
        case KvCacheEvent::Kind::kBlockStored:
          subscriber_.emplace(event.hash, std::pair(event.parent_hash, event.tokens));
          break;
        case KvCacheEvent::Kind::kBlockRemoved: {
          const auto it = subscriber_.find(event.hash);
          ASSERT_NE(it, subscriber_.end()) << "removed a hash never stored: " << event.hash;
          subscriber_.erase(it);
          break;
        }
        case KvCacheEvent::Kind::kAllBlocksCleared:
          subscriber_.clear();
          break;
      }
    }
    events_.clear();
    std::multimap<BlockHash, std::pair<std::optional<BlockHash>, std::vector<TokenId>>> cached;
    for (const KvCacheEvent& prefix : manager_.pool().CachedPrefixes()) {
      cached.emplace(prefix.hash, std::pair(prefix.parent_hash, prefix.tokens));
    }
    const auto hashes = [](const auto& map) {
      std::vector<BlockHash> keys;
      for (const auto& entry : map) keys.push_back(entry.first);
      return keys;
    };
    ASSERT_EQ(hashes(subscriber_), hashes(cached));
    if (!collisions_possible_) {
      EXPECT_EQ(subscriber_, cached);
    }
  }

  const bool collisions_possible_;  // the hasher is one of the tests' weak ones
  KvCacheConfig config_;
  std::mt19937_64 rng_;
  KvCacheManager manager_;
  ReferenceKvCache reference_;
  std::vector<Slot> slots_;
  std::vector<std::vector<TokenId>> system_prompts_;
  std::vector<std::vector<TokenId>> past_prompts_;
  std::map<uint64_t, SimRequest> requests_;
  uint64_t next_id_ = 1;
  Coverage coverage_;
  std::vector<KvCacheEvent> events_;
  std::multimap<BlockHash, std::pair<std::optional<BlockHash>, std::vector<TokenId>>> subscriber_;
};

uint64_t Seed() {
  const char* env = std::getenv("TOKENMILL_CACHE_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 20261130;
}

// Forced collisions: the hash ignores the parent and the salt and keeps 3 values.
BlockHash WeakHash(BlockHash, std::span<const TokenId> tokens, std::string_view) {
  return static_cast<BlockHash>(tokens[0] % 3);
}
BlockHash ConstantHash(BlockHash, std::span<const TokenId>, std::string_view) { return 7; }

struct RandomCase {
  const char* name;
  KvCacheConfig config;
  BlockHasher hasher;
};

class KvCacheRandomizedTest : public ::testing::TestWithParam<int> {};

TEST_P(KvCacheRandomizedTest, MatchesTheReferenceAndKeepsInvariantsAfterEveryOperation) {
  const RandomCase cases[] = {
      {"default hash, block 4", testing::CacheConfig(48, 4, 2), DefaultBlockHasher()},
      {"weak hash, block 4", testing::CacheConfig(48, 4), &WeakHash},
      {"constant hash, block 16", testing::CacheConfig(24, 16, 1), &ConstantHash},
  };
  const RandomCase& c = cases[GetParam()];
  const uint64_t seed = Seed() + GetParam();
  constexpr int kOperations = 6000;
  std::cout << "[" << c.name << "] seed " << seed << " (TOKENMILL_CACHE_SEED=" << Seed()
            << " to replay), " << kOperations << " operations\n";
  Simulation sim(c.config, c.hasher, seed, /*collisions_possible=*/GetParam() > 0);
  for (int op = 0; op < kOperations; ++op) {
    sim.RunOperation();
    if (HasFailure()) FAIL() << "first failure at operation " << op << ", seed " << seed;
  }
  const Coverage& cov = sim.coverage();
  const KvCacheStats stats = sim.stats();
  std::cout << "  admitted " << cov.admitted << ", prefix hits " << cov.prefix_hits
            << ", hit tokens " << stats.prefix_hit_tokens << " of " << stats.prefix_query_tokens
            << ", evictions " << stats.evictions << ", failed allocations "
            << cov.failed_allocations << ", preemptions " << cov.preemptions << ", draft steps "
            << cov.draft_steps << ", finished " << cov.finished << ", aborted " << cov.aborted
            << ", resets " << cov.resets << "\n";
  // The workload must have reached every path it is meant to test.
  EXPECT_GT(cov.prefix_hits, 50);
  EXPECT_GT(stats.evictions, 50);
  EXPECT_GT(cov.failed_allocations, 10);
  EXPECT_GT(cov.preemptions, 10);
  EXPECT_GT(cov.draft_steps, 50);
  EXPECT_GT(cov.finished, 50);
}

INSTANTIATE_TEST_SUITE_P(Hashers, KvCacheRandomizedTest, ::testing::Values(0, 1, 2));

}  // namespace kv_cache_randomized_test
}  // namespace tokenmill
