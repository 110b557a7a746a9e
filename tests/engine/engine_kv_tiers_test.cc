// The disk tier below the pool (--kv-cache-dir) through the engine: prefix blocks written
// through as they are cached come back, after the pool evicted them or in a new engine on the
// same directory, as a prefix hit with the same greedy tokens as computing them; another KV
// type never reads them; corrupt files are refused, counted and recomputed; a request
// aborted while its blocks load ends cleanly. The store's own faults: tests/cache/tiers/.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "engine/kv_tiering.h"
#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::steady_clock;

constexpr int kBlockSize = 16;
constexpr int kPromptTokens = 100;  // six full blocks are looked up (the last token is computed)
constexpr int kMaxTokens = 12;

int StoriesVocab() { return Stories().tokenizer->vocab_size(); }

class EngineKvTiersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tokenmill-kv-tiers-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  EngineConfig Config(KvType kv_type = KvType::kF16) const {
    EngineConfig config = SmallConfig(/*num_kv_blocks=*/24);
    config.block_size = kBlockSize;
    config.kv_type = kv_type;
    config.kv_tiers = {.dir = dir_.string(),
                       .max_bytes = int64_t{64} << 20,
                       .ttl = std::chrono::seconds(0),
                       .model_path = "models/stories260K.gguf"};
    return config;
  }
  static std::unique_ptr<EngineCore> NewCore(const EngineConfig& config) {
    auto core = BuildEngineCore(*Stories().model, *Stories().tokenizer, config);
    TM_CHECK(core.ok()) << core.status().ToString();
    return std::move(*core);
  }
  // Steps until no request is left, waiting for loads from disk when nothing can run.
  static void Drain(EngineCore& core) {
    const steady_clock::time_point deadline = steady_clock::now() + std::chrono::seconds(60);
    while (core.has_unfinished_requests()) {
      ASSERT_LT(steady_clock::now(), deadline) << "requests did not finish";
      if (!core.Step()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // Runs one greedy request of `prompt` to its end.
  static Collected Run(EngineCore& core, RequestId id, const std::vector<TokenId>& prompt) {
    Collector collector;
    const Status added = core.Add(id, Greedy(prompt, kMaxTokens, collector.Sink(id)));
    TM_CHECK(added.ok()) << added.ToString();
    Drain(core);
    return collector[id];
  }
  // Waits for the disk tier's queued writes.
  static void Flush(EngineCore& core) {
    core.tiering()->Flush(steady_clock::now() + std::chrono::seconds(30));
  }
  // Pushes every cached block of `core` out of its pool with other prompts.
  static void Evict(EngineCore& core) {
    for (RequestId id = 1000; id < 1008; ++id) {  // the model's context is 128 tokens
      Run(core, id, RandomPrompt(110, StoriesVocab(), static_cast<uint32_t>(id)));
    }
  }
  std::vector<fs::path> BlockFiles() const {
    std::vector<fs::path> files;
    for (const auto& entry : fs::recursive_directory_iterator(dir_)) {
      if (entry.is_regular_file() && entry.path().extension() == ".kvb") files.push_back(entry);
    }
    return files;
  }

  fs::path dir_;
  const std::vector<TokenId> prompt_ = RandomPrompt(kPromptTokens, StoriesVocab(), 7);
};

TEST_F(EngineKvTiersTest, EvictedPrefixComesBackFromDiskWithTheSameTokens) {
  auto core = NewCore(Config());
  const Collected first = Run(*core, 1, prompt_);
  ASSERT_TRUE(first.finished);
  EXPECT_EQ(first.final_event.usage.cached_prompt_tokens, 0);
  Flush(*core);
  Evict(*core);
  Flush(*core);
  EXPECT_GE(BlockFiles().size(), 6u);

  const Collected again = Run(*core, 2, prompt_);
  EXPECT_EQ(again.token_ids, first.token_ids);
  EXPECT_EQ(again.final_event.usage.cached_prompt_tokens, 6 * kBlockSize);
  const KvDiskTierStats stats = *core->Stats().disk_tier;
  EXPECT_GE(stats.loads, 6);
  EXPECT_EQ(stats.rejects, 0);
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
  EXPECT_TRUE(core->CheckIdle().ok());
}

TEST_F(EngineKvTiersTest, ANewEngineFindsThePrefixAndAnotherKvTypeDoesNot) {
  std::vector<TokenId> first_tokens;
  {
    auto core = NewCore(Config());
    first_tokens = Run(*core, 1, prompt_).token_ids;
    Flush(*core);
  }
  {
    auto core = NewCore(Config());
    const Collected again = Run(*core, 1, prompt_);
    EXPECT_EQ(again.token_ids, first_tokens);
    EXPECT_EQ(again.final_event.usage.cached_prompt_tokens, 6 * kBlockSize);
  }
  auto int8 = NewCore(Config(KvType::kInt8));
  const Collected other = Run(*int8, 1, prompt_);
  EXPECT_EQ(other.final_event.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(int8->Stats().disk_tier->loads, 0);
}

TEST_F(EngineKvTiersTest, CorruptFilesAreRefusedAndTheBlocksComputed) {
  std::vector<TokenId> first_tokens;
  {
    auto core = NewCore(Config());
    first_tokens = Run(*core, 1, prompt_).token_ids;
    Flush(*core);
  }
  const std::vector<fs::path> files = BlockFiles();
  ASSERT_GE(files.size(), 6u);
  for (const fs::path& file : files) {  // one bit of each file's middle flipped
    std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(fs::file_size(file) / 2);
    stream.seekg(middle);
    const char byte = static_cast<char>(stream.get() ^ 0x10);
    stream.seekp(middle);
    stream.put(byte);
  }
  auto core = NewCore(Config());
  const Collected again = Run(*core, 1, prompt_);
  EXPECT_EQ(again.token_ids, first_tokens);
  EXPECT_EQ(again.final_event.usage.cached_prompt_tokens, 0);
  const KvDiskTierStats stats = *core->Stats().disk_tier;
  EXPECT_GE(stats.rejects_corrupt, 1);
  EXPECT_EQ(stats.loads, 0);
}

TEST_F(EngineKvTiersTest, AbortWhileLoadingEndsTheRequestAndLeaksNothing) {
  {
    auto core = NewCore(Config());
    Run(*core, 1, prompt_);
    Flush(*core);
  }
  auto core = NewCore(Config());
  Collector collector;
  ASSERT_TRUE(core->Add(5, Greedy(prompt_, kMaxTokens, collector.Sink(5))).ok());
  EXPECT_EQ(core->Stats().num_loading, 1);
  EXPECT_TRUE(core->Abort(5));
  ASSERT_TRUE(collector.finished(5));
  EXPECT_EQ(collector[5].final_event.finish_reason, CompletionReason::kAbort);
  EXPECT_FALSE(core->has_unfinished_requests());
  Drain(*core);
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
  EXPECT_TRUE(core->CheckIdle().ok());
}

TEST_F(EngineKvTiersTest, RequestsBehindOnePrefixShareOneLoad) {
  std::vector<TokenId> first_tokens;
  {
    auto core = NewCore(Config());
    first_tokens = Run(*core, 1, prompt_).token_ids;
    Flush(*core);
  }
  auto core = NewCore(Config());
  Collector collector;
  for (RequestId id = 1; id <= 3; ++id) {
    ASSERT_TRUE(core->Add(id, Greedy(prompt_, kMaxTokens, collector.Sink(id))).ok());
  }
  EXPECT_EQ(core->num_loading(), 3);
  // One of them leaves: the others still wait for the load, which still runs.
  EXPECT_TRUE(core->Abort(2));
  EXPECT_EQ(core->num_loading(), 2);
  Drain(*core);
  for (const RequestId id : {RequestId{1}, RequestId{3}}) {
    EXPECT_EQ(collector[id].token_ids, first_tokens);
    EXPECT_EQ(collector[id].final_event.usage.cached_prompt_tokens, 6 * kBlockSize);
  }
  EXPECT_EQ(collector[2].final_event.finish_reason, CompletionReason::kAbort);
  EXPECT_EQ(core->Stats().disk_tier->load_count, 1);
  EXPECT_TRUE(core->CheckIdle().ok());
}

TEST_F(EngineKvTiersTest, EvictedPrefixComesBackFromHostMemoryAtOnce) {
  EngineConfig config = Config();
  config.kv_tiers.dir.clear();
  config.kv_tiers.host_bytes = int64_t{16} << 20;
  auto core = NewCore(config);
  EXPECT_FALSE(core->Stats().disk_tier.has_value());
  const Collected first = Run(*core, 1, prompt_);
  Evict(*core);

  Collector collector;
  ASSERT_TRUE(core->Add(2, Greedy(prompt_, kMaxTokens, collector.Sink(2))).ok());
  EXPECT_EQ(core->num_loading(), 0) << "host memory is copied back at once, nothing waits";
  Drain(*core);
  EXPECT_EQ(collector[2].token_ids, first.token_ids);
  EXPECT_EQ(collector[2].final_event.usage.cached_prompt_tokens, 6 * kBlockSize);
  const KvHostTierStats stats = *core->Stats().host_tier;
  EXPECT_GE(stats.loads, 6);
  EXPECT_GT(stats.stores, 6 * 8);
  EXPECT_FALSE(fs::exists(dir_)) << "nothing on disk";
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
  EXPECT_TRUE(core->CheckIdle().ok());
}

TEST_F(EngineKvTiersTest, BlocksLoadedFromDiskStayInHostMemory) {
  EngineConfig config = Config();
  config.kv_tiers.host_bytes = int64_t{16} << 20;
  std::vector<TokenId> first_tokens;
  {
    auto core = NewCore(config);
    first_tokens = Run(*core, 1, prompt_).token_ids;
    Flush(*core);
  }
  auto core = NewCore(config);  // host memory starts empty; the disk holds the prompt
  const Collected from_disk = Run(*core, 1, prompt_);
  EXPECT_EQ(from_disk.token_ids, first_tokens);
  EXPECT_EQ(from_disk.final_event.usage.cached_prompt_tokens, 6 * kBlockSize);
  const int64_t disk_loads = core->Stats().disk_tier->loads;
  EXPECT_GE(disk_loads, 6);
  Evict(*core);
  const Collected from_host = Run(*core, 2, prompt_);
  EXPECT_EQ(from_host.token_ids, first_tokens);
  EXPECT_EQ(from_host.final_event.usage.cached_prompt_tokens, 6 * kBlockSize);
  EXPECT_EQ(core->Stats().disk_tier->loads, disk_loads) << "not read from disk again";
  EXPECT_GE(core->Stats().host_tier->loads, 6);
  EXPECT_TRUE(core->CheckIdle().ok());
}

}  // namespace
}  // namespace tokenmill::testing
